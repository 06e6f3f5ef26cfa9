"""The frontier's robots.txt prefetch window.

The rules, the fetcher and the slow-down gates are the crawl's robots service
(:func:`scrapy_rep._robots.robots_service`). Without it (``ROBOTSTXT_OBEY``
off, or the robots middleware not installed), the queue still paces slots by
their delay and concurrency.

:class:`Prefetch` starts the robots.txt fetch of an origin when a request
for it enters the queue, so that its verdict is known by its turn. The window
is the fetcher's: at most ``REP_MAX_FETCHES`` robots.txt downloads run at
once outside ``CONCURRENT_REQUESTS``, and at most half of
``REP_CACHE_MAX_ORIGINS`` origins fetched ahead may still wait in the queue;
origins met while it is full wait, in the order met, and start as fetches
end or requests leave (or when the engine next asks the queue for a request).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.statscollectors import StatsCollector

    from scrapy_rep._robots import RobotsService
    from scrapy_rep.origin import Origin


class Prefetch:
    """robots.txt fetches started ahead of the requests that need them.

    ``on_known(origin)`` is called when a fetch started here ends (its verdict
    is known now, or the origin is found unreachable). At most ``ahead``
    origins fetched here may still have requests in the queue: fetching
    further ahead would push rules out of the REP_CACHE_MAX_ORIGINS cache
    before their requests leave (the queue reports them with :meth:`queued`
    and :meth:`taken`).
    """

    def __init__(
        self,
        robots: RobotsService,
        stats: StatsCollector,
        on_known: Callable[[Origin], None],
        ahead: int,
    ) -> None:
        self._robots = robots
        self._stats = stats
        self._on_known = on_known
        self._limit = max(ahead, 1)
        self._running: set[Origin] = set()
        self._waiting: OrderedDict[Origin, Request] = OrderedDict()
        self._queued: dict[Origin, int] = {}  # requests in the queue, by origin
        self._ahead: set[Origin] = set()  # fetched here, requests still queued

    def want(self, origin: Origin, request: Request) -> None:
        """Have ``origin``'s robots.txt fetched for ``request`` (once)."""
        if origin in self._running:
            return
        full = len(self._ahead) + len(self._running) >= self._limit
        fetched = None if full else self._robots.prefetch(origin, request)
        if fetched is None:  # the window is full
            self._waiting.setdefault(origin, request)
            return
        self._waiting.pop(origin, None)
        self._running.add(origin)
        if not fetched.called:
            self._stats.inc_value("rep/frontier/robotstxt_prefetched")
        fetched.addBoth(self._done, origin)

    def retry(self) -> None:
        """Start the waiting origins' fetches while the window has room."""
        while self._waiting:
            origin, request = next(iter(self._waiting.items()))
            self.want(origin, request)
            if origin in self._waiting:  # still full
                return

    def queued(self, origin: Origin) -> None:
        """A request of ``origin`` entered the queue."""
        self._queued[origin] = self._queued.get(origin, 0) + 1

    def taken(self, origin: Origin) -> None:
        """A request of ``origin`` left the queue."""
        left = self._queued.get(origin, 0) - 1
        if left > 0:
            self._queued[origin] = left
            return
        self._queued.pop(origin, None)
        if origin in self._ahead:
            self._ahead.discard(origin)
            self.retry()

    def _done(self, _: Any, origin: Origin) -> None:
        self._running.discard(origin)
        if self._queued.get(origin):
            self._ahead.add(origin)
        self._on_known(origin)
        self.retry()
