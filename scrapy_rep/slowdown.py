"""When a site says "slow down" (429, 503, ``Retry-After``), its download slot pauses.

A site that answers one of ``REP_SLOWDOWN_HTTP_CODES`` (429 and 503) asks
the crawler to stop for a while (RFC 9110 §10.2.3, RFC 6585 §4; Google reads
a 503 on every URL the same way). :class:`SlowDown` pauses the download slot
that got the answer, the same slot its Crawl-delay applies to:

- **seen** on ``response_downloaded``, which the downloader sends for every
  download, retries included, before it picks the slot's next request (the
  robots middleware at 100 only sees the last answer, after RetryMiddleware
  gave up); HttpCacheMiddleware hits never reach it, rightly;
- **how long**: ``Retry-After`` (seconds or an HTTP date), else a backoff of
  ``REP_SLOWDOWN_MIN_DELAY`` doubling with each slow-down answer in a row;
  every pause between ``REP_SLOWDOWN_MIN_DELAY`` and ``REP_SLOWDOWN_MAX_DELAY``.
  An answer that arrives while a pause runs was sent before it began: it does
  not double the pause, only a longer ``Retry-After`` lengthens it;
- **held where**: requests already queued in the slot are taken out of its
  queue (:class:`~scrapy_rep._slots.SlotPauses`), and go first after the
  pause; the others are held by the slot's gate, where a request leaves the
  robots middleware (after its robots.txt and Crawl-delay waits), in arrival
  order and out of ``CONCURRENT_REQUESTS`` (``REP_MAX_WAITING``, as robots.txt
  waiters). Retries of the answered request come back through the scheduler
  and wait there too;
- **after it**: one request goes (a probe). Another slow-down answer starts a
  doubled pause; a good one brings the slot back to its normal pace, with a
  slow start: twice as many requests may be out after each good answer, up
  to the slot's concurrency (released all at once, requests entering a slot
  in one event-loop turn are not held to its concurrency). The gate goes
  once its backlog is gone. A released request answered from
  HttpCacheMiddleware's cache no longer counts as out, nor one that has not
  reached the downloader within ``REACH_TIMEOUT`` (a later middleware dropped
  it).

Nothing is lost: a request still answered 503 after its retries reaches its
errback as it would without scrapy-rep; held requests end with IgnoreRequest
only when the spider closes. Requests with ``dont_obey_robotstxt`` (robots.txt
itself) skip the gate but not the slot's pause.

With nothing paused, a request costs one dict truthiness test (in the robots
middleware), and a response a set membership and two dict truthiness tests.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred

from scrapy_rep import _slots
from scrapy_rep.origin import origin_of, origin_text
from scrapy_rep.policy import retry_after

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.utils.asyncio import CallLaterResult

    from scrapy_rep._slots import Queued, SlotPauses
    from scrapy_rep._waiting import Waiting
    from scrapy_rep.cluster import ClusterPauses
    from scrapy_rep.config import Config

logger = logging.getLogger(__name__)

REACH_TIMEOUT = 0.5
"""Seconds a released request has to reach the downloader before it no longer counts as out."""
DEFAULT_CONCURRENCY = 8
"""Slow start limit of a slot the downloader has no slot object for right now."""
_MAX_DOUBLINGS = 64  # 2**64 x any positive minimum is past any cap


class _Gate:
    """One slot's pause and slow start, and the requests it holds."""

    __slots__ = ("allowed", "keeping", "out", "parked", "until", "waiters")

    def __init__(self) -> None:
        self.until = 0.0  # time.monotonic() at which the pause ends
        self.allowed = 1  # released requests that may be unanswered at once
        # released, not answered yet -> timer until it reaches the downloader
        self.out: dict[Request, CallLaterResult | None] = {}
        self.waiters: deque[tuple[Request, Deferred[bool]]] = deque()
        # queued in the slot when the pause began: they go first
        self.parked: deque[Queued] = deque()
        self.keeping = False  # a keeper sleeps until the pause ends


