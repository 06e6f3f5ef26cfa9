"""``scrapy_rep.RobotsTxtMiddleware``: robots.txt per origin, through Scrapy's own stack.

How a request is checked (``process_request``):

- known and fresh rules: a synchronous check that returns None or raises
  (no Deferred, no task, no coroutine); expired good rules are still served
  while a refresh runs in the background;
- unknown origin (or an unreachable one whose retry time has come): a
  coroutine is returned, which Scrapy awaits. It joins the origin's single
  in-flight fetch: each waiter has its own Deferred, fired with the verdict
  when the fetch ends, so every waiter gets it, on the asyncio reactor and on
  Twisted's own (a shared Deferred hands its result to its first waiter only).
  While waiting, the request leaves the downloader's active set
  (:mod:`scrapy_rep._downloader`), so waiting does not starve origins whose
  rules are known.

The fetch is ``crawler.engine.download_async`` (the user's proxies, auth,
headers, cookies and middlewares apply) with its own timeout and retries;
redirects are followed here, hop by hop, so that more than
``REP_MAX_REDIRECTS`` of them means "unavailable"; the body is cut at
``REP_MAX_SIZE`` with ``StopDownload(fail=False)`` from a ``bytes_received``
handler connected only while robots.txt downloads are in flight. What the
result means (RFC 9309 §2.3.1) is :mod:`scrapy_rep.policy`'s job.

With ``REP_REDIS_URL`` (or scrapy-redis's ``REDIS_URL``), processes share
their state through :mod:`scrapy_rep.redis`. The cached check above stays
in-process, with no Redis round trip; a fetch first asks Redis for another
worker's result or for the origin's fetch lock (``_fetch_shared``); requests
to origins with a Crawl-delay wait, detached like robots.txt waiters, for a
turn reserved cluster-wide (``_paced``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlparse

from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider, IgnoreRequest, NotConfigured, StopDownload
from scrapy.http.request import NO_CALLBACK
from scrapy.robotstxt import RobotParser
from scrapy.utils.asyncio import call_later, create_looping_call
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object
from twisted.internet.defer import Deferred
from w3lib.url import safe_url_string

from scrapy_rep import signals as rep_signals
from scrapy_rep._agent import product_token
from scrapy_rep._downloader import Waiting
from scrapy_rep._slots import SlotDelays
from scrapy_rep.cache import MemoryRulesCache, RulesCache
from scrapy_rep.config import Config
from scrapy_rep.exceptions import ForbiddenByRobots, InvalidSetting, RobotsTxtUnavailable
from scrapy_rep.origin import Origin, OriginKeys, origin_text, robots_url
from scrapy_rep.policy import ALLOW_ALL, DISALLOW_ALL, PARSED, Entry
from scrapy_rep.redis import (
    CLOSING,
    LOCAL,
    ClusterDelay,
    RedisLink,
    RedisRulesCache,
    RedisUnavailable,
    reactor_problem,
)
from scrapy_rep.robotstxt import RobotsTxt

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.utils.asyncio import CallLaterResult

logger = logging.getLogger(__name__)

SCRAPY_MIDDLEWARE = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
ROBOTS_META = "rep_robotstxt"
"""Meta key marking scrapy-rep's own robots.txt requests (value: the origin text)."""
_CLOSING_CHECK_INTERVAL = 1.0


class _Fetch:
    """One in-flight robots.txt fetch and the requests waiting for it."""

    __slots__ = ("task", "waiters")

    def __init__(self) -> None:
        self.waiters: list[Deferred[Entry]] = []
        self.task: Deferred[None] | None = None


