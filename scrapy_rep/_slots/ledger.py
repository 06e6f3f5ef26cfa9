"""The crawl's one record of requests out: Scrapy's downloader signals, received once.

What follows requests into Scrapy's downloader (the slot limit, the slow-down
gates, the frontier, the Redis queue, the cluster's turns, the own downloads)
asks the crawl's :class:`Ledger` instead of connecting receivers of its own
(docs/development.md, "Requests out are one model too"): a Scrapy receiver,
connected only while followed, costs every request some microseconds, a plain
callback far less. It knows the requests let go to a slot (:meth:`Ledger.let_go`,
out until the downloader is done with them or they are found in no slot
within :data:`REACH_TIMEOUT`; with the frontier watching ``Downloader.active``,
told by a direct call, else by two receivers: about 63,500 instructions a
request, 13.5 µs), the requests a scheduler queue that holds its slot's
concurrency handed out (:meth:`Ledger.hand_out`, out until it is told they
left for good), and those detached from ``Downloader.active`` but alive
(:meth:`Ledger.detach`: ``spider_idle`` is answered with ``DontCloseSpider``
while any is).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from scrapy import signals
from scrapy.exceptions import DontCloseSpider

from scrapy_rep import _timers
from scrapy_rep._slots import departures
from scrapy_rep._slots.active import leave_active

if TYPE_CHECKING:
    from collections.abc import Callable
    from collections.abc import Set as AbstractSet

    from scrapy import Request
    from scrapy.crawler import Crawler

REACH_TIMEOUT = 0.5
"""Seconds a request let go by scrapy-rep has to reach its download slot (the
slot limit, the slow-down gates): one not there by then no longer counts as out."""

UNTOLD_BOUND = 10_000
"""Requests handed out remembered, when their queue is not told they left,
before every one no longer alive is forgotten (then at twice as many)."""

Event = Literal["reached", "left", "received"]
_SIGNALS: dict[str, Any] = {
    "reached": signals.request_reached_downloader,
    "left": signals.request_left_downloader,
    "received": signals.response_received,
}


class Ledger:
    """The crawl's requests out, per slot (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self._crawler = crawler
        # per event: its followers (a new tuple on each change: safe while they run)
        self._followers: dict[str, tuple[Callable[[Request], None], ...]] = {}
        self._quieting: dict[str, _timers.Timer] = {}
        self.detached: set[Request] = set()
        """Out of ``Downloader.active``, waiting in a middleware or downloading."""
        self._told: dict[Request, Callable[[Request], None]] = {}  # parted: whom to tell
        # Let go, not seen in their slot yet: this sweep period's, and the last one's.
        self._new: dict[Request, str] = {}
        self._older: dict[Request, str] = {}
        self._inside: dict[Request, str] = {}  # seen in their slot by a sweep
        self._sweep: _timers.Timer | None = None
        self._done: Callable[[Request, str, bool], None] | None = None
        self._following_out = False  # told when requests let go are done with
        self.handed: dict[Request, str] = {}
        """Handed out by a queue that holds their slot's concurrency -> slot key."""
        self._handed_to: dict[str, set[Request]] = {}  # slot key -> its requests handed
        self._untold = False  # the queue is not told when they leave: looked at instead
        self._untold_limit = UNTOLD_BOUND
        crawler.signals.connect(self._stopped, signal=signals.engine_stopped)
        crawler.signals.connect(self._spider_idle, signal=signals.spider_idle)

    # -- the signals, received once -------------------------------------------------

    def follow(self, event: Event, follower: Callable[[Request], None]) -> None:
        """Call ``follower(request)`` on each of Scrapy's ``event`` from now on."""
        followers = self._followers.get(event, ())
        if follower in followers:
            return
        self._followers[event] = (*followers, follower)
        quieting = self._quieting.pop(event, None)
        if quieting is not None:
            quieting.cancel()  # still connected
        elif not followers:
            self._crawler.signals.connect(self._receiver(event), signal=_SIGNALS[event])

    def unfollow(self, event: Event, follower: Callable[[Request], None]) -> None:
        """Stop calling ``follower`` on ``event``."""
        followers = self._followers.get(event, ())
        if follower not in followers:
            return
        self._followers[event] = rest = tuple(f for f in followers if f != follower)
        if not rest:
            # not now: this may run inside the dispatch of the signal it disconnects
            self._quieting[event] = _timers.call_later(0, self._quiet, event)

    def _quiet(self, event: Event) -> None:
        del self._quieting[event]
        self._crawler.signals.disconnect(self._receiver(event), signal=_SIGNALS[event])

    def _receiver(self, event: str) -> Callable[[Request], None]:
        return getattr(self, "_" + event)  # type: ignore[no-any-return]

    def _reached(self, request: Request) -> None:
        for follower in self._followers["reached"]:
            follower(request)

    def _left(self, request: Request) -> None:
        for follower in self._followers["left"]:
            follower(request)

    def _received(self, request: Request) -> None:
        for follower in self._followers["received"]:
            follower(request)

    # -- requests let go, until the downloader is done with them -----------------------

    def track(self, done: Callable[[Request, str, bool], None]) -> None:
        """Tell ``done(request, key, reached)`` when a request let go to slot
        ``key`` is done with (``reached``: False when found in no slot by the sweep)."""
        self._done = done

    def _follow_out(self) -> None:
        """From the first request let go (a crawl whose queue holds its slots
        lets none go, and pays for no receiver): told by the frontier's watched
        active set, else by Scrapy's signals."""
        self._following_out = True
        downloader = getattr(self._crawler.engine, "downloader", None)
        if not departures.follow_departures(downloader, self._left_out):
            self.follow("left", self._left_out)
            self.follow("received", self._answered_out)

    def let_go(self, request: Request, key: str) -> None:
        """``request`` goes on to download slot ``key`` (see :meth:`track`)."""
        if not self._following_out:
            self._follow_out()
        self._new[request] = key
        if self._sweep is None:
            self._sweep = _timers.call_later(REACH_TIMEOUT, self._sweep_out)

    def _left_out(self, request: Request) -> None:
        if not (self._new or self._older or self._inside):  # the frontier's: not let go here
            return
        key = self._inside.pop(request, None)
        if key is None:
            key = self._unseen(request)
        if key is not None and self._done is not None:
            self._done(request, key, True)

    def _answered_out(self, request: Request) -> None:
        key = self._unseen(request)  # a cache hit never reached the slot
        if key is not None and self._done is not None:
            self._done(request, key, True)

    def _unseen(self, request: Request) -> str | None:
        key = self._new.pop(request, None)  # "" is a key (a URL without a host)
        return key if key is not None else self._older.pop(request, None)

    def _sweep_out(self) -> None:
        """Done with the requests not in their slot a period after they were
        let go (never reached it), or gone from it unsignalled."""
        self._sweep = None
        slots = getattr(getattr(self._crawler.engine, "downloader", None), "slots", None)
        if slots is None:
            return
        gone = []
        for request, key in self._inside.items():
            slot = slots.get(key)
            if slot is None or request not in slot.active:
                gone.append((request, key))
        older, self._older, self._new = self._older, self._new, {}
        for request, key in older.items():
            slot = slots.get(key)
            if slot is not None and request in slot.active:
                self._inside[request] = key
            else:
                gone.append((request, key))
        for request, key in gone:
            self._inside.pop(request, None)
            if self._done is not None:
                self._done(request, key, False)
        if self._sweep is None and (self._older or self._inside):
            self._sweep = _timers.call_later(REACH_TIMEOUT, self._sweep_out)

    # -- requests handed out by a scheduler queue -----------------------------------------

    def hand_out(self, request: Request, key: str) -> None:
        """A scheduler queue that holds slot ``key``'s concurrency itself
        handed ``request`` out: out until :meth:`returned`."""
        if self._untold and len(self.handed) >= self._untold_limit:
            for slot in list(self._handed_to):
                self._forget_gone(slot)
            self._untold_limit = max(UNTOLD_BOUND, 2 * len(self.handed))
        self.handed[request] = key
        handed = self._handed_to.get(key)
        if handed is None:
            self._handed_to[key] = {request}
        else:
            handed.add(request)

    def returned(self, request: Request) -> str | None:
        """``request`` left ``Downloader.active`` for good: no longer out. The
        key of the slot it was handed out to (None: not handed out)."""
        key = self.handed.pop(request, None)
        if key is not None:
            handed = self._handed_to[key]
            handed.discard(request)
            if not handed:
                del self._handed_to[key]
        return key

    def out(self, key: str, holding: AbstractSet[Request]) -> int:
        """Requests of slot ``key`` out: those it holds (``holding``, its ``active``
        set) and those handed out not in it (on their way, or detached but alive)."""
        handed = self._handed_to.get(key)
        if handed is None:
            return len(holding)
        if self._untold:
            handed = self._forget_gone(key)
            if handed is None:
                return len(holding)
        if not holding:
            return len(handed)
        return len(holding) + len(handed.difference(holding))

    def returns_untold(self) -> None:
        """The queue is not told when its requests leave (the frontier could not
        watch): those no longer :meth:`alive` are forgotten as their slot is counted."""
        self._untold = True

    def _forget_gone(self, key: str) -> set[Request] | None:
        for request in [request for request in self._handed_to[key] if not self.alive(request)]:
            self.returned(request)
        return self._handed_to.get(key)

    # -- detached but alive ---------------------------------------------------------------

    def detach(self, request: Request) -> bool:
        """Take ``request`` out of ``Downloader.active``, alive (False if it was
        not there): see :func:`~scrapy_rep._slots.active.leave_active`."""
        if not leave_active(self._crawler.engine, request):
            return False
        self.detached.add(request)
        return True

    def watched(self) -> bool:
        """Whether the frontier watches ``Downloader.active`` (:meth:`part` works)."""
        return departures.watched(getattr(self._crawler.engine, "downloader", None))

    def part(self, request: Request, told: Callable[[Request], None]) -> None:
        """``request``, detached, stays out until Scrapy's fetch removes it;
        then ``told(request)`` (only while :meth:`watched`)."""
        self._told[request] = told
        departures.part(self._crawler.engine.downloader, request, self._parted)

    def _parted(self, request: Request) -> None:
        self.detached.discard(request)
        told = self._told.pop(request, None)
        if told is not None:
            told(request)

    def rejoin(self, request: Request) -> None:
        """Put back a request :meth:`detach` took out."""
        self.detached.discard(request)
        self._crawler.engine.downloader.active.add(request)  # type: ignore[union-attr]

    def alive(self, request: Request) -> bool:
        """True while ``request`` is under way: in ``Downloader.active``, or detached."""
        if request in self.detached:
            return True
        active = getattr(getattr(self._crawler.engine, "downloader", None), "active", None)
        return active is not None and request in active

    def _spider_idle(self) -> None:
        # Detached requests are invisible to the engine's idle check.
        if self.detached:
            raise DontCloseSpider

    def _stopped(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for timer in self._quieting.values():
            timer.cancel()
        self._quieting.clear()
