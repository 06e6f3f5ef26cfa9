"""Scrapy's engine and downloader internals, in one room: per-slot delays, pauses, waiting.

Scrapy has no public API for per-slot delays or for requests that wait inside
a downloader middleware, so this package is the only part of scrapy-rep that
touches the engine's and downloader's internals (with :mod:`scrapy_rep._compat`
for what differs between Scrapy releases): ``Downloader.slots``,
``Downloader.per_slot_settings`` (the live copy of ``DOWNLOAD_SLOTS``),
``Slot.delay``, ``Slot.jitter``, ``Slot.latercall``,
``Downloader._process_queue``, ``Downloader._latercall``, ``Downloader.active``,
``Slot.concurrency``, ``Slot.queue``, ``Slot.active``, the HTTP/1.1 handler's
timeout callback (``_cb_timeout``),
``Downloader.domain_concurrency``, ``Downloader.ip_concurrency`` and the
engine's ``_slot`` (``nextcall``, ``closing``).
:func:`internals_problems`, :func:`pause_problems`, :func:`limit_problems` and
:func:`waiting_problems` list what is missing; :func:`log_problems` logs them at
start naming the Scrapy version, and tests/test_slots.py, tests/test_slowdown.py
and tests/test_slot_limit.py fail when any of it changes.

- :mod:`~scrapy_rep._slots.active`: the downloader's active set and the
  engine's state, for requests that wait inside a middleware;
- :mod:`~scrapy_rep._slots.delays`: Crawl-delay as a slot's minimum delay
  (:class:`SlotDelays`);
- :mod:`~scrapy_rep._slots.pauses`: slots paused for a 429/503 answer
  (:class:`SlotPauses`);
- :mod:`~scrapy_rep._slots.headers`: the bound on the headers of scrapy-rep's
  own downloads, a process-wide patch of Twisted's HTTP/1.1 client parser.
- :mod:`~scrapy_rep._slots.ledger`: the crawl's one record of requests out,
  the one receiver of Scrapy's downloader signals, which the frontier counts
  a slot's requests out by (:class:`Ledger`);
- :mod:`~scrapy_rep._slots.limits`: at most a slot's concurrency of requests
  in flight, which Scrapy does not hold on the asyncio reactor, for requests
  no scrapy-rep queue handed out (:class:`SlotLimits`);
- :mod:`~scrapy_rep._slots.waiting`: requests waiting in a middleware outside
  the downloader's active set, and their sleeps (:class:`Waiting`);
- :mod:`~scrapy_rep._slots.departures`: each request leaving
  ``Downloader.active`` reported (replaces that set with one that reports;
  for the frontier); :mod:`~scrapy_rep._slots.readiness` and
  :mod:`~scrapy_rep._slots.wakeup` are the frontier's other two;
- :mod:`~scrapy_rep._slots.deadline`: a robots.txt or tdmrep.json download's
  ``download_timeout`` kept on scrapy-rep's clock too, ended early through
  the HTTP/1.1 handler's own timeout (its ``_cb_timeout``).

Everything is imported from here (``from scrapy_rep._slots import SlotDelays``).
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
) -> list[str]:
    """Log, as one ERROR naming the Scrapy version, what scrapy-rep needs from
    the running engine and does not find (``delays``: Crawl-delay is obeyed);
    with ``pauses`` (slowing down for 429/503), what pausing a slot needs, as
    one WARNING (the requests held in scrapy-rep still wait); with ``limits``
    (REP_SLOT_LIMIT), what holding slots to their concurrency needs, as one
    WARNING. Called at
    spider_opened, before any request: a Scrapy release that moved an
    internal is reported at start, never silently."""
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
    found = list(problems)
    missing = pause_problems(downloader) if pauses else []
    if missing:
        logger.warning(
            "Cannot pause Scrapy %s's download slots: %s. A site that answers 429 or 503 "
            "is paused only for the requests that have not reached its download slot yet. "
            "Please report this.",
            scrapy.__version__,
            "; ".join(missing),
        )
        found += missing
    missing = limit_problems(downloader) if limits else []
    if missing:
        logger.warning(
            "Cannot hold Scrapy %s's download slots to their concurrency: %s. On the "
            "asyncio reactor, requests released together (by their robots.txt) may "
            "reach a site all at once. Please report this.",
            scrapy.__version__,
            "; ".join(missing),
        )
        found += missing
    return found