class RobotsTxtMiddleware:
    """Obey robots.txt (RFC 9309) per origin; see the module docstring."""

    def __init__(self, crawler: Crawler, config: Config, cache: RulesCache | None = None):
        self.crawler = crawler
        self.config = config
        self._policy = config.policy
        self._cache: RulesCache = cache or MemoryRulesCache(config.cache_max_origins)
        self._keys = OriginKeys()
        self._ua = config.user_agent
        self._dry_run = config.dry_run
        self._stats = crawler.stats
        self._slots = SlotDelays(crawler) if config.obey_crawl_delay else None
        self._waiting = Waiting(crawler, config.max_waiting)
        self._fetches: dict[Origin, _Fetch] = {}
        self._downloads = 0  # robots.txt downloads in flight (bytes_received connected)
        self._sizes: dict[Request, int] = {}
        self._sleepers: dict[Deferred[bool], CallLaterResult] = {}
        self._closing_watch: Any = None
        self._redis: RedisLink | None = None
        self._shared_rules: RedisRulesCache | None = None
        self._cluster_delay: ClusterDelay | None = None
        if config.redis_url and cache is None:
            self._share_through_redis(config)
        crawler.signals.connect(self._spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(self._engine_stopped, signal=signals.engine_stopped)

    def _share_through_redis(self, config: Config) -> None:
        """Shared robots.txt state and cluster-wide Crawl-delay (scrapy_rep.redis)."""
        robots = config.redis_robots
        delay = config.redis_delay and self._slots is not None
        if not (robots or delay):
            return
        problem = reactor_problem()
        if problem is not None:
            logger.warning(
                "scrapy-rep: REP_REDIS_URL is set but %s: robots.txt and Crawl-delay stay "
                "local to this worker. Shared state needs TWISTED_REACTOR = "
                "'twisted.internet.asyncioreactor.AsyncioSelectorReactor'.",
                problem,
            )
            return
        try:
            link = RedisLink(config, self._stats)
        except ImportError:
            raise InvalidSetting(
                "REP_REDIS_URL",
                "shared state needs the Redis client: pip install 'scrapy-rep[redis]'",
            ) from None
        self._redis = link
        if robots:
            self._shared_rules = RedisRulesCache(link, config, self._stats)
            self._cache = self._shared_rules
        if delay:
            self._cluster_delay = ClusterDelay(link, config, self._stats)
        shared = " and ".join(
            name for name, on in (("robots.txt", robots), ("Crawl-delay", delay)) if on
        )
        logger.info(
            "scrapy-rep: sharing %s with other workers through Redis at %s (keys %s*)",
            shared,
            link.url,
            config.redis_prefix,
        )
        self.crawler.signals.connect(self._close_redis, signal=signals.engine_stopped)

    async def _close_redis(self) -> None:
        if self._redis is not None:
            await self._redis.close()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotsTxtMiddleware:
        config = Config.from_settings(crawler.settings)
        if not config.obey:
            logger.info("ROBOTSTXT_OBEY is False: robots.txt is not obeyed")
            raise NotConfigured
        if config.user_agent_problem:
            logger.warning("scrapy-rep: %s", config.user_agent_problem)
        _error_if_scrapy_middleware_enabled(crawler)
        logger.info(
            "scrapy-rep: obeying robots.txt as %r (unreachable: %s%s)",
            config.user_agent,
            config.unreachable,
            ", dry run" if config.dry_run else "",
        )
        return cls(crawler, config)

    @classmethod
    def of(cls, crawler: Crawler) -> RobotsTxtMiddleware | None:
        """The crawler's running instance, for spiders and commands (None if off)."""
        engine = crawler.engine
        if engine is None:
            return None
        for middleware in engine.downloader.middleware.middlewares:
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
            entry = await maybe_deferred_to_future(self._join(origin))
        return entry

    # -- the check ------------------------------------------------------------

    def process_request(
        self, request: Request, spider: Spider | None = None
    ) -> Coroutine[Any, Any, None] | None:
        meta = request.meta
        if meta.get("dont_obey_robotstxt"):
            return None
        origin = self._keys.get(urlparse_cached(request))
        if origin is None:  # not http(s): robots.txt does not apply
            return None
        entry = self._cache.get(origin)
        if entry is None:
            return self._wait(request, origin, None)
        robots = entry.robots
        if entry.expires <= time.time():
            if robots is None:
                return self._wait(request, origin, entry)
            if origin not in self._fetches:
                self._start_fetch(origin)  # serve the old rules meanwhile
        elif robots is None:
            return self._unreachable(request, origin, entry)
        user_agent = meta.get("rep_user_agent")
        if user_agent:
            return self._check_as(request, origin, robots, str(user_agent))
        if robots.allowed(request.url, user_agent=self._ua):
            if entry.delay and self._slots is not None:
                return self._pace(request, entry.delay)
            return None
        self._forbid(request, origin, robots, self._ua)
        if entry.delay and self._slots is not None:  # dry run: it goes ahead
            return self._pace(request, entry.delay)
        return None

    def _check(
        self, request: Request, origin: Origin, entry: Entry
    ) -> Coroutine[Any, Any, None] | None:
        """The verdict once the origin's entry is known (slow path)."""
        robots = entry.robots
        if robots is None:
            self._unreachable(request, origin, entry, waited=True)
            return None
        user_agent = request.meta.get("rep_user_agent")
        if user_agent:
            return self._check_as(request, origin, robots, str(user_agent))
        if not robots.allowed(request.url, user_agent=self._ua):
            self._forbid(request, origin, robots, self._ua)
        if entry.delay and self._slots is not None:
            return self._pace(request, entry.delay)
        return None

    def _check_as(
        self, request: Request, origin: Origin, robots: RobotsTxt, agent: str
    ) -> Coroutine[Any, Any, None] | None:
        """Check with the token of meta ``rep_user_agent``."""
        token = product_token(agent) or agent
        if not robots.allowed(request.url, user_agent=token):
            self._forbid(request, origin, robots, token)
        if self._slots is not None:
            delay = self._delay(robots, token)[0]
            if delay:
                return self._pace(request, delay)
        return None

    # -- Crawl-delay ----------------------------------------------------------

    def _pace(self, request: Request, delay: float) -> Coroutine[Any, Any, None] | None:
        """Apply the origin's delay: the slot's local minimum, or a turn
        reserved cluster-wide when Redis paces it (scrapy_rep.redis)."""
        assert self._slots is not None
        cluster = self._cluster_delay
        if cluster is None:
            self._slots.require(request, delay)
            return None
        if not cluster.up:  # Redis unavailable: each worker spaces its own requests
            self._stats.inc_value("rep/redis/delay/local")
            self._slots.require(request, delay)
            return None
        return self._paced(request, delay, cluster)

    async def _paced(self, request: Request, delay: float, cluster: ClusterDelay) -> None:
        slots = self._slots
        engine = self.crawler.engine
        assert slots is not None and engine is not None
        key = engine.downloader.get_slot_key(request)
        spacing = max(delay, slots.pace_elsewhere(request))
        detached = self._waiting.detach(request)
        try:
            outcome = await cluster.pace(key, spacing, self._sleep)
        finally:
            if detached:
                self._waiting.reattach(request)
        if outcome == LOCAL:
            slots.require(request, delay)
        elif outcome == CLOSING:
            raise IgnoreRequest(
                f"the spider closed while the request waited for its Crawl-delay turn: {request}"
            )

    def _forbid(self, request: Request, origin: Origin, robots: RobotsTxt, agent: str) -> None:
        decision = robots.decide(request.url, user_agent=agent)
        if decision.allowed:  # cannot differ from allowed(); never drop on doubt
            return
        self._stats.inc_value("rep/forbidden")
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
                self._stats.inc_value("rep/deferred")
                return None
            if not waited:
                return self._wait(request, origin, entry)
        self._drop_unreachable(request, origin, entry.reason, "rep/unreachable/dropped")
        return None

    def _drop_unreachable(self, request: Request, origin: Origin, reason: str, stat: str) -> None:
        self._stats.inc_value(stat)
        text = origin_text(origin)
        logger.debug(
            "%s: robots.txt of %s unavailable (%s): %s",
            "Would be dropped" if self._dry_run else "Dropped",
            text,
            reason,
            request,
            extra={"spider": self.crawler.spider},
        )
        if not self._dry_run:
            raise RobotsTxtUnavailable(text, reason)

    # -- waiting --------------------------------------------------------------

    async def _wait(self, request: Request, origin: Origin, entry: Entry | None) -> None:
        detached = self._waiting.detach(request)
        try:
            entry = await self._await_rules(request, origin, entry)
        finally:
            if detached:
                self._waiting.reattach(request)
        if entry is not None:
            paced = self._check(request, origin, entry)
            if paced is not None:
                await paced

    async def _await_rules(
        self, request: Request, origin: Origin, entry: Entry | None
    ) -> Entry | None:
        """The origin's entry once known; under REP_UNREACHABLE=defer, once
        reachable (None when the request was dropped meanwhile)."""
        deadline: float | None = None
        while True:
            if entry is None or (entry.robots is None and entry.expires <= time.time()):
                entry = await maybe_deferred_to_future(self._join(origin))
            if entry.robots is not None or self.config.unreachable != "defer" or self._dry_run:
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
            if not await self._sleep(min(entry.expires, deadline) - now):
                self._drop_unreachable(
                    request, origin, "the spider is closing", "rep/deferred/dropped_closing"
                )
                return None
            entry = self._cache.get(origin)

    def _join(self, origin: Origin) -> Deferred[Entry]:
        waiter: Deferred[Entry] = Deferred()
        fetch = self._fetches.get(origin)
        if fetch is None:
            self._start_fetch(origin, waiter)
        else:
            fetch.waiters.append(waiter)
        return waiter

    async def _sleep(self, seconds: float) -> bool:
        """Sleep; False if woken early because the spider is closing."""
        wake: Deferred[bool] = Deferred()
        self._sleepers[wake] = call_later(max(seconds, 0.0), self._wake, wake, True)
        if self._closing_watch is None:
            self._closing_watch = create_looping_call(self._watch_closing)
            self._closing_watch.start(_CLOSING_CHECK_INTERVAL, now=False)
        return await maybe_deferred_to_future(wake)

    def _wake(self, wake: Deferred[bool], timer_fired: bool) -> None:
        call = self._sleepers.pop(wake, None)
        if call is not None and not timer_fired:
            call.cancel()
        if not wake.called:
            wake.callback(timer_fired)

    def _watch_closing(self) -> None:
        if self._sleepers and self._waiting.engine_closing():
            for wake in list(self._sleepers):
                self._wake(wake, False)
        if not self._sleepers and self._closing_watch is not None:
            self._closing_watch.stop()
            self._closing_watch = None

    def _spider_idle(self) -> None:
        # Detached waiters are invisible to Engine.spider_is_idle().
        if self._waiting.count:
            raise DontCloseSpider

    def _engine_stopped(self) -> None:
        for wake in list(self._sleepers):
            self._wake(wake, False)
        if self._closing_watch is not None:
            self._closing_watch.stop()
            self._closing_watch = None

    # -- fetching -------------------------------------------------------------

    def _start_fetch(self, origin: Origin, waiter: Deferred[Entry] | None = None) -> None:
        fetch = _Fetch()
        if waiter is not None:
            fetch.waiters.append(waiter)
        self._fetches[origin] = fetch  # before starting: the fetch may end at once
        fetch.task = deferred_from_coro(self._fetch(origin, fetch))

    async def _fetch(self, origin: Origin, fetch: _Fetch) -> None:
        previous = self._cache.get(origin)
        response: Response | None = None
        try:
            if self._shared_rules is not None:
                entry, response = await self._fetch_shared(origin, previous, self._shared_rules)
            else:
                entry, response = await self._download(origin, previous)
                entry = self._store(origin, entry, previous)
            await self._announce(origin, entry, previous, response)
        except Exception:  # a bug here must not leave waiters hanging
            logger.exception("scrapy-rep: error while fetching %s", robots_url(origin))
            entry = self._policy.on_error("internal error", now=time.time(), previous=previous)
            self._cache.put(origin, entry)
        finally:
            del self._fetches[origin]
        for waiter in fetch.waiters:
            if not waiter.called:  # a waiter cancelled with its task is already called
                waiter.callback(entry)

    async def _fetch_shared(
        self, origin: Origin, previous: Entry | None, shared: RedisRulesCache
    ) -> tuple[Entry, Response | None]:
        """The origin's rules from Redis, or downloaded here (by the worker
        holding the origin's lock, or by any when Redis cannot help) and shared."""
        claim = await shared.claim(origin, self._sleep)
        found = claim.entry
        if found is not None and found.robots is not None and self.config.obey_crawl_delay:
            found = dataclasses.replace(found, delay=self._delay(found.robots, self._ua)[0])
        if claim.fresh and found is not None:
            return self._store(origin, found, previous), None
        base = found or previous  # Redis's state is the cluster's latest
        entry, response = await self._download(origin, base)
        entry = self._store(origin, entry, base)
        body = response.body if response is not None and entry.outcome == PARSED else None
        await shared.publish(origin, entry, body)
        if entry.delay and response is not None and self._cluster_delay is not None:
            await self._count_robots_turn(origin, entry.delay, self._cluster_delay)
        return entry, response

    async def _count_robots_turn(self, origin: Origin, delay: float, cluster: ClusterDelay) -> None:
        """The robots.txt request was one of the origin's requests: the next
        page request, from any worker, comes at least ``delay`` after it."""
        engine = self.crawler.engine
        if engine is None:
            return
        key = engine.downloader.get_slot_key(Request(robots_url(origin)))
        with contextlib.suppress(RedisUnavailable):
            await cluster.reserve(key, delay)

    def _robots_request(self, url: str, origin: Origin) -> Request:
        return Request(
            url,
            callback=NO_CALLBACK,
            dont_filter=True,
            meta={
                "dont_obey_robotstxt": True,
                ROBOTS_META: origin_text(origin),
                "download_timeout": self.config.fetch_timeout,
                "max_retry_times": self.config.fetch_retries,
                "dont_redirect": True,  # followed below, hop by hop
                "handle_httpstatus_all": True,
                "allow_offsite": True,
            },
        )

    async def _download(
        self, origin: Origin, previous: Entry | None
    ) -> tuple[Entry, Response | None]:
        policy = self._policy
        url = robots_url(origin)
        engine = self.crawler.engine
        for hop in range(self.config.max_redirects + 1):
            request = self._robots_request(url, origin)
            self._stats.inc_value("rep/robotstxt/request_count")
            self._watch_sizes(1)
            try:
                if engine is None:
                    raise RuntimeError("the crawler has no engine")
                response = await engine.download_async(request)
            except Exception as exc:
                name = f"{type(exc).__module__}.{type(exc).__qualname__}"
                self._stats.inc_value(f"rep/robotstxt/exception_count/{name}")
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                return policy.on_error(reason, now=time.time(), previous=previous), None
            finally:
                self._watch_sizes(-1)
            status = response.status
            self._stats.inc_value("rep/robotstxt/response_count")
            self._stats.inc_value(f"rep/robotstxt/response_status_count/{status}")
            self._stats.inc_value(f"rep/robotstxt/response_status_class/{status // 100}xx")
            if 300 <= status < 400 and status != 304:
                location = response.headers.get(b"Location")
                target = _redirect_target(response.url, location) if location else None
                if target is not None:
                    if hop == self.config.max_redirects:
                        self._stats.inc_value("rep/robotstxt/redirects_exceeded")
                        reason = f"more than {self.config.max_redirects} redirects"
                        entry = policy.allow_all(reason, now=time.time())
                        entry = dataclasses.replace(
                            entry, status=status, url=response.url, redirects=hop + 1
                        )
                        return entry, response
                    url = target
                    continue
            headers = response.headers
            entry = policy.on_response(
                status,
                response.body,
                url=response.url,
                now=time.time(),
                previous=previous,
                cache_control=_header(headers.get(b"Cache-Control")),
                retry_after_header=_header(headers.get(b"Retry-After")),
            )
            entry = dataclasses.replace(
                entry,
                truncated=entry.truncated or "download_stopped" in response.flags,
                status=status,
                url=response.url,
                redirects=hop,
                size=len(response.body),
            )
            return entry, response
        raise AssertionError("unreachable")  # the loop always returns

    def _watch_sizes(self, change: int) -> None:
        """Connect the bytes_received handler only while robots.txt downloads
        run: every response's every chunk would pay for it otherwise."""
        before = self._downloads
        self._downloads += change
        if before == 0 and self._downloads > 0:
            self.crawler.signals.connect(self._bytes_received, signal=signals.bytes_received)
        elif before > 0 and self._downloads == 0:
            self.crawler.signals.disconnect(self._bytes_received, signal=signals.bytes_received)
            self._sizes.clear()

    def _bytes_received(self, data: bytes, request: Request, spider: Spider | None = None) -> None:
        if ROBOTS_META not in request.meta:
            return
        size = self._sizes.get(request, 0) + len(data)
        self._sizes[request] = size
        if size > self.config.max_size:
            raise StopDownload(fail=False)

    # -- results --------------------------------------------------------------

    def _delay(self, robots: RobotsTxt, agent: str) -> tuple[float, float]:
        """(effective delay, asked delay): Crawl-delay or Request-rate s/n,
        the larger, capped at REP_MAX_CRAWL_DELAY."""
        asked = robots.crawl_delay(user_agent=agent) or 0.0
        rate = robots.request_rate(user_agent=agent)
        if rate is not None and rate[0] > 0:
            asked = max(asked, rate[1] / rate[0])
        return min(asked, self.config.max_crawl_delay), asked

    def _store(self, origin: Origin, entry: Entry, previous: Entry | None) -> Entry:
        stats = self._stats
        text = origin_text(origin)
        stats.inc_value(f"rep/robotstxt/outcome/{entry.outcome}")
        if entry.truncated and entry.outcome == PARSED:
            stats.inc_value("rep/robotstxt/truncated")
            logger.info("robots.txt of %s is longer than REP_MAX_SIZE: cut there", text)
        if entry.outcome == DISALLOW_ALL:
            self._log_unreachable(text, entry)
        elif entry.outcome == ALLOW_ALL and (previous is None or previous.outcome != ALLOW_ALL):
            logger.debug("robots.txt of %s unavailable (%s): all allowed", text, entry.reason)
        if entry.robots is not None and self.config.obey_crawl_delay and not entry.stale:
            delay, asked = self._delay(entry.robots, self._ua)
            entry = dataclasses.replace(entry, delay=delay)
            if delay and (previous is None or previous.delay != delay):
                stats.inc_value("rep/crawl_delay/applied")
                if asked > delay:
                    stats.inc_value("rep/crawl_delay/capped")
                    logger.warning(
                        "robots.txt of %s asks for %g s between requests: capped at "
                        "REP_MAX_CRAWL_DELAY = %g s",
                        text,
                        asked,
                        delay,
                    )
        self._cache.put(origin, entry)
        return entry

    def _log_unreachable(self, text: str, entry: Entry) -> None:
        self._stats.inc_value("rep/robotstxt/unreachable")
        retry = entry.expires - time.time()
        if entry.stale:
            self._stats.inc_value("rep/robotstxt/stale_served")
            logger.warning(
                "robots.txt of %s unreachable (%s): keeping its rules of %.0f s ago; "
                "retry in %.0f s",
                text,
                entry.reason,
                time.time() - entry.fetched,
                retry,
            )
        elif entry.failures == 1:  # once per outage
            action = {
                "disallow": "its requests are dropped",
                "allow": "its requests are let through (REP_UNREACHABLE = 'allow')",
                "defer": "its requests are kept until it answers (REP_UNREACHABLE = 'defer')",
            }[self.config.unreachable]
            logger.warning(
                "robots.txt of %s unreachable (%s): %s; retry in %.0f s",
                text,
                entry.reason,
                action,
                retry,
            )

    async def _announce(
        self, origin: Origin, entry: Entry, previous: Entry | None, response: Response | None
    ) -> None:
        text = origin_text(origin)
        sig = self.crawler.signals
        if entry.outcome == PARSED and entry.robots is not None and response is not None:
            await sig.send_catch_log_async(
                signal=rep_signals.robotstxt_parsed,
                robots=entry.robots,
                origin=text,
                response=response,
            )
            scrapy_signal = getattr(signals, "robots_parsed", None)
            if scrapy_signal is not None:
                await sig.send_catch_log_async(
                    signal=scrapy_signal,
                    robotparser=_ScrapyRobotParser(entry.robots, self._ua),
                    request=response.request,
                )
        if previous is None:
            sitemaps = entry.robots.sitemaps if entry.outcome == PARSED and entry.robots else ()
            await sig.send_catch_log_async(
                signal=rep_signals.sitemaps_found, urls=sitemaps, origin=text
            )


def _header(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value else None


def _redirect_target(base: str, location: bytes) -> str | None:
    target = urljoin(base, safe_url_string(location.decode("latin-1").strip()))
    return target if urlparse(target).scheme in ("http", "https") else None


def _error_if_scrapy_middleware_enabled(crawler: Crawler) -> None:
    from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as ScrapyMiddleware

    components = crawler.settings.get_component_priority_dict_with_base("DOWNLOADER_MIDDLEWARES")
    for component, order in components.items():
        if order is None:
            continue
        try:
            cls = load_object(component) if isinstance(component, str) else component
        except (ImportError, NameError, ValueError, AttributeError):
            continue
        if cls is ScrapyMiddleware:
            logger.error(
                "Scrapy's own RobotsTxtMiddleware is enabled next to "
                "scrapy_rep.RobotsTxtMiddleware: it fetches robots.txt a second time and "
                "drops requests by its own, different verdicts. Disable it with "
                "DOWNLOADER_MIDDLEWARES = {%r: None}, or enable scrapy-rep with "
                "ADDONS = {'scrapy_rep.Addon': 100}.",
                SCRAPY_MIDDLEWARE,
            )
            return


class _ScrapyRobotParser(RobotParser):
    """Our rules behind Scrapy's RobotParser interface, for its robots_parsed signal."""

    def __init__(self, robots: RobotsTxt, user_agent: str) -> None:
        self.robots = robots
        self._user_agent = user_agent

    @classmethod
    def from_crawler(cls, crawler: Crawler, robotstxt_body: bytes) -> _ScrapyRobotParser:
        token = Config.from_settings(crawler.settings).user_agent
        return cls(RobotsTxt.parse(robotstxt_body), token)

    def _token(self, user_agent: str | bytes) -> str:
        return product_token(user_agent) or self._user_agent

    def allowed(self, url: str | bytes, user_agent: str | bytes) -> bool:
        if isinstance(url, bytes):
            url = url.decode("utf-8", "replace")
        return self.robots.allowed(url, user_agent=self._token(user_agent))

    def crawl_delay(self, user_agent: str | bytes) -> float | None:
        return self.robots.crawl_delay(user_agent=self._token(user_agent))
