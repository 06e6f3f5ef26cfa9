"""The crawl's robots service: robots.txt state and politeness, built once per crawl.

The first component that asks builds it, in the crawl's context
(:mod:`scrapy_rep._context`): the robots middleware through
:meth:`RobotsService.start`, the others through :func:`robots_service`, which
answers None when the crawl does not obey robots.txt through scrapy-rep. Every
collaborator is built here and wired by constructor (docs/development.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import urlparse

from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred, succeed

from scrapy_rep import _clock, _compat, _startup
from scrapy_rep._context import crawl_context
from scrapy_rep._pacing import Pacing
from scrapy_rep.cache import MemoryRulesCache
from scrapy_rep.cluster import SharedState
from scrapy_rep.evidence import Evidence, Provenance
from scrapy_rep.fetcher import RobotsFetcher
from scrapy_rep.origin import Origin, OriginKeys
from scrapy_rep.pins import PinWatch
from scrapy_rep.policy import delay_for
from scrapy_rep.report import CrawlReport
from scrapy_rep.robotstxt._agent import product_token
from scrapy_rep.state import open_state

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_rep.cache import RulesCache
    from scrapy_rep.config import Config
    from scrapy_rep.policy import Entry
    from scrapy_rep.robotstxt import RobotsTxt

_MAX_HEADER_AGENTS = 1_000
"""User-Agent header values whose product token is remembered."""

Readiness = Literal["unknown", "allowed", "refused"]
"""What the scheduler queues learn of a request (RobotsService.readiness)."""
UNKNOWN: Final = "unknown"
"""Its origin's robots.txt is not known: the middleware would wait for it."""
ALLOWED: Final = "allowed"
"""Its verdict is known: it would pass (after its delay and its slot's pause)."""
REFUSED: Final = "refused"
"""It would be dropped at once (forbidden, robots.txt unreachable, its slot stopped)."""

ROBOTS_MIDDLEWARE = "scrapy_rep.middleware.RobotsTxtMiddleware"
"""The robots middleware, known by its path: it sits above this module."""


def robots_service(crawler: Crawler) -> RobotsService | None:
    """The crawl's robots service, built by whichever component asks first (Scrapy
    builds its components in an order of its own); None when this crawl does not
    obey robots.txt through scrapy-rep, and :func:`robots_off` says why."""
    context = crawl_context(crawler)
    if context.robots is None and context.robots_off is None:
        context.robots_off = _why_off(crawler, context.config)
        if context.robots_off is None:
            return RobotsService.start(crawler)
    service: RobotsService | None = context.robots
    return service


def robots_off(crawler: Crawler) -> str | None:
    """Why the crawl has no robots service (None if it has one)."""
    return None if robots_service(crawler) is not None else crawl_context(crawler).robots_off


def _why_off(crawler: Crawler, config: Config) -> str | None:
    if not config.obey:
        return "ROBOTSTXT_OBEY is False"
    for cls, _order in _compat.downloader_middlewares(crawler.settings):
        mro = cls.__mro__ if isinstance(cls, type) else ()
        if any(f"{c.__module__}.{c.__qualname__}" == ROBOTS_MIDDLEWARE for c in mro):
            return None
    return "scrapy_rep.RobotsTxtMiddleware is not in DOWNLOADER_MIDDLEWARES"


