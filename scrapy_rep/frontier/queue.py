"""``scrapy_rep.PolitePriorityQueue``: requests wait in the scheduler until their site is ready.

Scrapy's default ``DownloaderAwarePriorityQueue`` hands a request out at once,
and one whose slot must wait (its Crawl-delay, a 429/503 pause, its
robots.txt) takes a ``CONCURRENT_REQUESTS`` place in the downloader that
every other site needs. This queue keeps it here until its slot is ready:
docs/scheduling.md says when that is, and the order among ready slots.

Each queue (a download slot's, an origin's pending one, the release one) is
in one place: ``candidates`` (to look at), ``sleeping`` until a time (its
turn, a pause's end, or a Crawl-delay slot held until its request is sent:
told by :meth:`~PolitePriorityQueue.turn_moved`), ``full`` (a candidate again
when one of its requests leaves the downloader,
:meth:`~PolitePriorityQueue.slot_freed`, and at the latest after
``FULL_RECHECK``) or ``awaiting`` a robots.txt. On disk (``JOBDIR``) the layout is the
default queue's, one directory per slot, so either queue resumes the other's job.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Final, Literal

from scrapy.pqueues import DownloaderAwarePriorityQueue

from scrapy_rep import _clock, _per_ip
from scrapy_rep._compat import peek_priority_queue, remove_slot_dir
from scrapy_rep._robots import REFUSED, UNKNOWN
from scrapy_rep.frontier._verdicts import HeadVerdicts
from scrapy_rep.frontier.shared import frontier_of

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.pqueues import QueueProtocol, ScrapyPriorityQueue

    from scrapy_rep.origin import Origin

RELEASE_SLOT = "\x00scrapy-rep:forbidden"
"""Where requests robots.txt forbids wait: always ready (no download slot has this key)."""
PROBE_LEAD = 0.25
"""Seconds before a slot's 429/503 pause ends when its requests are handed out
again, to wait at the slot's gate (:mod:`scrapy_rep.slowdown.gates`: the slow start)."""
AWAIT_ROBOTS = 30.0
"""Seconds after which a slot waiting for its origin's robots.txt is looked at
again (see :meth:`PolitePriorityQueue._wake_overdue`)."""
FULL_RECHECK = 1.0
"""Seconds after which full slots are looked at again, though no request of
theirs was seen leaving (a project's code may raise a slot's concurrency).
Without the downloader's departures (an internal, logged at start), on every pop."""
OVERDUE_ORIGINS = 10_000
"""Origins past AWAIT_ROBOTS remembered (the oldest forgotten first)."""
PENDING = "\x00scrapy-rep:robots.txt:"
"""Prefix of the queue of an origin whose robots.txt is not known yet (then its
origin): its requests go to their download slots once it is, so that they
hold up no request of a known origin sharing their slot."""

Where = Literal["candidate", "sleeping", "full", "awaiting"]
"""Where a slot is (see the module docstring)."""
CANDIDATE: Final = "candidate"
SLEEPING: Final = "sleeping"
FULL: Final = "full"
AWAITING: Final = "awaiting"
Found = Literal["ready", "release", "wait"]
"""What looking at a slot found: ready (with its requests out), to be released
at once (robots.txt forbids its first request), or to wait (parked where it waits)."""
READY: Final = "ready"
RELEASE: Final = "release"
WAIT: Final = "wait"


