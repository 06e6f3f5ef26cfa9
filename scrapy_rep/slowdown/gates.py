"""Paused download slots' gates: held requests in arrival order, then a slow start.

:class:`~scrapy_rep.slowdown.SlowDown` decides when a slot is paused and for
how long; :class:`Gates` holds the requests meanwhile (docs/slowdown.md, "What
happens"), each slot's in its record (:class:`Gate`). A released request
counts as out until the crawl's :class:`~scrapy_rep._slots.Ledger` says it
left. The gate stops holding once its backlog is gone and a request it let go
after the pause has left; the record stays until a good answer ends the slot's
run of slow-down answers; past ``REP_CACHE_MAX_ORIGINS`` records, the oldest
holding nothing are forgotten.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred

from scrapy_rep import _clock, _slots, _timers

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from scrapy_rep._slots import SlotPauses, Waiting
    from scrapy_rep._slots.pauses import Queued

DEFAULT_CONCURRENCY = 8
"""Slow start limit of a slot the downloader has no slot object for right now."""
CLAIM_RECHECK = 0.25
"""Seconds at most between two asks for the probe of a pause another worker probes."""


@dataclass(slots=True, eq=False)
class Gate:
    """One slot's record: its pause, its slow start, the requests it holds."""

    until: float = 0.0  # _clock.monotonic() at which the pause ends
    began: float = 0.0  # _clock.monotonic() at which that pause began
    timer: _timers.Timer | None = None  # holds the slot's queue until then
    answers: int = 0  # slow-down answers in a row (0: a good one came since)
    since: float = 0.0  # when the first of them came (_clock.monotonic())
    holding: bool = False  # paused or resuming: requests leave through the gate
    allowed: int = 1  # released requests that may be unanswered at once
    # released, not answered yet -> timer until it reaches the downloader
    out: dict[Request, _timers.Timer | None] = field(default_factory=dict)
    waiters: deque[tuple[Request, Deferred[bool]]] = field(default_factory=deque)
    # queued in the slot when the pause began: they go first
    parked: deque[Queued] = field(default_factory=deque)
    keeping: bool = False  # a keeper sleeps until the pause ends (or its probe is claimed)
    probing: bool = False  # this worker claimed the probe after a shared pause
    # the shared pause is over but its probe not claimed: nothing was held
    # here to probe with; the next request held claims it
    unclaimed: bool = False