class RobotsService:
    """One crawl's robots.txt state and politeness (see the module docstring)."""

    @classmethod
    def start(cls, crawler: Crawler) -> RobotsService:
        """The crawl's service, made on the first call once Scrapy and the settings
        were checked (:func:`scrapy_rep._startup.checked_config` raises otherwise)."""
        context = crawl_context(crawler)
        service: RobotsService | None = context.robots
        if service is None:
            service = cls(crawler, _startup.checked_config(crawler))
            context.robots, context.robots_off = service, None
        return service

    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.config = config
        stats = crawler.stats
        assert stats is not None
        self.stats = stats
        self.user_agent = config.user_agent
        # A User-Agent header set on the request by the spider names its agent,
        # unless ROBOTSTXT_USER_AGENT says who we are (as in Scrapy's middleware).
        self.header_agents: dict[bytes, str] | None = None if config.explicit_agent else {}
        self.keys = OriginKeys(config.cache_max_origins)
        self.waiting = crawl_context(crawler).waiting
        shared = SharedState.connect(crawler, config, pacing=config.obey_crawl_delay)
        self.cache: RulesCache = (
            shared.rules
            if shared.rules is not None
            else MemoryRulesCache(config.cache_max_origins, config.backoff_max_origins)
        )
        self.report = CrawlReport(crawler, config)
        state = open_state(crawler, config)
        self.pins = PinWatch.open(crawler, config, state)
        self.fetcher = RobotsFetcher(
            crawler,
            config,
            self.cache,
            shared_rules=shared.rules,
            cluster_delay=shared.delay,
            sleep=self.waiting.sleep,
            report=self.report,
            uncapped=_startup.uncapped(crawler.settings),
            state=state,
            pins=self.pins,
        )
        self.pacing = Pacing(crawler, config, self.waiting, shared, self.report)
        self.provenance = Provenance(config, Evidence.of(crawler, config))
        self.fetcher.on_fetched = self.provenance.robots_fetched

    # -- agents ----------------------------------------------------------------------

    def agent_of(self, request: Request, meta_agent: Any = None) -> str:
        """The product token ``request``'s robots.txt is read for: meta
        ``rep_user_agent`` (``meta_agent``: read already, else read here),
        else the request's own User-Agent header (set by the spider; only
        without ROBOTSTXT_USER_AGENT), else the crawl's."""
        if meta_agent is None:
            meta_agent = request.meta.get("rep_user_agent")
        if meta_agent:
            return product_token(str(meta_agent)) or str(meta_agent)
        header_agents = self.header_agents
        headers = _compat.headers_if_any(request)
        if header_agents is None or not headers:  # Scrapy fills them in after us
            return self.user_agent
        value = headers.get(b"User-Agent")
        if not value:
            return self.user_agent
        token = header_agents.get(value)
        if token is None:
            if len(header_agents) >= _MAX_HEADER_AGENTS:
                header_agents.clear()
            token = header_agents[value] = product_token(value) or self.user_agent
        return token

    def delay_of(self, entry: Entry, robots: RobotsTxt, agent: str) -> float:
        """The origin's delay for ``agent`` (the crawl's own: kept in its entry)."""
        if agent == self.user_agent:
            return entry.delay
        return delay_for(robots, agent, self.config.max_crawl_delay)[0]

    # -- what is known, without waiting --------------------------------------------

    def origin_of(self, request: Request) -> Origin | None:
        """``request``'s origin, None if robots.txt does not cover it."""
        return self.keys.get(urlparse_cached(request))

    def known_rules(self, request: Request) -> RobotsTxt | None:
        """The rules ``request`` was just checked against (no fetch, no wait), for
        components after the robots middleware; None when there are none."""
        origin = self.origin_of(request)
        entry = self.cache.get(origin) if origin is not None else None
        return entry.robots if entry is not None else None

    def readiness(self, request: Request) -> tuple[Readiness, float, Origin | None]:
        """What the robots middleware would do with ``request`` now, without
        fetching, waiting or counting: (readiness; its origin's delay for its
        agent, 0 if none; its origin, None if robots.txt does not cover it)."""
        challenges = self.pacing.challenges
        if challenges is not None and challenges.is_stopped(request):
            return REFUSED, 0.0, self.origin_of(request)
        if request.meta.get("dont_obey_robotstxt"):
            return ALLOWED, 0.0, None
        origin = self.origin_of(request)
        if origin is None:
            return ALLOWED, 0.0, None
        entry = self.cache.get(origin)
        if entry is None:
            return UNKNOWN, 0.0, origin
        if self.pins is not None and origin in self.pins.stopped:
            return REFUSED, 0.0, origin  # dropped at once, not paced
        robots = entry.robots
        dry_run = self.config.dry_run
        if robots is None:
            mode = self.config.unreachable
            if mode == "defer":  # kept there, within REP_DEFER_MAX, refetched meanwhile
                return ALLOWED, 0.0, origin
            if entry.expires <= _clock.now():
                return UNKNOWN, 0.0, origin
            refused = mode == "disallow" and not dry_run
            return (REFUSED if refused else ALLOWED), 0.0, origin
        agent = self.agent_of(request)
        if not dry_run and not robots.allowed(request.url, user_agent=agent):
            return REFUSED, 0.0, origin
        if self.pacing.delays is None:
            return ALLOWED, 0.0, origin
        return ALLOWED, self.delay_of(entry, robots, agent), origin

    def slot_gate(self, key: str) -> float | None:
        """Download slot ``key``'s 429/503 gate, if it holds anything
        (:meth:`scrapy_rep._pacing.Pacing.gate_state`)."""
        return self.pacing.gate_state(key)

    # -- fetching ----------------------------------------------------------------------

    async def entry_for(self, url: str) -> Entry | None:
        """What is known of ``url``'s origin robots.txt, fetching it if unknown
        (joining any fetch in flight). None for URLs robots.txt does not cover."""
        origin = self.keys.get(urlparse(url))
        if origin is None:
            return None
        entry = self.cache.get(origin)
        if entry is None or (entry.robots is None and entry.expires <= _clock.now()):
            entry = await maybe_deferred_to_future(self.fetcher.join(origin))
        return entry

    def prefetch(self, origin: Origin, request: Request) -> Deferred[Any]:
        """Start fetching ``origin``'s robots.txt for ``request`` (or join the fetch
        in flight): a Deferred fired once its verdict is known (at once if it is)."""
        entry = self.cache.get(origin)
        if entry is not None and (entry.robots is not None or entry.expires > _clock.now()):
            return succeed(entry)
        return self.fetcher.join(origin, request)
