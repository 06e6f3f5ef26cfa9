"""``scrapy_rep.RobotsTxtMiddleware``: each request checked against its origin's robots.txt.

Known rules (or expired good ones, served while they are refreshed) make
``process_request`` a synchronous check: no Deferred, no task, no coroutine.
An unknown origin gets a coroutine that joins the origin's one fetch, the
request out of the downloader's active set meanwhile
(:mod:`scrapy_rep._slots.waiting`), so waiting does not starve other origins.
A request that may go is handed to the crawl's pacing (:mod:`scrapy_rep._pacing`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached

from scrapy_rep import _clock
from scrapy_rep import signals as rep_signals
from scrapy_rep._robots import ALLOWED, REFUSED, UNKNOWN, RobotsService
from scrapy_rep.challenges import STOP_META, Challenges
from scrapy_rep.evidence import PROVENANCE_META, Evidence, unchecked
from scrapy_rep.exceptions import ForbiddenByRobots, RobotsTxtChanged, RobotsTxtUnavailable
from scrapy_rep.origin import Origin

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine
    from urllib.parse import ParseResult

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_rep.policy import Entry
    from scrapy_rep.robotstxt import Decision, RobotsTxt

__all__ = ["ALLOWED", "REFUSED", "UNKNOWN", "RobotsTxtMiddleware"]

logger = logging.getLogger(__name__)


class RobotsTxtMiddleware:
    """Obey robots.txt (RFC 9309) per origin; see the module docstring."""

    def __init__(self, crawler: Crawler, service: RobotsService):
        self.crawler = crawler
        self.service = service
        self.config = config = service.config
        self.report = service.report
        self.fetcher = service.fetcher
        self._ua = config.user_agent
        self._header_agents = service.header_agents
        self._dry_run = config.dry_run
        self._stats = service.stats
        self._keys = service.keys
        self._cache = service.cache
        self._waiting = service.waiting
        self._pacing = pacing = service.pacing
        self._delays = pacing.delays
        self._gates = pacing.gates
        self._limits = pacing.limits
        self._pins = service.pins
        self._stopped = service.pins.stopped if service.pins is not None else set()
        self._provenance = service.provenance
        self._challenges = pacing.challenges
        self._evidence = Evidence.of(crawler, config) if config.evidence_required else None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotsTxtMiddleware:
        return cls(crawler, RobotsService.start(crawler))

    # -- the check ------------------------------------------------------------

    def process_request(
        self, request: Request, spider: Spider | None = None
    ) -> Coroutine[Any, Any, None] | None:
        challenges = self._challenges
        if challenges is not None and challenges.stopped:  # dont_obey_robotstxt too
            challenges.check(request)
        if request.meta.get("dont_obey_robotstxt"):
            request.meta[PROVENANCE_META] = unchecked("dont_obey_robotstxt")
            gates = self._gates  # skips robots.txt, not a paused slot's gate
            return self._pacing.gate_only(request) if gates is not None and gates.holding else None
        evidence = self._evidence  # None unless REP_EVIDENCE_REQUIRED
        if evidence is not None and evidence.failed_closed:
            evidence.drop(request)
        url = urlparse_cached(request)
        checked = self._check(request, url)
        # A request that may go now leaves through its slot's gate and limit;
        # the coroutines of _check do that at their end, after waiting for
        # robots.txt or a turn.
        if checked is None:
            gates = self._gates
            if gates is not None and gates.holding:
                return self._pacing.leave(request, url)
            limits = self._limits  # leave()'s last step, inline: every request passes here
            placed = limits.admit(request, url) if limits is not None else None
            return placed if placed is None else self._pacing.placed(request, placed)
        return checked

    @property
    def process_response(self) -> Callable[..., Response]:
        """Only with the stop signals on (REP_STOP_SIGNALS), the only part that
        marks an answer: otherwise the attribute is missing, so Scrapy's manager
        does not call a no-op for every answer (17 to 22 thousand instructions,
        4 to 5 µs, each: docs/performance.md)."""
        if self._challenges is None:
            raise AttributeError("process_response")
        return self._stop_failure

    def _stop_failure(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        """An answer found to be a stop signal (scrapy_rep.challenges, before
        RetryMiddleware) ends in the request's errback, not in its callback."""
        if STOP_META in request.meta:
            raise Challenges.failure(request, response)
        return response

    def _check(self, request: Request, url: ParseResult) -> Coroutine[Any, Any, None] | None:
        origin = self._keys.get(url)
        if origin is None:  # not http(s): robots.txt does not apply
            request.meta[PROVENANCE_META] = unchecked("not http(s)")
            return None
        entry = self._cache.get(origin)
        if entry is None:
            return self._wait(request, origin, None)
        if entry.expires <= _clock.now():
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
        pace it by the origin's delay for that agent (None: no delay, it leaves)."""
        if self._stopped and origin in self._stopped:
            self._stop_changed(request, origin)
        meta_agent = request.meta.get("rep_user_agent")
        agent = self._ua
        if meta_agent or self._header_agents is not None:  # else the crawl's token
            agent = self.service.agent_of(request, meta_agent)
        # One match serves the verdict and the provenance; allowed() confirms a
        # refusal (it also lets /robots.txt itself through), never drop on doubt.
        decision = robots.decide(request.url, user_agent=agent)
        if not decision.allowed and not robots.allowed(request.url, user_agent=agent):
            self._forbid(request, origin, decision, agent)
        request.meta[PROVENANCE_META] = self._provenance.decided(origin, entry, decision, agent)
        if self._delays is None:
            return None
        delay = entry.delay if agent == self._ua else self.service.delay_of(entry, robots, agent)
        return self._pacing.pace(request, origin, delay) if delay else None

    def agent_of(self, request: Request) -> str:
        """The product token ``request`` is checked as (for components after
        this middleware, which must read the same group)."""
        return self.service.agent_of(request)

    def _forbid(self, request: Request, origin: Origin, decision: Decision, agent: str) -> None:
        self._stats.inc_value("rep/dry_run/forbidden" if self._dry_run else "rep/forbidden")
        if self._pins is not None and origin in self._pins.changed:
            self._pins.forbidden(origin, request.url, agent)
        self.report.forbidden(origin, decision, dry_run=self._dry_run)
        where = f" line {decision.line} ({decision.rule})" if decision.line else ""
        logger.debug(
            "%s by robots.txt%s: %s",
            "Would be forbidden" if self._dry_run else "Forbidden",
            where,
            request,
            extra={"spider": self.crawler.spider},
        )
        text = origin.text
        self.crawler.signals.send_catch_log(
            signal=rep_signals.request_forbidden, request=request, decision=decision, origin=text
        )
        if not self._dry_run:
            raise ForbiddenByRobots(decision, text)

    def _stop_changed(self, request: Request, origin: Origin) -> None:
        """REP_PIN_ACTION = "stop_origin": the origin's robots.txt is not the pinned one."""
        assert self._pins is not None
        self._pins.dropped(origin)
        logger.debug(
            "Dropped: robots.txt of %s changed since pinned: %s",
            origin.text,
            request,
            extra={"spider": self.crawler.spider},
        )
        pin = self._pins.pins[origin.text]
        raise RobotsTxtChanged(origin.text, pin, self._pins.changed[origin].current)

    def _unreachable(
        self, request: Request, origin: Origin, entry: Entry, *, waited: bool = False
    ) -> Coroutine[Any, Any, None] | None:
        mode = self.config.unreachable
        request.meta[PROVENANCE_META] = self._provenance.decided(  # if let through
            origin, entry, None, self._ua
        )
        if mode == "allow":
            self._stats.inc_value("rep/unreachable/allowed")
            return None
        if mode == "defer":
            if self._dry_run:
                self._stats.inc_value("rep/dry_run/deferred")
                return None
            if not waited:
                return self._wait(request, origin, entry)
        self._stats.inc_value(
            "rep/dry_run/unreachable/dropped" if self._dry_run else "rep/unreachable/dropped"
        )
        self._drop_unreachable(request, origin, entry.reason)
        return None

    def _drop_unreachable(self, request: Request, origin: Origin, reason: str) -> None:
        """Report and log the drop (counted by the caller), then drop the request
        unless in a dry run."""
        self.report.dropped(origin, reason, dry_run=self._dry_run)
        text = origin.text
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
        if self._evidence is not None and self._evidence.failed_closed:
            self._evidence.drop(request)  # its robots.txt may be the record that failed
        if entry.robots is None:
            self._unreachable(request, origin, entry, waited=True)
        else:
            paced = self._verdict(request, origin, entry, entry.robots)
            if paced is not None:
                await paced  # it left through its gate and limit at its turn
                return
        leaving = self._pacing.leave(request)
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
            if entry is None or (entry.robots is None and entry.expires <= _clock.now()):
                timeout = None if deadline is None else deadline - _clock.now()
                joined = self.fetcher.join(origin, request, timeout=timeout)
                entry = await maybe_deferred_to_future(joined)
                if entry is None:  # the deadline came during the fetch
                    reason = f"still unreachable after {self.config.defer_max:g} s"
                    self._stats.inc_value("rep/deferred/expired")
                    self._drop_unreachable(request, origin, reason)
                    return None
            if entry.robots is not None or not defer:
                if deadline is not None:
                    self._stats.inc_value("rep/deferred/released")
                return entry
            now = _clock.now()
            if deadline is None:
                deadline = now + self.config.defer_max
                self._stats.inc_value("rep/deferred")
            if now >= deadline:
                reason = f"{entry.reason}, still after {self.config.defer_max:g} s"
                self._stats.inc_value("rep/deferred/expired")
                self._drop_unreachable(request, origin, reason)
                return None
            if not await self._waiting.sleep(min(entry.expires, deadline) - now):
                self._stats.inc_value("rep/deferred/dropped_closing")
                self._drop_unreachable(request, origin, "the spider is closing")
                return None
            entry = self._cache.get(origin)
