"""Waiting inside the middleware without holding a place in CONCURRENT_REQUESTS.

Scrapy counts a request as active in the downloader from the moment its
downloader middlewares start (``Downloader.active``), so requests waiting in
``process_request`` for their origin's robots.txt (or, with shared state, for
their cluster-wide Crawl-delay turn) fill ``CONCURRENT_REQUESTS`` and stall
origins that could go ahead. While a request waits, we
take it out of ``Downloader.active`` and put it back before
``process_request`` returns (``Downloader.fetch`` removes it when the
download ends, so it must be there again). At most ``REP_MAX_WAITING``
requests wait that way; the others wait as in Scrapy, inside the limit. So the
downloader never holds more than ``CONCURRENT_REQUESTS + REP_MAX_WAITING``
requests, and origins' own concurrency and delays still apply to each one.

What else keeps this sound:

- the engine keeps a waiting request in its own in-progress set, so it waits
  for it before closing; ``spider_is_idle`` only looks at
  ``Downloader.active``, so the middleware answers ``spider_idle`` with
  ``DontCloseSpider`` while any request is detached;
- after taking requests out, the engine is woken (``_slot.nextcall``) so it
  pulls more from the scheduler at once instead of at its next 5 s heartbeat.

These are Scrapy internals (2.14 - 2.19): :func:`internals_problems` lists
what is missing and tests/test_middleware_waiting.py fails loudly when any of
it changes; when something is missing, requests simply wait as in Scrapy.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


def internals_problems(engine: Any) -> list[str]:
    """What :class:`Waiting` needs from Scrapy's engine and does not find."""
    problems = []
    active = getattr(getattr(engine, "downloader", None), "active", None)
    if not isinstance(active, set):
        problems.append(f"Downloader.active is {type(active).__name__}, expected set")
    slot = getattr(engine, "_slot", None)
    if slot is not None:
        if not callable(getattr(getattr(slot, "nextcall", None), "schedule", None)):
            problems.append("ExecutionEngine._slot.nextcall.schedule() is missing")
        if not hasattr(slot, "closing"):
            problems.append("ExecutionEngine._slot.closing is missing")
    return problems


class Waiting:
    """Requests waiting for robots.txt outside the downloader's active set."""

    __slots__ = ("_checked", "_crawler", "_supported", "cap", "count")

    def __init__(self, crawler: Crawler, cap: int) -> None:
        self._crawler = crawler
        self.cap = cap
        self.count = 0
        self._checked = False
        self._supported = False

    def _check(self) -> bool:
        self._checked = True
        engine = self._crawler.engine
        problems = internals_problems(engine) if engine is not None else ["no engine"]
        if problems:
            logger.warning(
                "scrapy-rep: requests waiting for robots.txt count against "
                "CONCURRENT_REQUESTS with this version of Scrapy (%s)",
                "; ".join(problems),
            )
        self._supported = not problems
        return self._supported

    def detach(self, request: Request) -> bool:
        """Take ``request`` out of the downloader's active set if allowed;
        True if it was taken out (then :meth:`reattach` must follow)."""
        if self.count >= self.cap:
            return False
        if not (self._supported if self._checked else self._check()):
            return False
        engine: Any = self._crawler.engine
        active: set[Request] = engine.downloader.active
        if request not in active:
            return False
        active.discard(request)
        self.count += 1
        slot = engine._slot
        if slot is not None:
            slot.nextcall.schedule()
        return True

    def reattach(self, request: Request) -> None:
        engine: Any = self._crawler.engine
        engine.downloader.active.add(request)
        self.count -= 1

    def engine_closing(self) -> bool:
        """True once the engine has started closing the spider."""
        engine: Any = self._crawler.engine
        if engine is None:
            return True
        slot = getattr(engine, "_slot", None)
        return slot is None or getattr(slot, "closing", None) is not None