class PolitePriorityQueue(DownloaderAwarePriorityQueue):
    """A ``SCHEDULER_PRIORITY_QUEUE`` that hands out only requests whose
    download slot is ready (see the module docstring)."""

    def __init__(
        self,
        crawler: Crawler,
        downstream_queue_cls: type[QueueProtocol],
        key: str,
        slot_startprios: dict[str, Iterable[int]] | None = None,
        *,
        start_queue_cls: type[QueueProtocol] | None = None,
    ) -> None:
        if crawler.settings.getint("CONCURRENT_REQUESTS_PER_IP") != 0:
            per_ip = crawler.settings.get(_per_ip.SETTING)
            raise ValueError(
                f"{_per_ip.SETTING}: {_per_ip.refusal('scrapy_rep.PolitePriorityQueue', per_ip)}"
            )
        self._frontier = frontier_of(crawler)
        self._candidates: deque[str] = deque()
        self._where: dict[str, Where] = {}
        self._sleeping: list[tuple[float, str]] = []  # heap; stale entries skipped
        self._sleep_until: dict[str, float] = {}
        self._full: set[str] = set()
        self._recheck_full_at = 0.0
        self._seen_ready: dict[str, int] = {}  # candidate -> requests out, ready when looked at
        self._awaiting: dict[Origin, set[str]] = {}
        self._awaiting_on: dict[str, Origin] = {}
        self._await_due: list[tuple[float, Origin]] = []  # heap; stale entries skipped
        self._awaited_since: dict[Origin, float] = {}
        self._overdue: OrderedDict[Origin, None] = OrderedDict()
        self._heads: dict[str, Request | None] = {}  # peeked first request of a slot
        self._verdicts = HeadVerdicts()  # their readiness, while it holds
        self._can_peek = callable(getattr(downstream_queue_cls, "peek", None))
        super().__init__(
            crawler,
            downstream_queue_cls,
            key,
            slot_startprios,
            start_queue_cls=start_queue_cls,
        )
        for slot in self.pqueues:  # resumed from JOBDIR
            self._candidate(slot)
        self._frontier.listen(self)

    # -- in and out ------------------------------------------------------------------

    def push(self, request: Request) -> None:
        frontier = self._frontier
        slot = None
        robots = frontier.robots
        verdict, origin = None, None
        if robots is not None:
            verdict, _, origin = robots.readiness(request)
            if verdict == REFUSED:
                slot = RELEASE_SLOT
            elif verdict == UNKNOWN and origin is not None and self._can_peek:
                slot = PENDING + origin.text
        if slot is None:
            slot = frontier.slots.key(request)
        queue = self.pqueues.get(slot)
        if queue is None:
            queue = self.pqueues[slot] = self.pqfactory(slot)
        try:
            queue.push(request)
        except BaseException:
            # A request the disk queue cannot store: Scrapy pushes it to the
            # memory queue next, which counts it (counted here too, it would
            # hold its origin's place in the prefetch window for good).
            if len(queue) == 0 and self._where.get(slot) is None:
                self._drop_queue(slot)
            raise
        prefetch = frontier.prefetch
        if origin is not None and prefetch is not None:
            prefetch.queued(origin)  # discounted by _take, for the same origin
            if verdict == UNKNOWN:
                prefetch.want(origin, request)
        self._joined(slot)

    def pop(self) -> Request | None:
        now = _clock.monotonic()
        chosen = self._select(now)
        return None if chosen is None else self._take(chosen[0], now, ready=chosen[1])

    def peek(self) -> Request | None:
        """The request :meth:`pop` would hand out now, left in the queue."""
        chosen = self._select(_clock.monotonic())
        return None if chosen is None else self._head(chosen[0])

    def robots_known(self, origin: Origin) -> None:
        """``origin``'s robots.txt fetch ended: its requests go to their slots."""
        self._awaited_since.pop(origin, None)
        self._overdue.pop(origin, None)
        for slot in self._awaiting.pop(origin, ()):
            self._awaiting_on.pop(slot, None)
            self._where.pop(slot, None)
            if slot.startswith(PENDING):
                self._drain(slot)
            else:
                self._candidate(slot)

    def slot_freed(self, key: str) -> None:
        """A request of download slot ``key`` left the downloader: if the slot
        was full, it has a place now."""
        self._seen_ready.pop(key, None)
        if self._where.get(key) == FULL:
            self._candidate(key)

    def turn_moved(self, key: str) -> None:
        """Slot ``key``'s Crawl-delay request was sent: its next turn is a
        delay from now (it was held until then)."""
        self._seen_ready.pop(key, None)
        if self._where.get(key) in (SLEEPING, FULL):
            self._candidate(key)

    def _drain(self, pending: str) -> None:
        """Move the requests of an origin's pending queue to their download slots,
        those robots.txt forbids to the release slot, each so that its slot
        hands them out in the order the pending queue would have (as if its
        verdict had been known when they were pushed)."""
        robots = self._frontier.robots
        assert robots is not None  # requests are pending only with robots.txt
        queue = self.pqueues[pending]
        self._heads.pop(pending, None)
        taken = _pop_all(queue)
        if len(taken) > 1:
            # Taken in pop order; pushed in that order, a last-in-first-out
            # queue would reverse it. Through the same queue once more, they
            # come out in the order to push them in, whatever the queue's
            # discipline (first or last in, first out), without knowing it.
            for request in taken:
                queue.push(request)
            taken = _pop_all(queue)
        self._drop_queue(pending)
        joined: dict[str, None] = {}  # the slots joined, in order
        for request in taken:
            refused = robots.readiness(request)[0] == REFUSED
            slot = RELEASE_SLOT if refused else self._frontier.slots.key(request)
            target = self.pqueues.get(slot)
            if target is None:
                target = self.pqueues[slot] = self.pqfactory(slot)
            target.push(request)
            joined[slot] = None
        for slot in joined:
            self._joined(slot)
        self._frontier.wakeup.now()  # the engine may have asked already

    def _joined(self, slot: str) -> None:
        """``slot``'s queue has new requests: its first may differ now (a
        pending queue waits on)."""
        self._heads.pop(slot, None)
        self._seen_ready.pop(slot, None)
        where = self._where.get(slot)
        if where is None or (where == AWAITING and not slot.startswith(PENDING)):
            self._candidate(slot, front=slot == RELEASE_SLOT)

    def _drop_queue(self, slot: str) -> None:
        """Close ``slot``'s empty queue (and its directory on disk)."""
        self.pqueues.pop(slot).close()
        if self.key:
            remove_slot_dir(self.key, slot)

    # -- choosing a slot ---------------------------------------------------------------

    def _select(self, now: float) -> tuple[str, bool] | None:
        """The slot to hand out from (left among the candidates) and whether it
        is ready (False: its first request is released at once); None if no
        slot is ready (the engine is woken when one will be)."""
        frontier = self._frontier
        if frontier.prefetch is not None:
            frontier.prefetch.retry()
        self._wake_due(now)
        self._wake_overdue(now)
        if self._full and now >= self._recheck_full_at:
            watching = frontier.departures.watching  # else a download ending is not told
            if not watching:  # nor a request leaving for good: the ledger looks
                frontier.ledger.returns_untold()
            self._recheck_full_at = now + FULL_RECHECK if watching else now
            for slot in list(self._full):
                self._candidate(slot)
        while True:
            chosen = self._choose(now)
            if chosen is None or chosen[1] == RELEASE or chosen[2]:
                break
            # Chosen on what an earlier look found: looked at now before it goes.
            slot = chosen[0]
            self._candidates.popleft()
            del self._where[slot]
            try:
                found, _ = self._look(slot, now)
            except BaseException:
                if slot not in self._where:
                    self._candidate(slot)
                raise
            if found != WAIT:
                self._candidate(slot, front=True)
                chosen = slot, found, True
                break
        if chosen is None:
            self._wake_later()
            return None
        return chosen[0], chosen[1] == READY

    def _choose(self, now: float) -> tuple[str, Found, bool] | None:
        """One pass over the candidates: the slot to hand out from (left first
        among them), RELEASE or READY, and whether it was looked at in this
        pass (a ready slot looked at since its last change is not looked at
        again: ``_seen_ready``); None if none is ready.

        Ready slots looked at and not chosen (they had requests out) go
        behind the others, in their order, and stay candidates: the next pop
        looks first at the slots not looked at, one of which may have none out."""
        candidates = self._candidates
        seen = self._seen_ready
        where = self._where
        ready: list[str] = []  # in the order looked at
        best_out = -1
        best_slot = ""
        best_looked = False
        for _ in range(len(candidates)):
            slot = candidates.popleft()
            out = seen.get(slot)
            looked = out is None
            if out is None:
                del where[slot]
                try:
                    found, out = self._look(slot, now)
                except BaseException:  # a bug must lose no slot, nor its requests
                    if slot not in where:
                        self._candidate(slot)
                    candidates.extend(ready)
                    raise
                if found == RELEASE:
                    candidates.extend(ready)
                    self._candidate(slot, front=True)
                    return slot, RELEASE, True
                if found != READY:
                    continue  # parked where it waits
                seen[slot] = out
                where[slot] = CANDIDATE
            ready.append(slot)
            if best_out < 0 or out < best_out:  # the first of the fewest: in turn
                best_out, best_slot, best_looked = out, slot, looked
                if out == 0:  # nobody can have fewer
                    break
        if best_out < 0:
            return None
        ready.remove(best_slot)
        candidates.extend(ready)
        candidates.appendleft(best_slot)
        return best_slot, READY, best_looked

    def _look(self, slot: str, now: float) -> tuple[Found, int]:
        """(READY, requests out) / (RELEASE, 0) for a slot, else (WAIT, 0) with
        the slot parked where it waits."""
        if slot == RELEASE_SLOT:
            return RELEASE, 0
        frontier = self._frontier
        robots = frontier.robots
        if slot.startswith(PENDING):
            self._settle(slot)
            return WAIT, 0
        delay = 0.0
        if robots is not None:
            head = self._head(slot)
            if head is not None:
                verdict, delay, origin = self._verdicts.readiness(robots, slot, head)
                if verdict == REFUSED:
                    return RELEASE, 0
                if self._overdue and verdict != UNKNOWN and origin is not None:
                    self._overdue.pop(origin, None)  # known now: waited for again next time
                if verdict == UNKNOWN and origin is not None and origin not in self._overdue:
                    self._await(slot, origin)
                    if frontier.prefetch is not None:
                        frontier.prefetch.want(origin, head)  # may end at once
                    return WAIT, 0
        left = robots.slot_gate(slot) if robots is not None else None
        if left is not None and left > PROBE_LEAD:  # paused after a 429/503
            self._sleep(slot, now + left - PROBE_LEAD)
            return WAIT, 0
        # Those a paused or resuming slot's gate holds count (the ledger's, detached but alive).
        out = frontier.out(slot)
        if out >= frontier.slots.concurrency(slot):
            self._park_full(slot)
            return WAIT, 0
        wait = frontier.turns.wait(slot, delay, now)
        if wait > 0:
            self._sleep(slot, now + wait)
            return WAIT, 0
        return READY, out

    def _settle(self, pending: str) -> None:
        """An origin's pending queue waits for its robots.txt, or is drained."""
        robots = self._frontier.robots
        head = self._head(pending)
        verdict, _, origin = robots.readiness(head) if robots and head else (REFUSED, 0.0, None)
        if verdict != UNKNOWN or origin is None or head is None or origin in self._overdue:
            self._drain(pending)
            return
        self._await(pending, origin)
        prefetch = self._frontier.prefetch
        if prefetch is not None:
            prefetch.want(origin, head)  # may end at once: then drained

    def _take(self, slot: str, now: float, *, ready: bool) -> Request | None:
        """Hand out the first request of ``slot`` (the leftmost candidate)."""
        queue = self.pqueues[slot]
        request = queue.pop()
        self._heads.pop(slot, None)
        self._seen_ready.pop(slot, None)
        if len(queue) == 0:
            self._candidates.popleft()
            del self._where[slot]
            self._verdicts.forget(slot)
            self._drop_queue(slot)
        elif ready:  # its turn is taken: the others go first
            self._candidates.popleft()
            self._candidates.append(slot)
        if request is None:
            return None
        frontier = self._frontier
        robots, prefetch = frontier.robots, frontier.prefetch
        # The origin push counted (readiness: none for dont_obey_robotstxt)
        if robots and prefetch and not request.meta.get("dont_obey_robotstxt"):
            origin = robots.origin_of(request)
            if origin is not None:
                prefetch.taken(origin)
        if ready:
            frontier.ledger.hand_out(request, slot)
            frontier.turns.handed(slot, request, now)
            if frontier.turns.holding:
                frontier.hold_began()
        frontier.handed_out(ready=ready)
        return request

    def _head(self, slot: str) -> Request | None:
        """The slot's first request, None if its queues cannot peek (then the
        slot's own readiness alone counts)."""
        try:
            return self._heads[slot]
        except KeyError:
            pass
        head: Request | None
        try:
            head = peek_priority_queue(self.pqueues[slot])
        except (NotImplementedError, AttributeError):
            head = None
        self._heads[slot] = head
        return head

    # -- where slots wait -----------------------------------------------------------

    def _candidate(self, slot: str, *, front: bool = False) -> None:
        where = self._where.get(slot)
        if where == CANDIDATE:
            return
        if where == FULL:
            self._full.discard(slot)
        elif where == SLEEPING:
            del self._sleep_until[slot]
        elif where == AWAITING:
            origin = self._awaiting_on.pop(slot)
            waiting = self._awaiting.get(origin)
            if waiting is not None:
                waiting.discard(slot)
                if not waiting:
                    del self._awaiting[origin]
        self._where[slot] = CANDIDATE
        if front:
            self._candidates.appendleft(slot)
        else:
            self._candidates.append(slot)

    def _sleep(self, slot: str, until: float) -> None:
        self._seen_ready.pop(slot, None)
        self._where[slot] = SLEEPING
        self._sleep_until[slot] = until
        heapq.heappush(self._sleeping, (until, slot))

    def _park_full(self, slot: str) -> None:
        self._seen_ready.pop(slot, None)
        self._where[slot] = FULL
        self._full.add(slot)

    def _await(self, slot: str, origin: Origin) -> None:
        self._seen_ready.pop(slot, None)
        self._where[slot] = AWAITING
        self._awaiting_on[slot] = origin
        self._awaiting.setdefault(origin, set()).add(slot)
        if origin not in self._awaited_since:  # the deadline runs from the first wait
            until = self._awaited_since[origin] = _clock.monotonic() + AWAIT_ROBOTS
            heapq.heappush(self._await_due, (until, origin))

    def _wake_overdue(self, now: float) -> None:
        """Slots that waited AWAIT_ROBOTS for their origin's robots.txt are
        looked at again: while the prefetch window moves and has the origin
        in hand, they wait on; else they are handed out whatever it is (a
        fetch that never ended, or never started, holds no request for good)."""
        due = self._await_due
        prefetch = self._frontier.prefetch
        while due and due[0][0] <= now:
            until, origin = heapq.heappop(due)
            if self._awaited_since.get(origin) != until:
                continue  # known since, or waited on anew
            slots = self._awaiting.get(origin)
            if not slots:
                del self._awaited_since[origin]
                continue
            if prefetch is not None and prefetch.moving(origin, AWAIT_ROBOTS):
                until = self._awaited_since[origin] = now + AWAIT_ROBOTS
                heapq.heappush(due, (until, origin))
                continue
            del self._awaited_since[origin]
            self._overdue[origin] = None
            if len(self._overdue) > OVERDUE_ORIGINS:
                self._overdue.popitem(last=False)
            self._frontier.stats.inc_value("rep/frontier/robotstxt_overdue")
            for slot in list(slots):
                self._candidate(slot)

    def _wake_due(self, now: float) -> None:
        sleeping = self._sleeping
        while sleeping and sleeping[0][0] <= now:
            until, slot = heapq.heappop(sleeping)
            if self._where.get(slot) == SLEEPING and self._sleep_until[slot] == until:
                self._candidate(slot)

    def _wake_later(self) -> None:
        """Have the engine ask again when the first sleeping slot wakes, the
        first wait for a robots.txt ends, or full slots are looked at again."""
        sleeping = self._sleeping
        first = None
        while sleeping:
            until, slot = sleeping[0]
            if self._where.get(slot) == SLEEPING and self._sleep_until[slot] == until:
                first = until
                break
            heapq.heappop(sleeping)
        due = self._await_due
        while due:
            until, origin = due[0]
            if self._awaited_since.get(origin) == until:
                first = until if first is None else min(first, until)
                break
            heapq.heappop(due)
        if self._full and self._frontier.departures.watching:  # the full slots' recheck
            until = self._recheck_full_at
            first = until if first is None else min(first, until)
        if first is not None:
            self._frontier.wakeup.at(first)
        self._frontier.flush_tally()  # a lull: the stats are up to date

    def close(self) -> dict[str, list[int]]:
        self._heads.clear()
        self._seen_ready.clear()
        self._verdicts.clear()
        self._frontier.wakeup.cancel()  # the crawl ends: no more turns to wake it for
        self._frontier.flush_tally()
        return super().close()


def _pop_all(queue: ScrapyPriorityQueue) -> list[Request]:
    taken: list[Request] = []
    while (request := queue.pop()) is not None:
        taken.append(request)
    return taken
