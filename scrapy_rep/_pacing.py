"""Where a request that may go waits for its turn: Crawl-delay, a paused slot, a place in its slot.

The robots middleware hands a request here once its verdict is known. It
meets, in this order: its **Crawl-delay** (and Request-rate), as the download
slot's minimum delay (:class:`~scrapy_rep._slots.SlotDelays`) or, with shared
state, a turn reserved cluster-wide (:class:`~scrapy_rep.cluster.ClusterDelay`)
waited for out of the downloader's active set; **a paused slot's gate**
(429/503, :mod:`scrapy_rep.slowdown`), sat out first by a request waiting for
a cluster turn; **a place in its slot** (``REP_SLOT_LIMIT``,
:class:`~scrapy_rep._slots.SlotLimits`). With nothing paused, leaving costs
one attribute test and the slot limit's few dict lookups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import IgnoreRequest

from scrapy_rep import _clock, _slots
from scrapy_rep._meta_keys import ROBOTS_META
from scrapy_rep._slots import SlotDelays, SlotLimits, SlotPauses
from scrapy_rep.challenges import Challenges
from scrapy_rep.cluster import CLOSING, LOCAL, PACED
from scrapy_rep.cluster.pacing import turn_taken
from scrapy_rep.cluster.stops import ClusterStops
from scrapy_rep.slowdown import SlowDown
from scrapy_rep.slowdown.gates import Gates

if TYPE_CHECKING:
    from collections.abc import Coroutine
    from urllib.parse import ParseResult

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_rep._slots import Waiting
    from scrapy_rep.cluster import ClusterDelay, SharedState
    from scrapy_rep.cluster.pacing import Pace
    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin
    from scrapy_rep.report import CrawlReport


class Pacing:
    """The crawl's pacing of requests whose verdict is known; the robots
    middleware reads ``gates`` and ``limits`` (None when off) on every request."""

    def __init__(
        self,
        crawler: Crawler,
        config: Config,
        waiting: Waiting,
        shared: SharedState,
        report: CrawlReport,
    ) -> None:
        self._crawler = crawler
        stats = crawler.stats
        assert stats is not None
        self._stats = stats
        self._waiting = waiting
        self._report = report
        pauses = SlotPauses(crawler)
        # Both read every answer: one response_downloaded receiver (Scrapy's
        # dispatch costs about what either's reading does) calls the stop
        # signals first, as they mark an answer the slow-down then ignores.
        both = config.stop_signals and config.slowdown
        self.challenges = (
            Challenges(crawler, config, pauses, listen=not both) if config.stop_signals else None
        )
        self.slowdown = (
            SlowDown(crawler, config, waiting, pauses, shared.pauses, listen=not both)
            if config.slowdown
            else None
        )
        if both:
            crawler.signals.connect(self._downloaded, signal=signals.response_downloaded)
        self.gates: Gates | None = self.slowdown.gates if self.slowdown is not None else None
        if self.challenges is not None:  # challenge pauses hold slots through the same gates
            report.sections.append(self.challenges.section)
            report.stop_signals = self.challenges.states
            if self.gates is None:
                self.gates = Gates(crawler, stats, waiting, pauses, config.cache_max_origins)
            self.challenges.gates = self.gates
            if shared.pauses is not None:  # with pauses, stops are shared too
                self.challenges.share(
                    shared.pauses, ClusterStops(shared.pauses.link, config, stats)
                )
        if self.gates is not None and shared.pauses is not None:  # one probe per shared pause
            self.gates.claim = shared.pauses.claim_probe
        paused = self.gates.paused if self.gates is not None else None
        self.delays = (
            SlotDelays(crawler, config.cache_max_origins, paused)
            if config.obey_crawl_delay
            else None
        )
        self._cluster: ClusterDelay | None = shared.delay
        self.limits = SlotLimits(crawler, stats, waiting) if config.slot_limit else None
        crawler.signals.connect(self._spider_opened, signal=signals.spider_opened)

    def _downloaded(self, response: Response, request: Request) -> None:
        challenges, slowdown = self.challenges, self.slowdown
        assert challenges is not None
        assert slowdown is not None
        try:
            challenges.downloaded(response, request)
        finally:  # as with two receivers, an error in one does not skip the other
            slowdown.downloaded(response, request)

    def _spider_opened(self) -> None:
        _slots.log_problems(
            self._crawler,
            delays=self.delays is not None,
            pauses=self.gates is not None,  # 429/503 or challenge pauses
            limits=self.limits is not None,
        )

    # -- Crawl-delay ----------------------------------------------------------------

    def pace(
        self, request: Request, origin: Origin, delay: float
    ) -> Coroutine[Any, Any, None] | None:
        """Apply the origin's delay (> 0) to ``request``: the slot's local
        minimum, or a turn reserved cluster-wide when Redis paces it. None: it
        leaves now (:meth:`leave`); else a coroutine that waits for its turn,
        then leaves."""
        delays = self.delays
        assert delays is not None  # no delay is asked for without REP_OBEY_CRAWL_DELAY
        self._report.paced(origin, delay)
        cluster = self._cluster
        if cluster is None:
            delays.require(request, delay)
        elif turn_taken(request):  # the Redis queue took its turn (scrapy_rep.frontier.redis_queue)
            self._stats.inc_value("rep/redis/delay/queue_turn")
            delays.let_cluster_pace(request)
        elif not cluster.link.up:  # Redis unavailable: each worker spaces its own requests
            self._stats.inc_value("rep/redis/delay/local")
            delays.require(request, delay)
        else:
            return self._turn(request, delay, cluster, delays)
        return None

    async def _turn(
        self, request: Request, delay: float, cluster: ClusterDelay, delays: SlotDelays
    ) -> None:
        """Wait for ``request``'s cluster-wide turn, out of the active set. The
        turn holds its slot until the request reaches the site; one dropped
        before it leaves gives the slot back."""
        try:
            await self._take_turn(request, delay, cluster, delays)
        except BaseException:
            cluster.release(request)
            raise
        cluster.let_go(request)

    async def _take_turn(
        self, request: Request, delay: float, cluster: ClusterDelay, delays: SlotDelays
    ) -> None:
        self._stats.inc_value("rep/waited/turn")
        key = _slots.slot_key(self._crawler.engine, request)
        spacing = max(delay, delays.let_cluster_pace(request))
        gates = self.gates
        outcome: Pace
        with self._waiting.detached(request):
            while True:
                # No turn is reserved during a pause (Redis pushed the slot's
                # schedule past it), and a turn that falls in a pause learnt
                # meanwhile is not used: wait it out, reserve again.
                if gates is not None and not await gates.sit_out(key):
                    outcome = CLOSING
                    break
                outcome = await cluster.pace(key, spacing, self._waiting.sleep, request)
                if outcome != PACED or gates is None or not gates.paused(key, 0.05):
                    break
                self._stats.inc_value("rep/slowdown/redis/turn_in_pause")
        if outcome == CLOSING:
            raise IgnoreRequest(
                f"the spider closed while the request waited for its Crawl-delay turn: {request}"
            )
        if outcome == LOCAL:  # Redis unavailable: paced here, through the slot's gate
            delays.require(request, delay)
            leaving = self.leave(request)
        else:  # its turn waited for any pause: only its slot's limit is left
            leaving = self.limits.admit(request) if self.limits is not None else None
        if leaving is not None:
            await leaving

    # -- leaving ----------------------------------------------------------------------

    def leave(
        self, request: Request, url: ParseResult | None = None
    ) -> Coroutine[Any, Any, None] | None:
        """Wait at the slot's gate (a paused slot), then for a place in the slot;
        None: it goes now. ``url``: its URL, parsed already."""
        gates = self.gates
        if gates is not None and gates.holding:  # no call on the hot path when none holds
            held = gates.gate(request)
            if held is not None:
                self._stats.inc_value("rep/waited/gate")
                return self._gated(request, held)
        limits = self.limits
        placed = limits.admit(request, url) if limits is not None else None
        return placed if placed is None else self.placed(request, placed)

    def gate_only(self, request: Request) -> Coroutine[Any, Any, None] | None:
        """A request that skips robots.txt (``dont_obey_robotstxt``) still waits
        at a paused slot's gate (not for a place: the slot limit counts only
        the requests robots.txt let go). scrapy-rep's own robots.txt and
        tdmrep.json requests do not: they are how a slot gets its rules."""
        gates = self.gates
        if gates is None or ROBOTS_META in request.meta:
            return None
        held = gates.gate(request)
        if held is None:
            return None
        self._stats.inc_value("rep/waited/gate")
        return self._gated(request, held, place=False)

    async def placed(self, request: Request, placed: Coroutine[Any, Any, None]) -> None:
        """``placed`` (a wait for a place in the request's slot), then the
        slot's gate again if a pause began meanwhile (a challenge, a 429/503
        to a request already out): requests kept waiting for a place must
        not all go when the pause ends."""
        await placed
        gates = self.gates
        if gates is None:
            return
        if gates.holding:
            held = gates.gate(request)
            if held is not None:
                self._stats.inc_value("rep/waited/gate")
                await held
        if self.challenges is not None and self.challenges.stopped:  # stopped meanwhile
            self.challenges.check(request)

    async def _gated(
        self, request: Request, held: Coroutine[Any, Any, None], *, place: bool = True
    ) -> None:
        await held
        if self.challenges is not None and self.challenges.stopped:  # stopped meanwhile
            self.challenges.check(request)
        if place and self.limits is not None:
            placed = self.limits.admit(request)
            if placed is not None:
                await self.placed(request, placed)

    def gate_state(self, key: str) -> float | None:
        """Download slot ``key``'s 429/503 gate: None when it holds nothing (not
        paused, not resuming); else the seconds its pause still lasts, <= 0
        once over (the requests it holds are the ledger's, counted as out)."""
        gate = self.gates.by_slot.get(key) if self.gates is not None else None
        return None if gate is None or not gate.holding else gate.until - _clock.monotonic()
