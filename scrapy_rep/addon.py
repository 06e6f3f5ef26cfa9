"""``scrapy_rep.Addon``: ``ADDONS = {"scrapy_rep.Addon": 100}``.

What it enables, at which order and when: :class:`Addon`. ``ROBOTSTXT_OBEY``
stays the switch: with it off, the middlewares disable themselves at start.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as ScrapyRobotsTxtMiddleware
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.misc import load_object

from scrapy_rep import _compat

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

MIDDLEWARE_ORDER = 100
META_MIDDLEWARE_ORDER = 100
MIDDLEWARE = "scrapy_rep.RobotsTxtMiddleware"
META_MIDDLEWARE = "scrapy_rep.MetaRobotsMiddleware"
DECOMPRESSION_MIDDLEWARE = "scrapy_rep.BoundedDecompressionMiddleware"
USAGE_MIDDLEWARE = "scrapy_rep.UsageMiddleware"
PROVENANCE_MIDDLEWARE = "scrapy_rep.ProvenanceMiddleware"
FRONTIER_QUEUE = "scrapy_rep.PolitePriorityQueue"

logger = logging.getLogger(__name__)


class Addon:
    """Enables scrapy-rep in a Scrapy project: ``ADDONS = {"scrapy_rep.Addon": 100}``.

    What it sets (each only when the project has not named it itself):

    - ``DOWNLOADER_MIDDLEWARES``: ``scrapy_rep.RobotsTxtMiddleware`` at 100
      (the place of Scrapy's own, which it disables with None);
      ``scrapy_rep.BoundedDecompressionMiddleware`` at 595, after Scrapy's
      HttpCompressionMiddleware (590), so compressed robots.txt answers are
      inflated with a bound; ``scrapy_rep.UsageMiddleware`` at 101, only when
      ``REP_PURPOSES`` names a purpose.
    - ``SPIDER_MIDDLEWARES``: ``scrapy_rep.MetaRobotsMiddleware`` at 100 (page
      directives: nofollow, noindex), when ``REP_META_ROBOTS`` is on (default);
      ``scrapy_rep.ProvenanceMiddleware`` at 40 (below every other, so it fills
      the items they let out), when ``REP_PROVENANCE_FIELD`` names a field.
    - ``SCHEDULER_PRIORITY_QUEUE = "scrapy_rep.PolitePriorityQueue"`` (the
      frontier), at the "addon" settings priority, when the project keeps
      Scrapy's default queue; a queue of the project's own is kept, with one
      WARNING.

    Components are added with Scrapy's ``setdefault_in_component_priority_dict``:
    a component your settings already name (at any order, or None) keeps your
    value, and the setting keeps its priority, so ``settings.py``, ``-s`` and
    ``custom_settings`` always win. Before the crawler exists it checks the
    installed Scrapy (2.14 or later): an older one stops ``scrapy crawl``.

    Turning parts off:

    - everything: ``ROBOTSTXT_OBEY = False`` (the middlewares turn themselves off);
    - the frontier: ``REP_FRONTIER = False`` (Scrapy's default queue stays);
    - page directives: ``REP_META_ROBOTS = False``;
    - usage preferences: leave ``REP_PURPOSES`` unset (the default);
    - one component: name it with None, e.g. ``DOWNLOADER_MIDDLEWARES =
      {"scrapy_rep.BoundedDecompressionMiddleware": None}``, or at an order of
      your own to move it.

    Keeping Scrapy's own ``RobotsTxtMiddleware`` in ``DOWNLOADER_MIDDLEWARES``
    runs both: one WARNING at start says what that does. docs/quickstart.md
    has the details.
    """

    @classmethod
    def update_pre_crawler_settings(cls, settings: BaseSettings) -> None:
        # Before the crawler exists: an unsupported Scrapy stops `scrapy crawl`
        # with exit status 1 (later, Scrapy would log the error and exit 0).
        _compat.check()

    def update_settings(self, settings: BaseSettings) -> None:
        from scrapy_rep.decompression import ORDER as DECOMPRESSION_ORDER
        from scrapy_rep.decompression import BoundedDecompressionMiddleware
        from scrapy_rep.meta import MetaRobotsMiddleware
        from scrapy_rep.middleware import RobotsTxtMiddleware

        def enable(name: str, component: type, order: int | None, path: str | None) -> None:
            _compat.set_component(settings, name, component, order, default=True, path=path)

        middlewares = "DOWNLOADER_MIDDLEWARES"
        enable(middlewares, RobotsTxtMiddleware, MIDDLEWARE_ORDER, MIDDLEWARE)
        enable(middlewares, ScrapyRobotsTxtMiddleware, None, None)
        enable(
            middlewares,
            BoundedDecompressionMiddleware,
            DECOMPRESSION_ORDER,
            DECOMPRESSION_MIDDLEWARE,
        )
        purposes = settings.get("REP_PURPOSES")
        if purposes and (not isinstance(purposes, str) or purposes.strip(", ")):
            from scrapy_rep.usage_middleware import ORDER as USAGE_ORDER
            from scrapy_rep.usage_middleware import UsageMiddleware

            enable(middlewares, UsageMiddleware, USAGE_ORDER, USAGE_MIDDLEWARE)
        if settings.get("REP_PROVENANCE_FIELD"):
            from scrapy_rep.evidence.items import ORDER as PROVENANCE_ORDER
            from scrapy_rep.evidence.items import ProvenanceMiddleware

            enable(
                "SPIDER_MIDDLEWARES", ProvenanceMiddleware, PROVENANCE_ORDER, PROVENANCE_MIDDLEWARE
            )
        from scrapy_rep.config import frontier_wanted

        if frontier_wanted(settings):
            _use_frontier(settings)
        try:
            meta_robots = settings.getbool("REP_META_ROBOTS", True)
        except ValueError:
            meta_robots = True  # the middlewares report the invalid value at start
        if meta_robots:
            enable(
                "SPIDER_MIDDLEWARES", MetaRobotsMiddleware, META_MIDDLEWARE_ORDER, META_MIDDLEWARE
            )


def _use_frontier(settings: BaseSettings) -> None:
    """Scrapy's default priority queue gives way to the frontier; a project's
    own queue stays, with one WARNING."""
    name = "SCHEDULER_PRIORITY_QUEUE"
    if (settings.getpriority(name) or 0) <= SETTINGS_PRIORITIES["default"]:
        settings.set(name, FRONTIER_QUEUE, priority="addon")
        return
    queue = settings.get(name)
    if _is_frontier(queue):
        return
    shown = queue if isinstance(queue, str) else getattr(queue, "__qualname__", repr(queue))
    logger.warning(
        "SCHEDULER_PRIORITY_QUEUE = %r is this project's own, so scrapy-rep's frontier "
        "(%s) is not used: requests for sites that ask for a Crawl-delay, are paused "
        "after a 429/503 or whose robots.txt is not known yet leave the scheduler "
        "anyway and wait in the downloader, where they take places of "
        "CONCURRENT_REQUESTS (up to REP_MAX_WAITING of them wait outside it) and other "
        "sites can crawl several times slower. To combine both, make your queue a "
        "subclass of %s, or remove the setting to use it as is; REP_FRONTIER = False "
        "silences this warning (docs/scheduling.md).",
        shown,
        FRONTIER_QUEUE,
        FRONTIER_QUEUE,
    )


def _is_frontier(queue: Any) -> bool:
    from scrapy_rep.frontier import PolitePriorityQueue

    if isinstance(queue, str):
        try:
            queue = load_object(queue)
        except (ImportError, NameError, ValueError, AttributeError):
            return False
    return isinstance(queue, type) and issubclass(queue, PolitePriorityQueue)
