"""What the queues of one crawl share: slot turns, robots.txt, prefetch, the engine's wake-up.

Scrapy's scheduler builds a memory queue and, with ``JOBDIR``, a disk queue;
both hand out requests of the same download slots, so this state is the
crawl's, one :class:`CrawlFrontier` per crawler (:func:`frontier_of`). It
tells the queues what frees a slot: a request leaving the downloader, and a
Crawl-delay slot's request sent (:mod:`scrapy_rep.frontier.turns`).
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Protocol

from scrapy import signals

from scrapy_rep import _clock
from scrapy_rep._context import crawl_context
from scrapy_rep._robots import robots_service
from scrapy_rep._slots.departures import Departures
from scrapy_rep._slots.readiness import SlotReadiness, readiness_problems
from scrapy_rep._slots.wakeup import EngineWakeup, wakeup_problems
from scrapy_rep.frontier.robots import Prefetch
from scrapy_rep.frontier.turns import SlotTurns

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_rep._robots import RobotsService
    from scrapy_rep.origin import Origin

logger = logging.getLogger(__name__)

TALLY_EVERY = 64
"""Hand-outs counted here before they are added to the crawl's stats: one
stats call costs about 1.7 µs on Scrapy 2.19 (its StatsCollector wraps every
attribute read), a tenth of a hand-out."""
DEFAULT_BOUND = 10_000
"""Slots whose last turn is remembered without the robots service's
REP_CACHE_MAX_ORIGINS (past it, turns older than any delay are forgotten)."""


class Listener(Protocol):
    """A frontier queue (see :class:`~scrapy_rep.frontier.queue.PolitePriorityQueue`)."""

    def robots_known(self, origin: Origin) -> None: ...

    def slot_freed(self, key: str) -> None: ...

    def turn_moved(self, key: str) -> None: ...


class CrawlFrontier:
    """The state the frontier queues of one crawl share (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        stats = crawler.stats
        assert stats is not None
        self.stats = stats
        self.slots = SlotReadiness(crawler)
        self.robots: RobotsService | None = robots_service(crawler)
        bound = self.robots.config.cache_max_origins if self.robots else DEFAULT_BOUND
        self.turns = SlotTurns(self.slots, bound)
        self.wakeup = EngineWakeup(crawler, self._woke)
        self.prefetch: Prefetch | None = None
        if self.robots is not None:
            self.prefetch = Prefetch(self.robots, stats, self._robots_known, ahead=bound // 2)
        self._listeners: weakref.WeakSet[Listener] = weakref.WeakSet()
        self._ready = 0  # hand-outs not in the stats yet
        self._released = 0
        self.ledger = crawl_context(crawler).waiting.ledger
        """The crawl's requests out: told each request handed out (:meth:`hand_out`)."""
        self.departures = Departures(crawler, self._departed)
        departure_problems = self.departures.install()
        if departure_problems:
            self.ledger.returns_untold()
        _log_problems(crawler, departure_problems)
        self._crawler = crawler
        self._told_of_sends = False

    def listen(self, queue: Listener) -> None:
        self._listeners.add(queue)

    def _robots_known(self, origin: Origin) -> None:
        for queue in list(self._listeners):
            queue.robots_known(origin)
        self.wakeup.now()

    def handed_out(self, *, ready: bool) -> None:
        """Count a hand-out (``rep/frontier/ready``, else
        ``rep/frontier/forbidden_released``): in the crawl's stats within
        TALLY_EVERY of them, when no slot is ready, and when the queues close."""
        if ready:
            self._ready += 1
        else:
            self._released += 1
        if self._ready + self._released >= TALLY_EVERY:
            self.flush_tally()

    def flush_tally(self) -> None:
        """Add the hand-outs counted by :meth:`handed_out` to the crawl's stats."""
        if self._ready:
            self.stats.inc_value("rep/frontier/ready", self._ready)
            self._ready = 0
        if self._released:
            self.stats.inc_value("rep/frontier/forbidden_released", self._released)
            self._released = 0

    def out(self, key: str) -> int:
        """Requests of slot ``key`` out: in it, on their way to it, or handed
        out and waiting in a middleware (at a 429/503 gate, for a place)."""
        return self.ledger.out(key, self.slots.holding(key))

    def _woke(self) -> None:
        self.stats.inc_value("rep/frontier/wakeups")

    def _departed(self, request: Request, final: bool) -> None:
        """``request`` left ``Downloader.active``: for good (``final``), or to
        wait in a middleware (one the frontier handed out is still out then:
        the ledger counts it until it leaves for good)."""
        if not final and request in self.ledger.handed:
            return
        key = self.ledger.returned(request) if final else None
        if key is None:  # not handed out by a frontier queue (scrapy-rep's own downloads)
            key = request.meta.get("download_slot")
            if key is None:  # it never reached its slot
                key = self.slots.key(request)
        for queue in self._listeners:
            queue.slot_freed(key)
        if final and self.turns.holding:
            self._sent(request)

    def hold_began(self) -> None:
        """A Crawl-delay slot is held (turns.py): have the answers told, from
        now on (a signal receiver costs every request some microseconds: a
        crawl without Crawl-delay sites pays none)."""
        if not self._told_of_sends:
            self._told_of_sends = True
            self._crawler.signals.connect(self._arrived, signal=signals.headers_received)
            self.ledger.follow("left", self._arrived)

    def _arrived(self, request: Request, **_: object) -> None:
        """``request``'s answer began, or it left the downloader."""
        if self.turns.holding:
            self._sent(request)

    def _sent(self, request: Request) -> None:
        key = self.turns.sent(request, _clock.monotonic())
        if key is None:
            return
        for queue in list(self._listeners):
            queue.turn_moved(key)
        self.wakeup.now()


def frontier_of(crawler: Crawler) -> CrawlFrontier:
    """The crawl's shared frontier state, made by its first queue (kept in the
    crawl's context)."""
    context = crawl_context(crawler)
    if context.frontier is None:
        context.frontier = CrawlFrontier(crawler)
    frontier: CrawlFrontier = context.frontier
    return frontier


def _log_problems(crawler: Crawler, departures: list[str]) -> None:
    """One ERROR at start naming the Scrapy version if an internal is missing."""
    import scrapy

    engine = crawler.engine
    problems = wakeup_problems(engine) + readiness_problems(getattr(engine, "downloader", None))
    problems += departures
    if problems:
        logger.error(
            "scrapy_rep.PolitePriorityQueue does not fully work with Scrapy %s: %s. "
            "Requests may be handed out before their download slot is ready, or the "
            "engine may ask for them only every 5 s. Please report this.",
            scrapy.__version__,
            "; ".join(problems),
        )
