"""Scrapy's engine and downloader internals, in one room: per-slot delays, pauses, waiting.

Scrapy has no public API for per-slot delays or for requests that wait inside a
downloader middleware, so only this package touches those internals (its
modules: docs/development.md's module map). Each ``*_problems`` function lists
what its module needs and does not find: :func:`log_problems` logs them at start
naming the Scrapy version, and tests fail when any of it changes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy_rep._slots.active import engine_closing, slot_key, waiting_problems
from scrapy_rep._slots.deadline import clock_deadline
from scrapy_rep._slots.delays import SlotDelays, internals_problems
from scrapy_rep._slots.ledger import REACH_TIMEOUT, Ledger
from scrapy_rep._slots.limits import SlotLimits, limit_problems
from scrapy_rep._slots.pauses import SlotPauses, pause_problems
from scrapy_rep._slots.waiting import Waiting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


__all__ = [
    "REACH_TIMEOUT",
    "Ledger",
    "SlotDelays",
    "SlotLimits",
    "SlotPauses",
    "Waiting",
    "clock_deadline",
    "engine_closing",
    "internals_problems",
    "limit_problems",
    "log_problems",
    "pause_problems",
    "slot_key",
    "waiting_problems",
]

logger = logging.getLogger(__name__)


def log_problems(
    crawler: Crawler, *, delays: bool, pauses: bool = False, limits: bool = False
) -> None:
    """Log what scrapy-rep needs from the running engine and does not find:
    waiting and (``delays``) Crawl-delay as one ERROR, pausing slots
    (``pauses``) and holding them to their concurrency (``limits``) as one
    WARNING each. Called at spider_opened, so that a Scrapy release that moved
    an internal is reported at start, never silently."""
    import scrapy

    engine = crawler.engine
    problems = waiting_problems(engine)
    if delays and engine is not None:
        problems += internals_problems(getattr(engine, "downloader", None))
    if problems:
        logger.error(
            "scrapy_rep.RobotsTxtMiddleware does not fully work with Scrapy %s: %s. "
            "Requests waiting for robots.txt may count against CONCURRENT_REQUESTS%s. "
            "Please report this.",
            scrapy.__version__,
            "; ".join(problems),
            ", and Crawl-delay may not be applied" if delays else "",
        )
    downloader = getattr(engine, "downloader", None)
    missing = pause_problems(downloader) if pauses else []
    if missing:
        logger.warning(
            "Cannot pause Scrapy %s's download slots: %s. A site that answers 429 or 503 "
            "is paused only for the requests that have not reached its download slot yet. "
            "Please report this.",
            scrapy.__version__,
            "; ".join(missing),
        )
    missing = limit_problems(downloader) if limits else []
    if missing:
        logger.warning(
            "Cannot hold Scrapy %s's download slots to their concurrency: %s. On the "
            "asyncio reactor, requests released together (by their robots.txt) may "
            "reach a site all at once. Please report this.",
            scrapy.__version__,
            "; ".join(missing),
        )
