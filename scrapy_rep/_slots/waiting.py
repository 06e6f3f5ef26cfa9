"""Requests waiting in a middleware without holding a place in CONCURRENT_REQUESTS.

Scrapy counts a request as active from the start of its downloader
middlewares to the end of its last ``process_response``, so requests waiting
there (for robots.txt, a cluster-wide Crawl-delay turn, a tdmrep.json) would
fill ``CONCURRENT_REQUESTS`` and stall origins that could go ahead. While one
waits, it is out of the downloader's active set (put back before the
middleware returns: the downloader removes it when its download ends), up to
``REP_MAX_WAITING`` at once, all kinds together; the others wait inside the
limit. The engine still waits for them before closing, but its idle check
does not see them: ``spider_idle`` is answered with ``DontCloseSpider`` while
any is detached (by the ledger). The engine is woken after a request is taken
out, to pull more at once; every sleep ends early, with False, once it closes.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.asyncio import create_looping_call
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from scrapy_rep import _timers
from scrapy_rep._slots.active import engine_closing, waiting_problems
from scrapy_rep._slots.ledger import Ledger

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy import Request
    from scrapy.crawler import Crawler

CLOSING_CHECK_INTERVAL = 1.0
"""Seconds between checks, while anything sleeps, of whether the engine is closing."""


class Waiting:
    """Requests waiting outside the downloader's active set, and their sleeps."""

    def __init__(self, crawler: Crawler, cap: int) -> None:
        self._crawler = crawler
        self.ledger = Ledger(crawler)
        """The crawl's requests out (:mod:`scrapy_rep._slots.ledger`)."""
        self.cap = cap
        self.count = 0
        self._supported: bool | None = None  # checked on first use: no engine before
        self._sleepers: dict[Deferred[bool], _timers.Timer] = {}
        self._closing_watch: Any = None
        crawler.signals.connect(self.wake_all, signal=signals.engine_stopped)

    # -- out of the active set -------------------------------------------------

    @contextmanager
    def detached(self, request: Request) -> Iterator[None]:
        """While the block runs, ``request`` is out of the downloader's active
        set, if allowed (else it waits inside CONCURRENT_REQUESTS)."""
        if self.count >= self.cap or not self._can_detach() or not self.ledger.detach(request):
            yield
            return
        self.count += 1
        try:
            yield
        finally:
            self.ledger.rejoin(request)
            self.count -= 1

    async def woken(self, request: Request, wake: Deferred[bool]) -> bool:
        """What ``wake`` fires with (True: go; False: the spider closes),
        waited for with ``request`` detached."""
        with self.detached(request):
            return await maybe_deferred_to_future(wake)

    def _can_detach(self) -> bool:
        if self._supported is None:  # what is missing was logged at start (_slots)
            self._supported = not waiting_problems(self._crawler.engine)
        return self._supported

    # -- sleeping ----------------------------------------------------------------

    async def sleep(self, seconds: float) -> bool:
        """Sleep; False if woken early because the spider is closing."""
        wake: Deferred[bool] = Deferred()
        self._sleepers[wake] = _timers.call_later(max(seconds, 0.0), self._wake, wake, True)
        if self._closing_watch is None:
            self._closing_watch = create_looping_call(self._watch_closing)
            self._closing_watch.start(CLOSING_CHECK_INTERVAL, now=False)
        return await maybe_deferred_to_future(wake)

    def wake_all(self) -> None:
        """End every sleep now (with False): the spider closes."""
        for wake in list(self._sleepers):
            self._wake(wake, False)
        self._stop_watch()

    def _wake(self, wake: Deferred[bool], timer_fired: bool) -> None:
        call = self._sleepers.pop(wake, None)
        if call is not None and not timer_fired:
            call.cancel()
        if not wake.called:
            wake.callback(timer_fired)

    def _watch_closing(self) -> None:
        if self._sleepers and engine_closing(self._crawler.engine):
            self.wake_all()
        elif not self._sleepers:
            self._stop_watch()

    def _stop_watch(self) -> None:
        if self._closing_watch is not None:
            self._closing_watch.stop()
            self._closing_watch = None
