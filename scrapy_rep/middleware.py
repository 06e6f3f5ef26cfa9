"""``scrapy_rep.RobotsTxtMiddleware``: each request checked against its origin's robots.txt.

How a request is checked (``process_request``):

- known and fresh rules: a synchronous check that returns None or raises
  (no Deferred, no task, no coroutine); expired good rules are still served
  while :class:`~scrapy_rep.fetcher.RobotsFetcher` refreshes them in the
  background;
- unknown origin (or an unreachable one whose retry time has come): a
  coroutine is returned, which Scrapy awaits. It joins the origin's single
  in-flight fetch. While waiting, the request leaves the downloader's active
  set (:mod:`scrapy_rep._waiting`), so waiting does not starve origins whose
  rules are known.

The verdict is one path (:meth:`RobotsTxtMiddleware._verdict`): the rules of
the request's user agent, then the origin's delay. The delay becomes the
download slot's minimum (:mod:`scrapy_rep._slots`), or, with shared state, a
turn reserved cluster-wide (:mod:`scrapy_rep.cluster`), waited for detached
like robots.txt waiters.

A download slot that answered 429 or 503 is paused (:mod:`scrapy_rep.slowdown`):
requests to it wait at its gate, where they leave ``process_request``, after
their robots.txt and Crawl-delay waits. With nothing paused, the gate costs one
dict truthiness test. Last, a request takes a place of its slot, which has
at most its concurrency of them in flight (:mod:`scrapy_rep._slots.limits`,
``REP_SLOT_LIMIT``): Scrapy does not hold that on the asyncio reactor.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from scrapy import signals
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred, succeed

from scrapy_rep import _compat, _slots, _startup
from scrapy_rep import signals as rep_signals
from scrapy_rep._slots import SlotDelays, SlotLimits, SlotPauses
from scrapy_rep._waiting import Waiting
from scrapy_rep.cache import MemoryRulesCache
from scrapy_rep.cluster import CLOSING, LOCAL, PACED, SharedState
from scrapy_rep.cluster.pacing import turn_taken
from scrapy_rep.config import Config
from scrapy_rep.exceptions import ForbiddenByRobots, RobotsTxtUnavailable
from scrapy_rep.fetcher import RobotsFetcher
from scrapy_rep.origin import Origin, OriginKeys, origin_text
from scrapy_rep.policy import delay_for
from scrapy_rep.report import CrawlReport
from scrapy_rep.robotstxt._agent import product_token
from scrapy_rep.slowdown import SlowDown

if TYPE_CHECKING:
    from collections.abc import Coroutine
    from urllib.parse import ParseResult

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    from scrapy_rep.cluster import ClusterDelay
    from scrapy_rep.policy import Entry
    from scrapy_rep.robotstxt import RobotsTxt

logger = logging.getLogger(__name__)

_MAX_HEADER_AGENTS = 1_000
"""User-Agent header values whose product token is remembered."""

# What the scheduler queue (scrapy_rep.frontier) learns of a request before it
# leaves the scheduler (RobotsTxtMiddleware.readiness).
UNKNOWN = 0
"""Its origin's robots.txt is not known: here, it would wait for it."""
ALLOWED = 1
"""Its verdict is known: it would pass (after its delay and its slot's pause)."""
REFUSED = 2
"""It would be dropped at once (forbidden, or robots.txt unreachable)."""