class _Level:
    """Slow-down answers in a row from one slot, and since when."""

    __slots__ = ("count", "since")

    def __init__(self, since: float) -> None:
        self.count = 0
        self.since = since


class SlowDown:
    """Pauses of download slots that answered 429/503 (see the module docstring).

    ``gates`` is read by the robots middleware on every request: empty, the
    request goes on without any other cost.
    """

    def __init__(
        self,
        crawler: Crawler,
        config: Config,
        waiting: Waiting,
        pauses: SlotPauses,
        cluster: ClusterPauses | None = None,
    ) -> None:
        self._crawler = crawler
        stats = crawler.stats
        assert stats is not None
        self._stats = stats
        self._waiting = waiting
        self._pauses = pauses
        self._cluster = cluster
        self._codes = frozenset(config.slowdown_http_codes)
        self._min = config.slowdown_min_delay
        self._max = config.slowdown_max_delay
        self._bound = config.cache_max_origins
        self.gates: dict[str, _Gate] = {}
        """Slots holding requests: paused, or resuming slowly."""
        self.levels: dict[str, _Level] = {}
        """Slots that answered slow-down and no good answer since."""
        self._warned: dict[str, None] = {}  # origins warned of a capped Retry-After
        self._listening = False  # request_reached/left_downloader connected
        self._quieting: CallLaterResult | None = None
        crawler.signals.connect(self._downloaded, signal=signals.response_downloaded)
        crawler.signals.connect(self._stopped, signal=signals.engine_stopped)
        if cluster is not None:
            crawler.signals.connect(self._opened, signal=signals.spider_opened)

    # -- where a request leaves the robots middleware ----------------------------------

    def gate(self, request: Request) -> Coroutine[Any, Any, None] | None:
        """None if ``request`` may go on now, else a coroutine that holds it
        until its slot's gate lets it go (IgnoreRequest if the spider closes)."""
        if not self.gates:
            return None
        key = self._pauses.key(request)
        gate = self.gates.get(key)
        if gate is None:
            return None
        if not gate.waiters and not gate.parked and self._has_room(gate, time.monotonic()):
            self._release(key, gate, request)
            return None
        return self._hold(request, key, gate)

    def paused(self, key: str, slack: float = 0.0) -> bool:
        """True while slot ``key`` is paused for longer than ``slack`` seconds."""
        gate = self.gates.get(key)
        return gate is not None and gate.until - slack > time.monotonic()

    async def sit_out(self, key: str) -> bool:
        """Wait, without slow start, until slot ``key`` is not paused; False if
        the spider closes meanwhile. For requests paced cluster-wide, already
        out of the active set."""
        while True:
            gate = self.gates.get(key)
            left = 0.0 if gate is None else gate.until - time.monotonic()
            if left <= 0:
                return True
            if not await self._waiting.sleep(left):
                self._stats.inc_value("rep/slowdown/dropped_closing")
                return False

    @staticmethod
    def _has_room(gate: _Gate, now: float) -> bool:
        return gate.until <= now and len(gate.out) < gate.allowed

    async def _hold(self, request: Request, key: str, gate: _Gate) -> None:
        if self.gates.get(key) is not gate:  # gone since gate() looked
            return
        self._stats.inc_value("rep/slowdown/held")
        wake: Deferred[bool] = Deferred()
        gate.waiters.append((request, wake))
        detached = self._waiting.detach(request)
        try:
            go = await maybe_deferred_to_future(wake)
        finally:
            if detached:
                self._waiting.reattach(request)
        if not go:
            self._stats.inc_value("rep/slowdown/dropped_closing")
            raise IgnoreRequest(
                f"the spider closed while download slot {key!r} was paused: {request}"
            )

    def _release(self, key: str, gate: _Gate, request: Request) -> None:
        gate.out[request] = call_later(REACH_TIMEOUT, self._not_reached, key, request)
        self._stats.inc_value("rep/slowdown/released")

    def _grant(self, key: str, gate: _Gate) -> None:
        """Let waiters go while the slow start has room (none while paused)."""
        now = time.monotonic()
        if (gate.waiters or gate.parked) and _slots.engine_closing(self._crawler.engine):
            self._drop_waiters(key, gate)
            return
        while gate.parked and self._has_room(gate, now):
            queued = gate.parked.popleft()
            gate.out[queued[0]] = None  # in the downloader already
            self._stats.inc_value("rep/slowdown/released")
            self._pauses.requeue(key, queued)
        while gate.waiters and self._has_room(gate, now):
            request, wake = gate.waiters.popleft()
            if not wake.called:
                self._release(key, gate, request)
                wake.callback(True)

    def _drop_waiters(self, key: str, gate: _Gate) -> None:
        """The spider closes: every request the gate holds ends with IgnoreRequest."""
        waiters, gate.waiters = gate.waiters, deque()
        parked, gate.parked = gate.parked, deque()
        reason = f"the spider closed while download slot {key!r} was paused"
        dropped = sum(self._pauses.requeue(key, queued, reason) for queued in parked)
        self._stats.inc_value("rep/slowdown/dropped_closing", dropped)
        for _, wake in waiters:
            if not wake.called:
                wake.callback(False)

    # -- answers -------------------------------------------------------------------

    def _downloaded(self, response: Response, request: Request) -> None:
        if response.status in self._codes:
            self._slow(response, request)
        elif self.gates or self.levels:
            key = request.meta.get("download_slot")
            if key in self.gates or key in self.levels:
                self._answered(key, request, response.status)

    def _answered(self, key: str, request: Request, status: int) -> None:
        """A good (not slow-down) answer from slot ``key``."""
        now = time.monotonic()
        gate = self.gates.get(key)
        if gate is not None:
            self._forget_out(gate, request)
            if gate.until > now:  # sent before this pause began: says nothing of now
                return
        level = self.levels.pop(key, None)
        if level is not None:
            self._stats.inc_value("rep/slowdown/resumed")
            logger.info(
                "%s (slot %r) answers again (%d) after %.1f s: back to its normal pace",
                _origin(request),
                key,
                status,
                now - level.since,
            )
            if self._cluster is not None:
                self._cluster.resume(key)
        if gate is not None:
            gate.allowed = min(gate.allowed * 2, self._pauses.concurrency(key, DEFAULT_CONCURRENCY))
            self._grant(key, gate)
            self._close_if_done(key, gate)

    def _slow(self, response: Response, request: Request) -> None:
        """A slow-down answer: pause the slot, unless a pause already runs."""
        status = response.status
        key = request.meta.get("download_slot") or self._pauses.key(request)
        now = time.monotonic()
        self._stats.inc_value(f"rep/slowdown/response_status_count/{status}")
        raw = _header(response.headers.get(b"Retry-After"))
        asked = retry_after(raw, time.time(), date=_header(response.headers.get(b"Date")))
        origin = _origin(request)
        if raw and asked is None:
            self._stats.inc_value("rep/slowdown/retry_after/invalid")
        elif asked is not None:
            self._count_retry_after(asked, origin, raw)
        if self._cluster is not None:
            self._cluster.publish(key, origin, None if asked is None else min(asked, self._max))
        gate = self.gates.get(key)
        if gate is not None:
            self._forget_out(gate, request)
            if gate.until > now:  # sent before this pause began
                if asked is not None:
                    self._pause(key, gate, now + self._bounded(asked), now)
                return
        level = self.levels.pop(key, None) or _Level(now)
        level.count += 1
        self._remember(self.levels, key, level)
        if asked is None:
            self._stats.inc_value("rep/slowdown/backoff")
            doublings = min(level.count - 1, _MAX_DOUBLINGS)
            pause = min(self._min * 2.0**doublings, self._max)
            said = ""
        else:
            pause = self._bounded(asked)
            said = f" (Retry-After: {_shown(raw)})"
        if gate is None:
            gate = self._new_gate(key)
        gate.allowed = 1
        self._stats.inc_value("rep/slowdown/pauses")
        self._pause(key, gate, now + pause, now)
        logger.info(
            "%s (slot %r) answered %d%s: no request to it for %.1f s",
            origin,
            key,
            status,
            said,
            pause,
        )

    def _bounded(self, asked: float) -> float:
        return min(max(asked, self._min), self._max)

    def _count_retry_after(self, asked: float, origin: str, raw: str | None) -> None:
        if asked <= self._max:
            self._stats.inc_value("rep/slowdown/retry_after/honoured")
            return
        self._stats.inc_value("rep/slowdown/retry_after/capped")
        if origin in self._warned:
            return
        self._remember(self._warned, origin, None)
        logger.warning(
            "%s asks for a pause of %s s (Retry-After: %s): capped at %g s "
            "(REP_SLOWDOWN_MAX_DELAY)",
            origin,
            f"{asked:.0f}" if asked < 1e15 else "more than 10**15",
            _shown(raw),
            self._max,
        )

    def _not_reached(self, key: str, request: Request) -> None:
        gate = self.gates.get(key)
        if gate is not None and request in gate.out:
            del gate.out[request]
            self._grant(key, gate)
            self._close_if_done(key, gate)

    def _reached(self, request: Request) -> None:
        key: str | None = request.meta.get("download_slot")
        gate = self.gates.get(key) if key is not None else None
        if key is None or gate is None:
            return
        timer = gate.out.get(request)
        if timer is not None:
            timer.cancel()
            gate.out[request] = None
        if gate.until > time.monotonic():  # a slot made anew during the pause
            self._pauses.hold(key, gate.until)

    def _received(self, request: Request) -> None:
        # A response that never reached the downloader (an HttpCacheMiddleware
        # hit): its place in the slow start is free, but it says nothing of the site.
        key = self._pauses.key(request)
        gate = self.gates.get(key)
        if gate is not None and gate.out.get(request) is not None:  # never reached
            self._forget_out(gate, request)
            self._grant(key, gate)
            self._close_if_done(key, gate)

    def _left(self, request: Request) -> None:
        # Sent after response_downloaded: still out means no answer (an error).
        key: str | None = request.meta.get("download_slot")
        gate = self.gates.get(key) if key is not None else None
        if key is not None and gate is not None and request in gate.out:
            self._forget_out(gate, request)
            self._grant(key, gate)
            self._close_if_done(key, gate)

    @staticmethod
    def _forget_out(gate: _Gate, request: Request) -> None:
        timer = gate.out.pop(request, None)
        if timer is not None:
            timer.cancel()

    # -- pauses --------------------------------------------------------------------

    def _new_gate(self, key: str) -> _Gate:
        if len(self.gates) >= self._bound:
            self._evict_idle_gates()
        gate = self.gates[key] = _Gate()
        self._listen()
        return gate

    def _evict_idle_gates(self) -> None:
        # A broad crawl meets many slots: forget the oldest gates holding nothing
        # (their slot's own timer still holds what is queued in it).
        idle = [
            key
            for key, gate in self.gates.items()
            if not gate.waiters and not gate.parked and not gate.out
        ]
        for key in idle[: max(len(self.gates) - self._bound + 1, 0)]:
            del self.gates[key]
            self._pauses.forget(key)

    def _pause(self, key: str, gate: _Gate, until: float, now: float) -> None:
        """Make slot ``key``'s pause last until ``until``, never shorter."""
        if until <= gate.until:
            return
        added = until - max(gate.until, now)
        seconds = self._stats.get_value("rep/slowdown/seconds", 0.0)
        self._stats.set_value("rep/slowdown/seconds", round(seconds + added, 3))
        gate.until = until
        self._pauses.hold(key, until)
        gate.parked.extend(self._pauses.take_queued(key))
        if not gate.keeping:
            gate.keeping = True
            deferred_from_coro(self._keep(key, gate))

    async def _keep(self, key: str, gate: _Gate) -> None:
        """Sleep until the pause is over, then let the first request go."""
        try:
            while (left := gate.until - time.monotonic()) > 0:
                if not await self._waiting.sleep(left):  # the spider closes
                    self._drop_waiters(key, gate)
                    reason = f"the spider closed while download slot {key!r} was paused"
                    dropped = self._pauses.drop_queued(key, reason)
                    self._stats.inc_value("rep/slowdown/dropped_closing", dropped)
                    return
        finally:
            gate.keeping = False
        if self.gates.get(key) is gate:
            self._grant(key, gate)
            self._close_if_done(key, gate)

    def _close_if_done(self, key: str, gate: _Gate) -> None:
        if gate.waiters or gate.parked or gate.out or gate.until > time.monotonic():
            return
        if self.gates.get(key) is gate:
            del self.gates[key]
            self._pauses.forget(key)
        if not self.gates and self._quieting is None:
            # not now: this may run inside the dispatch of a signal it disconnects
            self._quieting = call_later(0, self._quiet)

    def _listen(self) -> None:
        """Follow released requests into the downloader while any gate exists."""
        if self._listening:
            return
        self._listening = True
        connect = self._crawler.signals.connect
        connect(self._reached, signal=signals.request_reached_downloader)
        connect(self._left, signal=signals.request_left_downloader)
        connect(self._received, signal=signals.response_received)

    def _quiet(self) -> None:
        self._quieting = None
        if self.gates or not self._listening:
            return
        self._listening = False
        disconnect = self._crawler.signals.disconnect
        disconnect(self._reached, signal=signals.request_reached_downloader)
        disconnect(self._left, signal=signals.request_left_downloader)
        disconnect(self._received, signal=signals.response_received)

    def _remember(self, table: dict[str, Any], key: str, value: Any) -> None:
        """Store ``key`` last in ``table``, forgetting the oldest past the bound."""
        table[key] = value
        if len(table) > self._bound:
            del table[next(iter(table))]

    def _stopped(self) -> None:
        for key, gate in self.gates.items():
            self._drop_waiters(key, gate)
            for timer in gate.out.values():
                if timer is not None:
                    timer.cancel()
            gate.out.clear()
        if self._quieting is not None:
            self._quieting.cancel()
            self._quieting = None

    # -- other workers (Redis) -----------------------------------------------------------

    async def _opened(self) -> None:
        assert self._cluster is not None
        await self._cluster.start(self._from_cluster)

    def _from_cluster(
        self, key: str, left: float, origin: str | None, level: int, own: bool
    ) -> None:
        """A pause of slot ``key`` for ``left`` more seconds, decided through Redis
        (``own``: the cluster's answer to this worker's own slow-down answer)."""
        now = time.monotonic()
        until = now + left
        gate = self.gates.get(key)
        if gate is not None and gate.until >= until - 0.01:
            return  # known already (clocks differ by a few ms)
        if level:
            known = self.levels.pop(key, None) or _Level(now)
            known.count = max(known.count, level)
            self._remember(self.levels, key, known)
        if gate is None:
            gate = self._new_gate(key)
        if gate.until <= now:
            gate.allowed = 1
        self._pause(key, gate, until, now)
        if own:
            return
        self._stats.inc_value("rep/slowdown/pauses/cluster")
        where = f"{origin} (slot {key!r})" if origin else f"download slot {key!r}"
        logger.info("%s paused by another worker for %.1f s", where, left)


def _header(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


def _shown(raw: str | None) -> str:
    """A header value for a log line: a hostile one may be megabytes of digits."""
    raw = raw or ""
    return raw if len(raw) <= 40 else raw[:40] + "..."


def _origin(request: Request) -> str:
    origin = origin_of(urlparse_cached(request))
    return request.url if origin is None else origin_text(origin)