class Gates:
    """The records of the slots that answered slow-down; ``holding`` is read for
    every request leaving the robots middleware (0: it goes on at no other cost)."""

    def __init__(
        self,
        crawler: Crawler,
        stats: StatsCollector,
        waiting: Waiting,
        pauses: SlotPauses,
        bound: int,
    ) -> None:
        self._crawler = crawler
        self._stats = stats
        self._waiting = waiting
        self._pauses = pauses
        self._bound = bound
        self.by_slot: dict[str, Gate] = {}
        """Every slot's record."""
        self.holding = 0
        """Gates holding requests now: their slots are paused, or resuming slowly."""
        self._ledger = waiting.ledger
        self._listening = False  # following released requests (the ledger)
        self.claim: Callable[[str, float], Awaitable[float]] | None = None
        """With shared pauses (Redis): asks for the probe of slot ``key``'s
        ended pause; 0 if this worker sends it, else seconds to wait before
        asking again (set by the pacing)."""
        # A probe's claim outlives it: the probe may wait for the slot, then its answer.
        self._probe_bound = crawler.settings.getfloat("DOWNLOAD_TIMEOUT", 180.0) + 10.0
        crawler.signals.connect(self._stopped, signal=signals.engine_stopped)

    # -- where a request leaves the robots middleware ----------------------------------

    def gate(self, request: Request) -> Coroutine[Any, Any, None] | None:
        """None if ``request`` may go on now, else a coroutine that holds it
        until its slot's gate lets it go (IgnoreRequest if the spider closes)."""
        if not self.holding:
            return None
        key = self._pauses.key(request)
        gate = self.by_slot.get(key)
        if gate is None or not gate.holding:
            return None
        if not gate.waiters and not gate.parked and self._has_room(gate, _clock.monotonic()):
            self._release(key, gate, request)
            return None
        return self._hold(request, key, gate)

    def paused(self, key: str, slack: float = 0.0) -> bool:
        """True while slot ``key`` is paused for longer than ``slack`` seconds."""
        gate = self.by_slot.get(key)
        return gate is not None and gate.until - slack > _clock.monotonic()

    def ends(self, key: str) -> float | None:
        """When slot ``key``'s pause ends (``_clock.monotonic()``); None if it has no record."""
        gate = self.by_slot.get(key)
        return None if gate is None else gate.until

    def count_answer(self, key: str, now: float, *, cluster: int | None = None) -> int:
        """One more slow-down answer in a row from slot ``key``, or, with
        ``cluster``, the cluster's count of them if higher; how many now."""
        gate = self._record(key)
        if not gate.answers:
            gate.since = now
        gate.answers = gate.answers + 1 if cluster is None else max(gate.answers, cluster)
        return gate.answers

    def good_answer(self, key: str) -> float | None:
        """A good answer from slot ``key`` ends its run of slow-down answers:
        since when it ran (``_clock.monotonic()``), None if none ran."""
        gate = self.by_slot.get(key)
        if gate is None or not gate.answers:
            return None
        gate.answers = 0
        return gate.since

    def probed(self, key: str) -> bool:
        """True once after this worker's claimed probe of slot ``key`` was answered well."""
        gate = self.by_slot.get(key)
        if gate is None or not gate.probing:
            return False
        gate.probing = False
        return True

    async def sit_out(self, key: str) -> bool:
        """Wait, without slow start, until slot ``key`` is not paused (False: the
        spider closes): for requests paced cluster-wide, out of the active set."""
        while True:
            gate = self.by_slot.get(key)
            left = 0.0 if gate is None else gate.until - _clock.monotonic()
            if left <= 0:
                return True
            if not await self._waiting.sleep(left):
                self._stats.inc_value("rep/slowdown/dropped_closing")
                return False

    @staticmethod
    def _has_room(gate: Gate, now: float) -> bool:
        # while its keeper runs, the pause is not over (or its probe not claimed yet)
        return (
            gate.until <= now
            and not gate.keeping
            and not gate.unclaimed
            and len(gate.out) < gate.allowed
        )

    async def _hold(self, request: Request, key: str, gate: Gate) -> None:
        if not gate.holding:  # done since gate() looked
            return
        self._stats.inc_value("rep/slowdown/held")
        wake: Deferred[bool] = Deferred()
        gate.waiters.append((request, wake))
        if gate.unclaimed and not gate.keeping:  # it will be the probe, once claimed
            gate.keeping = True
            deferred_from_coro(self._keep(key, gate))
        if not await self._waiting.woken(request, wake):
            self._stats.inc_value("rep/slowdown/dropped_closing")
            raise IgnoreRequest(
                f"the spider closed while download slot {key!r} was paused: {request}"
            )

    def _release(self, key: str, gate: Gate, request: Request) -> None:
        gate.out[request] = _timers.call_later(
            _slots.REACH_TIMEOUT, self._not_reached, key, request
        )
        self._stats.inc_value("rep/slowdown/released")

    def _grant(self, key: str, gate: Gate) -> None:
        """Let waiters go while the slow start has room (none while paused)."""
        now = _clock.monotonic()
        if (gate.waiters or gate.parked) and _slots.engine_closing(self._crawler.engine):
            self._drop_waiters(key, gate)
            return
        while gate.parked and self._has_room(gate, now):
            queued = gate.parked.popleft()
            gate.out[queued[0]] = None  # in the downloader already
            if self._pauses.requeue(key, queued):  # its slot is gone: IgnoreRequest
                del gate.out[queued[0]]
                self._stats.inc_value("rep/slowdown/dropped_slot_gone")
            else:
                self._stats.inc_value("rep/slowdown/released")
        while gate.waiters and self._has_room(gate, now):
            request, wake = gate.waiters.popleft()
            if not wake.called:
                self._release(key, gate, request)
                wake.callback(True)

    def _drop_waiters(self, key: str, gate: Gate) -> None:
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

    def answered(self, key: str, request: Request, now: float) -> bool:
        """``request``, released by slot ``key``'s gate, was answered: its place
        is free. True if it was sent before the pause began, so its answer says
        nothing of the site now: the pause still runs at ``now``, or the download
        began before it (by Scrapy's ``download_latency``: a busy machine, a slow site)."""
        gate = self.by_slot.get(key)
        if gate is None:
            return False
        self._forget_out(gate, request)
        if gate.until > now:
            return True
        latency = request.meta.get("download_latency")
        return isinstance(latency, float) and now - latency < gate.began

    def widen(self, key: str) -> None:
        """A good answer after the pause: twice as many requests may be out, up
        to the slot's concurrency."""
        gate = self.by_slot.get(key)
        if gate is not None and gate.holding:
            gate.allowed = min(gate.allowed * 2, self._pauses.concurrency(key, DEFAULT_CONCURRENCY))
            self._grant(key, gate)
            self._close_if_done(key, gate)

    def _not_reached(self, key: str, request: Request) -> None:
        gate = self.by_slot.get(key)
        if gate is not None and request in gate.out:
            self._free(key, gate, request)  # (cancelling its fired timer does nothing)

    def _reached(self, request: Request) -> None:
        key: str | None = request.meta.get("download_slot")
        gate = self.by_slot.get(key) if key is not None else None
        if key is None or gate is None:
            return
        timer = gate.out.get(request)
        if timer is not None:
            timer.cancel()
            gate.out[request] = None
        # a slot made anew during the pause has no timer of it
        if gate.until > _clock.monotonic() and not self._pauses.holds(key, gate.timer):
            gate.timer = self._pauses.hold(key, gate.until)

    def _received(self, request: Request) -> None:
        # A response that never reached the downloader (an HttpCacheMiddleware
        # hit): its place in the slow start is free, but it says nothing of the site.
        key = self._pauses.key(request)
        gate = self.by_slot.get(key)
        if gate is not None and gate.out.get(request) is not None:  # never reached
            self._free(key, gate, request)

    def _left(self, request: Request) -> None:
        # Sent after response_downloaded: still out means no answer (an error).
        key: str | None = request.meta.get("download_slot")
        gate = self.by_slot.get(key) if key is not None else None
        if key is not None and gate is not None and request in gate.out:
            self._free(key, gate, request)

    def _free(self, key: str, gate: Gate, request: Request) -> None:
        """``request`` no longer holds a place in slot ``key``'s slow start."""
        self._forget_out(gate, request)
        self._grant(key, gate)
        self._close_if_done(key, gate)

    @staticmethod
    def _forget_out(gate: Gate, request: Request) -> None:
        timer = gate.out.pop(request, None)
        if timer is not None:
            timer.cancel()

    # -- pauses --------------------------------------------------------------------

    def pause(self, key: str, until: float, now: float) -> None:
        """Slot ``key`` sends nothing before ``until`` (``_clock.monotonic()``),
        through its gate, made if it has none. A slot not paused at ``now``
        starts its slow start again at one request; a pause never shortens."""
        gate = self._record(key)
        if gate.until <= now:
            gate.allowed = 1
        gate.probing = gate.unclaimed = False
        if not gate.holding:
            gate.holding = True
            self.holding += 1
            if not self._listening:  # follow released requests while any gate holds
                self._listening = True
                self._follow(self._ledger.follow)
        if until <= gate.until:
            return
        if gate.until <= now:  # a new pause, not a longer one
            gate.began = now
        added = until - max(gate.until, now)
        seconds = self._stats.get_value("rep/slowdown/seconds", 0.0)
        self._stats.set_value("rep/slowdown/seconds", round(seconds + added, 3))
        gate.until = until
        gate.timer = self._pauses.hold(key, until)
        taken = self._pauses.take_queued(key)
        for request, _ in taken:  # let go before, held again: no longer out
            self._forget_out(gate, request)
        gate.parked.extend(taken)
        if not gate.keeping:
            gate.keeping = True
            deferred_from_coro(self._keep(key, gate))

    def stop(self, key: str, end: Callable[[Queued], None]) -> None:
        """Slot ``key`` will send nothing more (a stop signal, scrapy_rep.challenges):
        its pause ends now; the requests parked from its queue go to ``end``,
        those waiting at its gate are let go (the pacing ends them after the gate)."""
        gate = self.by_slot.get(key)
        if gate is None:
            return
        parked, gate.parked = gate.parked, deque()
        for queued in parked:
            end(queued)
        for queued in self._pauses.take_queued(key):
            end(queued)
        waiters, gate.waiters = gate.waiters, deque()
        for _, wake in waiters:
            if not wake.called:
                wake.callback(True)
        gate.until = min(gate.until, _clock.monotonic())
        gate.unclaimed = False
        self._close_if_done(key, gate)

    def _record(self, key: str) -> Gate:
        """Slot ``key``'s record, made if it has none."""
        gate = self.by_slot.get(key)
        if gate is None:
            if len(self.by_slot) >= self._bound:
                self._evict_idle_gates()
            gate = self.by_slot[key] = Gate()
        return gate

    def _evict_idle_gates(self) -> None:
        # Forget the oldest records holding nothing, those not paused first (a
        # paused slot's own timer still holds what is queued in it).
        idle = [
            key
            for key, gate in self.by_slot.items()
            if not gate.waiters and not gate.parked and not gate.out
        ]
        idle.sort(key=lambda key: self.by_slot[key].holding)  # stable: oldest first
        for key in idle[: max(len(self.by_slot) - self._bound + 1, 0)]:
            gate = self.by_slot.pop(key)
            if gate.holding:  # its keeper, asleep, finds it no longer holding
                gate.holding = False
                self.holding -= 1

    async def _keep(self, key: str, gate: Gate) -> None:
        """Sleep until the pause is over (and, shared, this worker has the
        probe: another worker's probe ends in a new pause, a stop, or the
        pause cleared), then let the first request go."""
        try:
            while True:
                while (left := gate.until - _clock.monotonic()) > 0:
                    if not await self._waiting.sleep(left):  # the spider closes
                        self._closing(key, gate)
                        return
                if self.claim is None or not gate.holding:
                    break
                if not gate.waiters and not gate.parked:
                    # nothing to probe with: claim nothing (another worker may
                    # probe), keep holding; the next request held claims it
                    gate.unclaimed = True
                    return
                wait = await self.claim(key, self._probe_bound)
                if wait <= 0:
                    gate.probing, gate.unclaimed = True, False
                    break
                if not await self._waiting.sleep(min(wait, CLAIM_RECHECK)):
                    self._closing(key, gate)
                    return
        finally:
            gate.keeping = False
        if gate.holding:
            # Nothing held here yet, the gate keeps holding: the next request
            # (the frontier hands its requests out as the pause ends, and they
            # may come a moment after it) is the probe.
            self._grant(key, gate)

    def _closing(self, key: str, gate: Gate) -> None:
        self._drop_waiters(key, gate)
        reason = f"the spider closed while download slot {key!r} was paused"
        dropped = self._pauses.drop_queued(key, reason, gate.timer)
        self._stats.inc_value("rep/slowdown/dropped_closing", dropped)

    def _close_if_done(self, key: str, gate: Gate) -> None:
        """The gate stops holding once its backlog is gone and its pause is
        over; the record goes too unless a run of slow-down answers is on."""
        if gate.waiters or gate.parked or gate.out or gate.until > _clock.monotonic():
            return
        if gate.holding:
            gate.holding = False
            self.holding -= 1
        if not gate.answers and self.by_slot.get(key) is gate:
            del self.by_slot[key]
        if not self.holding and self._listening:
            self._listening = False
            self._follow(self._ledger.unfollow)

    def _follow(self, change: Callable[..., None]) -> None:
        change("reached", self._reached)
        change("left", self._left)
        change("received", self._received)

    def _stopped(self) -> None:
        for key, gate in self.by_slot.items():
            self._drop_waiters(key, gate)
            for timer in gate.out.values():
                if timer is not None:
                    timer.cancel()
            gate.out.clear()
