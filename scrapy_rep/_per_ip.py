"""``CONCURRENT_REQUESTS_PER_IP`` with a scheduler queue that keeps requests per
download slot: refused at start with one line that names a fix that works.

Scrapy keys slots by IP address only once a request is under way, so a queue
per slot (the frontier, Scrapy's default) cannot know them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.misc import load_object

from scrapy_rep.exceptions import InvalidSetting

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

SETTING = "CONCURRENT_REQUESTS_PER_IP"
ACCEPTING_QUEUE = "scrapy.pqueues.ScrapyPriorityQueue"


def refusal(queue: str, per_ip: object) -> str:
    """Why ``queue`` cannot run with ``CONCURRENT_REQUESTS_PER_IP = per_ip``, and
    the two fixes (to follow the setting's name)."""
    return (
        f"{per_ip!r} cannot be used with the scheduler queue {queue}, which keeps "
        "requests per download slot, and slots keyed by IP address are known only once a "
        f"request is under way. Set {SETTING} = 0 and limit each site with "
        "CONCURRENT_REQUESTS_PER_DOMAIN (Scrapy 2.19 deprecates the per-IP setting), or "
        f"keep it with SCHEDULER_PRIORITY_QUEUE = {ACCEPTING_QUEUE!r} and REP_FRONTIER = "
        "False (one queue for all sites: docs/scheduling.md)"
    )


def check(settings: BaseSettings) -> None:
    """InvalidSetting when Scrapy's scheduler would build a per-slot priority
    queue while ``CONCURRENT_REQUESTS_PER_IP`` is set (the queue would refuse
    it later, in a long traceback)."""
    try:
        per_ip = int(settings.get(SETTING) or 0)  # .get: Scrapy 2.19 warns on every read
    except (TypeError, ValueError):
        return  # Scrapy's downloader reports it
    if per_ip == 0:
        return
    queue = _refusing_queue(settings)
    if queue is not None:
        raise InvalidSetting(SETTING, refusal(queue, settings.get(SETTING)))


def _refusing_queue(settings: BaseSettings) -> str | None:
    """The name of the priority queue Scrapy's scheduler will build, when it is
    one that keeps requests per download slot."""
    from scrapy.core.scheduler import Scheduler
    from scrapy.pqueues import DownloaderAwarePriorityQueue  # the frontier's base

    try:
        scheduler = _loaded(settings.get("SCHEDULER"))
        queue = _loaded(settings.get("SCHEDULER_PRIORITY_QUEUE"))
    except (ImportError, NameError, ValueError, AttributeError):
        return None  # Scrapy reports what does not load
    if not (isinstance(scheduler, type) and issubclass(scheduler, Scheduler)):
        return None  # another scheduler (scrapy-redis's) does not use the setting
    if isinstance(queue, type) and issubclass(queue, DownloaderAwarePriorityQueue):
        shown = settings.get("SCHEDULER_PRIORITY_QUEUE")
        return shown if isinstance(shown, str) else f"{queue.__module__}.{queue.__qualname__}"
    return None


def _loaded(value: object) -> object:
    return load_object(value) if isinstance(value, str) else value
