"""The frontier's robots.txt prefetch window.

The rules, the fetcher and the slow-down gates are the crawl's robots service
(:func:`scrapy_rep._robots.robots_service`). Without it (``ROBOTSTXT_OBEY``
off, or the robots middleware not installed), the queue still paces slots by
their delay and concurrency.

:class:`Prefetch` starts an origin's robots.txt fetch when a request for it
enters the queue, within a window that docs/scheduling.md ("robots.txt ahead
of time") describes. A fetch the robots middleware starts itself is not
counted here (the requests waiting for it bound it).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from scrapy_rep import _clock, _timers

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.statscollectors import StatsCollector

    from scrapy_rep._robots import RobotsService
    from scrapy_rep.origin import Origin

__all__ = ["SLOW_SHARES", "Prefetch"]

SLOW_SHARES = 8
"""A fetch is slow once it has run for this share of REP_FETCH_TIMEOUT; slow
ones may be (SLOW_SHARES - 1) x REP_MAX_FETCHES (see the module docstring)."""


class Prefetch:
    """robots.txt fetches started ahead of the requests that need them.

    ``on_known(origin)`` is called when a fetch started here ends (its verdict
    is known, or the origin unreachable). At most ``ahead`` origins fetched
    here may still have requests in the queue (:meth:`queued`, :meth:`taken`).
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
        config = robots.config
        self._window = config.max_fetches  # 0: no cap
        self._slow_room = (SLOW_SHARES - 1) * config.max_fetches
        self._slow_after = config.fetch_timeout / SLOW_SHARES
        # The slow ones hold no place of CONCURRENT_REQUESTS either: there,
        # hanging servers would stop every page of the crawl.
        files = robots.fetcher.download.files
        files.most_out = max(files.most_out, SLOW_SHARES * config.max_fetches)
        # fetches in the window, with the timer that finds them slow
        self._fresh: dict[Origin, _timers.Timer | None] = {}
        self._stuck: OrderedDict[Origin, None] = OrderedDict()  # slow, no room yet
        self._slow: set[Origin] = set()  # slow, out of the window
        self._waiting: OrderedDict[Origin, Request] = OrderedDict()
        self._queued: dict[Origin, int] = {}  # requests in the queue, by origin
        self._ahead: set[Origin] = set()  # fetched here, requests still queued
        self._moved = _clock.monotonic()  # when a fetch last started or ended

    def moving(self, origin: Origin, within: float) -> bool:
        """Whether ``origin``'s fetch runs or waits its turn here, and the
        window started or ended a fetch in the last ``within`` seconds."""
        known = origin in self._fresh or origin in self._slow or origin in self._waiting
        return known and _clock.monotonic() - self._moved < within

    def want(self, origin: Origin, request: Request) -> None:
        """Have ``origin``'s robots.txt fetched for ``request`` (once)."""
        if origin in self._fresh or origin in self._slow:
            return
        if self._full():
            self._waiting.setdefault(origin, request)
            return
        self._waiting.pop(origin, None)
        fetched = self._robots.prefetch(origin, request)
        if fetched.called:  # known already: nothing to count
            fetched.addBoth(self._known, origin)
            return
        self._stats.inc_value("rep/frontier/robotstxt_prefetched")
        self._moved = _clock.monotonic()
        # Timed from the loop's next turn: a run of pushes is not the server's time.
        self._fresh[origin] = _timers.call_later(0, self._time, origin) if self._window else None
        fetched.addBoth(self._done, origin)

    def retry(self) -> None:
        """Start the waiting origins' fetches while the window has room."""
        while self._waiting and not self._full():
            origin, request = self._waiting.popitem(last=False)
            self.want(origin, request)

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

    def _full(self) -> bool:
        if len(self._ahead) + len(self._fresh) + len(self._slow) >= self._limit:
            return True
        return 0 < self._window <= len(self._fresh)

    def _time(self, origin: Origin) -> None:
        if origin in self._fresh:
            self._fresh[origin] = self._slow_timer(origin)

    def _slow_timer(self, origin: Origin) -> _timers.Timer:
        due = _clock.monotonic() + self._slow_after
        return _timers.call_later(self._slow_after, self._turned_slow, origin, due)

    def _turned_slow(self, origin: Origin, due: float) -> None:
        """``origin``'s fetch has run for an eighth of its timeout: it gives
        its place in the window up, if the slow allowance has room."""
        if origin not in self._fresh:
            return
        if _clock.monotonic() - due > self._slow_after / 2:
            # Our own event loop was busy (a run of pushes): the server has
            # not had the time; a fetch is slow after that long of a free loop.
            self._fresh[origin] = self._slow_timer(origin)
            return
        self._fresh[origin] = None
        self._stats.inc_value("rep/frontier/robotstxt_slow")
        if len(self._slow) >= self._slow_room:
            self._stuck[origin] = None  # keeps its place until a slow one ends
            return
        del self._fresh[origin]
        self._slow.add(origin)
        self.retry()

    def _done(self, _: Any, origin: Origin) -> None:
        self._moved = _clock.monotonic()
        timer = self._fresh.pop(origin, None)
        if timer is not None:
            timer.cancel()
        self._stuck.pop(origin, None)
        if origin in self._slow:
            self._slow.discard(origin)
            if self._stuck:  # the oldest slow fetch in the window takes the room
                stuck, _ = self._stuck.popitem(last=False)
                del self._fresh[stuck]
                self._slow.add(stuck)
        self._known(None, origin)
        self.retry()

    def _known(self, _: Any, origin: Origin) -> None:
        if self._queued.get(origin):
            self._ahead.add(origin)
        self._on_known(origin)