class RobotsTxtMiddleware:
    """Obey robots.txt (RFC 9309) per origin; see the module docstring."""

    def __init__(self, crawler: Crawler, config: Config):
        self.crawler = crawler
        self.config = config
        self._ua = config.user_agent
        # A User-Agent header set on the request by the spider names its agent,
        # unless ROBOTSTXT_USER_AGENT says who we are (as in Scrapy's middleware).
        self._header_agents: dict[bytes, str] | None = None if config.explicit_agent else {}
        self._dry_run = config.dry_run
        self._stats = crawler.stats
        self._keys = OriginKeys(config.cache_max_origins)
        self._slots = (
            SlotDelays(crawler, config.cache_max_origins) if config.obey_crawl_delay else None
        )
        self._waiting = Waiting.of(crawler, config.max_waiting)
        shared = SharedState.connect(crawler, config, pacing=self._slots is not None)
        self._slowdown: SlowDown | None = None
        if config.slowdown:
            pauses = SlotPauses(crawler)
            if self._slots is not None:
                self._slots.pauses = pauses
            self._slowdown = SlowDown(crawler, config, self._waiting, pauses, shared.pauses)
        # The slots holding requests now (paused or resuming): tested on every request.
        self._gates = self._slowdown.gates if self._slowdown is not None else {}
        self._limits = (
            SlotLimits(crawler, crawler.stats, self._waiting) if config.slot_limit else None
        )
        self._cache = (
            shared.rules
            if shared.rules is not None
            else MemoryRulesCache(config.cache_max_origins, config.backoff_max_origins)
        )
        self._cluster_delay: ClusterDelay | None = shared.delay
        self.report = CrawlReport(crawler, config)
        crawler.signals.connect(self._spider_opened, signal=signals.spider_opened)
        self.fetcher = RobotsFetcher(
            crawler,
            config,
            self._cache,
            shared_rules=shared.rules,
            cluster_delay=shared.delay,
            sleep=self._waiting.sleep,
            report=self.report,
            uncapped=_startup.uncapped(crawler.settings),
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotsTxtMiddleware:
        return cls(crawler, _startup.checked_config(crawler))

    def _spider_opened(self) -> None:
        _slots.log_problems(
            self.crawler,
            delays=self._slots is not None,
            pauses=self._slowdown is not None,
            limits=self._limits is not None,
        )

    @classmethod
    def of(cls, crawler: Crawler) -> RobotsTxtMiddleware | None:
        """The crawler's running instance, for spiders and commands (None if off)."""
        for middleware in _slots.running_middlewares(crawler.engine):
            if isinstance(middleware, cls):
                return middleware
        return None

    async def entry_for(self, url: str) -> Entry | None:
        """What is known of ``url``'s origin robots.txt, fetching it if unknown
        (joining any fetch in flight). None for URLs robots.txt does not cover."""
        origin = self._keys.get(urlparse(url))
        if origin is None:
            return None
        entry = self._cache.get(origin)
        if entry is None or (entry.robots is None and entry.expires <= time.time()):
            entry = await maybe_deferred_to_future(self.fetcher.join(origin))
        return entry

    def known_rules(self, request: Request) -> RobotsTxt | None:
        """The rules already known for ``request``'s origin (no fetch, no wait):
        what the request was just checked against, for components placed after
        this middleware. None when there are none (unknown, unreachable, not http)."""
        origin = self._keys.get(urlparse_cached(request))
        entry = self._cache.get(origin) if origin is not None else None
        return entry.robots if entry is not None else None

    # -- for the scheduler queue (scrapy_rep.frontier) ----------------------------

    def readiness(self, request: Request) -> tuple[int, float, Origin | None]:
        """What this middleware would do with ``request`` now, without fetching,
        waiting or counting: (UNKNOWN, ALLOWED or REFUSED; its origin's delay
        for its agent, 0 if none; its origin, None if robots.txt does not cover
        it). Under REP_UNREACHABLE = 'defer', an unreachable origin's requests
        read ALLOWED: they wait here, for its next attempts, at most
        REP_DEFER_MAX seconds."""
        if request.meta.get("dont_obey_robotstxt"):
            return ALLOWED, 0.0, None
        origin = self._keys.get(urlparse_cached(request))
        if origin is None:
            return ALLOWED, 0.0, None
        entry = self._cache.get(origin)
        if entry is None:
            return UNKNOWN, 0.0, origin
        robots = entry.robots
        if robots is None:
            mode = self.config.unreachable
            if mode == "defer":  # kept here, within REP_DEFER_MAX, refetched meanwhile
                return ALLOWED, 0.0, origin
            if entry.expires <= time.time():
                return UNKNOWN, 0.0, origin
            refused = mode == "disallow" and not self._dry_run
            return (REFUSED if refused else ALLOWED), 0.0, origin
        meta_agent = request.meta.get("rep_user_agent")
        agent = self._ua
        if meta_agent or self._header_agents is not None:
            agent = self._agent_of(request, meta_agent)
        if not self._dry_run and not robots.allowed(request.url, user_agent=agent):
            return REFUSED, 0.0, origin
        if self._slots is None:
            return ALLOWED, 0.0, origin
        return ALLOWED, entry.delay if agent == self._ua else self._delay(robots, agent), origin

    def origin_of(self, request: Request) -> Origin | None:
        """``request``'s origin, None if robots.txt does not cover it."""
        return self._keys.get(urlparse_cached(request))

    def prefetch(self, origin: Origin, request: Request) -> Deferred[Any] | None:
        """Start fetching ``origin``'s robots.txt for ``request`` (or join the
        fetch in flight): a Deferred fired once its verdict is known (at once if
        it is). None, and nothing started, while REP_MAX_FETCHES robots.txt
        downloads run: the caller asks again later."""
        entry = self._cache.get(origin)
        if entry is not None and (entry.robots is not None or entry.expires > time.time()):
            return succeed(entry)
        if self.fetcher.download.busy:
            return None
        return self.fetcher.join(origin, request)

    def slot_gate(self, key: str) -> tuple[float, int, int, int] | None:
        """Download slot ``key``'s 429/503 gate (scrapy_rep.slowdown): None when
        it has none (not paused, not resuming); else (seconds its pause still
        lasts, <= 0 once over; requests it lets be out at once; requests it
        holds; requests it released that are not answered yet)."""
        gate = self._gates.get(key)
        if gate is None:
            return None
        held = len(gate.waiters) + len(gate.parked)
        return gate.until - time.monotonic(), gate.allowed, held, len(gate.out)

    # -- the check ------------------------------------------------------------

    def process_request(
        self, request: Request, spider: Spider | None = None
    ) -> Coroutine[Any, Any, None] | None:
        if request.meta.get("dont_obey_robotstxt"):
            return None
        url = urlparse_cached(request)
        checked = self._check(request, url)
        # A request that may go now leaves through its slot's gate and limit;
        # the coroutines of _check do that at their end, after waiting for
        # robots.txt or a turn.
        if checked is None:
            if self._gates:
                return self._leave(request, url)
            limits = self._limits  # _leave's last step, inline: every request passes here
            return limits.admit(request, url) if limits is not None else None
        return checked

    def _leave(
        self, request: Request, url: ParseResult | None = None
    ) -> Coroutine[Any, Any, None] | None:
        """Where a request that may go now waits for its slot's gate (a paused
        slot), then for a place in its slot; None: it goes now. (``url``: its
        URL, parsed already.)"""
        if self._gates:  # tested here: no call on the hot path when none is paused
            assert self._slowdown is not None
            held = self._slowdown.gate(request)
            if held is not None:
                self._stats.inc_value("rep/waited/gate")
                return self._gated(request, held)
        limits = self._limits
        return limits.admit(request, url) if limits is not None else None

    async def _gated(self, request: Request, held: Coroutine[Any, Any, None]) -> None:
        await held
        if self._limits is not None:
            placed = self._limits.admit(request)
            if placed is not None:
                await placed

    def _check(self, request: Request, url: ParseResult) -> Coroutine[Any, Any, None] | None:
        origin = self._keys.get(url)
        if origin is None:  # not http(s): robots.txt does not apply
            return None
        entry = self._cache.get(origin)
        if entry is None:
            return self._wait(request, origin, None)
        if entry.expires <= time.time():
            if entry.robots is None:
                return self._wait(request, origin, entry)
            self.fetcher.refresh(origin, request)  # serve the old rules meanwhile
        elif entry.robots is None:
            return self._unreachable(request, origin, entry)
        return self._verdict(request, origin, entry, entry.robots)

    def _verdict(
        self, request: Request, origin: Origin, entry: Entry, robots: RobotsTxt
    ) -> Coroutine[Any, Any, None] | None:
        """Drop the request if its agent may not fetch it (unless dry run), then
        apply the origin's delay for that agent."""
        meta_agent = request.meta.get("rep_user_agent")
        agent = self._ua
        if meta_agent or self._header_agents is not None:  # else the crawl's token
            agent = self._agent_of(request, meta_agent)
        if not robots.allowed(request.url, user_agent=agent):
            self._forbid(request, origin, robots, agent)
        if self._slots is None:
            return None
        delay = entry.delay if agent == self._ua else self._delay(robots, agent)
        return self._pace(request, origin, delay) if delay else None

    def agent_of(self, request: Request) -> str:
        """The product token ``request`` is checked as (for components after
        this middleware, which must read the same group)."""
        return self._agent_of(request, request.meta.get("rep_user_agent"))

    def _agent_of(self, request: Request, meta_agent: Any) -> str:
        """The token robots.txt is read for: meta ``rep_user_agent``, else the
        request's own User-Agent header (set by the spider; only without
        ROBOTSTXT_USER_AGENT), else the crawl's."""
        if meta_agent:
            return product_token(str(meta_agent)) or str(meta_agent)
        header_agents = self._header_agents
        headers = _compat.headers_if_any(request)
        if header_agents is None or not headers:  # Scrapy fills them in after us
            return self._ua
        value = headers.get(b"User-Agent")
        if not value:
            return self._ua
        token = header_agents.get(value)
        if token is None:
            if len(header_agents) >= _MAX_HEADER_AGENTS:
                header_agents.clear()
            token = header_agents[value] = product_token(value) or self._ua
        return token

    def _delay(self, robots: RobotsTxt, agent: str) -> float:
        return delay_for(robots, agent, self.config.max_crawl_delay)[0]

    def _forbid(self, request: Request, origin: Origin, robots: RobotsTxt, agent: str) -> None:
        decision = robots.decide(request.url, user_agent=agent)
        if decision.allowed:  # cannot differ from allowed(); never drop on doubt
            return
        self._stats.inc_value("rep/dry_run/forbidden" if self._dry_run else "rep/forbidden")
        self.report.forbidden(origin, decision, dry_run=self._dry_run)
        where = f" line {decision.line} ({decision.rule})" if decision.line else ""
        logger.debug(
            "%s by robots.txt%s: %s",
            "Would be forbidden" if self._dry_run else "Forbidden",
            where,
            request,
            extra={"spider": self.crawler.spider},
        )
        text = origin_text(origin)
        self.crawler.signals.send_catch_log(
            signal=rep_signals.request_forbidden, request=request, decision=decision, origin=text
        )
        if not self._dry_run:
            raise ForbiddenByRobots(decision, text)

    def _unreachable(
        self, request: Request, origin: Origin, entry: Entry, *, waited: bool = False
    ) -> Coroutine[Any, Any, None] | None:
        mode = self.config.unreachable
        if mode == "allow":
            self._stats.inc_value("rep/unreachable/allowed")
            return None
        if mode == "defer":
            if self._dry_run:
                self._stats.inc_value("rep/dry_run/deferred")
                return None
            if not waited:
                return self._wait(request, origin, entry)
        self._drop_unreachable(request, origin, entry.reason, "rep/unreachable/dropped")
        return None

    def _drop_unreachable(self, request: Request, origin: Origin, reason: str, stat: str) -> None:
        self._stats.inc_value(stat.replace("rep/", "rep/dry_run/", 1) if self._dry_run else stat)
        self.report.dropped(origin, reason, dry_run=self._dry_run)
        text = origin_text(origin)
        logger.debug(
            "%s: robots.txt of %s unreachable (%s): %s",
            "Would be dropped" if self._dry_run else "Dropped",
            text,
            reason,
            request,
            extra={"spider": self.crawler.spider},
        )
        if not self._dry_run:
            raise RobotsTxtUnavailable(text, reason)

    # -- waiting for robots.txt ----------------------------------------------------

    async def _wait(self, request: Request, origin: Origin, entry: Entry | None) -> None:
        self._stats.inc_value("rep/waited/robotstxt")
        with self._waiting.detached(request):
            entry = await self._await_rules(request, origin, entry)
        if entry is None:
            return
        if entry.robots is None:
            self._unreachable(request, origin, entry, waited=True)
        else:
            paced = self._verdict(request, origin, entry, entry.robots)
            if paced is not None:
                await paced  # it left through its gate and limit at its turn
                return
        leaving = self._leave(request)
        if leaving is not None:
            await leaving

    async def _await_rules(
        self, request: Request, origin: Origin, entry: Entry | None
    ) -> Entry | None:
        """The origin's entry once known; under REP_UNREACHABLE = 'defer', once
        reachable, for at most REP_DEFER_MAX seconds after robots.txt was first
        found unreachable, fetches in flight included (None: the request was
        dropped meanwhile)."""
        defer = self.config.unreachable == "defer" and not self._dry_run
        deadline: float | None = None  # set once the origin is found unreachable
        while True:
            if entry is None or (entry.robots is None and entry.expires <= time.time()):
                entry = await self._join(origin, request, deadline)
                if entry is None:  # the deadline came during the fetch
                    reason = f"still unreachable after {self.config.defer_max:g} s"
                    self._drop_unreachable(request, origin, reason, "rep/deferred/expired")
                    return None
            if entry.robots is not None or not defer:
                if deadline is not None:
                    self._stats.inc_value("rep/deferred/released")
                return entry
            now = time.time()
            if deadline is None:
                deadline = now + self.config.defer_max
                self._stats.inc_value("rep/deferred")
            if now >= deadline:
                reason = f"{entry.reason}, still after {self.config.defer_max:g} s"
                self._drop_unreachable(request, origin, reason, "rep/deferred/expired")
                return None
            if not await self._waiting.sleep(min(entry.expires, deadline) - now):
                self._drop_unreachable(
                    request, origin, "the spider is closing", "rep/deferred/dropped_closing"
                )
                return None
            entry = self._cache.get(origin)

    async def _join(self, origin: Origin, request: Request, deadline: float | None) -> Entry | None:
        """The entry of the origin's fetch (started for ``request`` if none is in
        flight); None if ``deadline`` comes first."""
        timeout = None if deadline is None else deadline - time.time()
        return await maybe_deferred_to_future(self.fetcher.join(origin, request, timeout=timeout))

    # -- Crawl-delay ----------------------------------------------------------------

    def _pace(
        self, request: Request, origin: Origin, delay: float
    ) -> Coroutine[Any, Any, None] | None:
        """Apply the origin's delay: the slot's local minimum, or a turn
        reserved cluster-wide when Redis paces it (scrapy_rep.cluster)."""
        assert self._slots is not None
        self.report.paced(origin, delay)
        cluster = self._cluster_delay
        if cluster is None:
            self._slots.require(request, delay)
            return None
        if turn_taken(request):  # the Redis queue took its turn (scrapy_rep.cluster.queue)
            self._stats.inc_value("rep/redis/delay/queue_turn")
            self._slots.let_cluster_pace(request)
            return None
        if not cluster.up:  # Redis unavailable: each worker spaces its own requests
            self._stats.inc_value("rep/redis/delay/local")
            self._slots.require(request, delay)
            return None
        return self._paced(request, delay, cluster)

    async def _paced(self, request: Request, delay: float, cluster: ClusterDelay) -> None:
        self._stats.inc_value("rep/waited/turn")
        slots = self._slots
        assert slots is not None
        key = _slots.slot_key(self.crawler.engine, request)
        spacing = max(delay, slots.let_cluster_pace(request))
        slowdown = self._slowdown
        with self._waiting.detached(request):
            while True:
                # No turn is reserved during a pause (Redis pushed the slot's
                # schedule past it), and a turn that falls in a pause learnt
                # meanwhile is not used: wait it out, reserve again.
                if slowdown is not None and not await slowdown.sit_out(key):
                    outcome = CLOSING
                    break
                outcome = await cluster.pace(key, spacing, self._waiting.sleep)
                if outcome != PACED or slowdown is None or not slowdown.paused(key, 0.05):
                    break
                self._stats.inc_value("rep/slowdown/redis/turn_in_pause")
        if outcome == CLOSING:
            raise IgnoreRequest(
                f"the spider closed while the request waited for its Crawl-delay turn: {request}"
            )
        if outcome == LOCAL:  # Redis unavailable: paced here, through the slot's gate
            slots.require(request, delay)
            leaving = self._leave(request)
        else:  # its turn waited for any pause: only its slot's limit is left
            leaving = self._limits.admit(request) if self._limits is not None else None
        if leaving is not None:
            await leaving
