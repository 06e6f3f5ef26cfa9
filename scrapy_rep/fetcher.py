"""The robots.txt fetch: an origin in, an :class:`~scrapy_rep.policy.Entry` out.

One fetch in flight per origin, shared by every request waiting for it: each
waiter has its own Deferred, fired with the entry when the fetch ends, so
every waiter gets it on the asyncio reactor and on Twisted's own (a shared
Deferred hands its result to its first waiter only).

The download is ``crawler.engine.download_async`` (the user's proxies, auth,
headers, cookies and middlewares apply) with its own timeout and retries;
redirects are followed here, hop by hop, so that more than
``REP_MAX_REDIRECTS`` of them means "unavailable"; the body is cut at
``REP_MAX_SIZE`` with ``StopDownload(fail=False)`` from a ``bytes_received``
handler connected only while robots.txt downloads are in flight. What the
result means (RFC 9309 §2.3.1) is :mod:`scrapy_rep.policy`'s job; the fetcher
stores the entry, logs what a user should know (once per origin and outage),
and sends the signals.

With shared state (:mod:`scrapy_rep.cluster`), a fetch first asks Redis for
another worker's result or for the origin's fetch lock, and publishes its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlparse

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest, StopDownload
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred
from w3lib.url import safe_url_string

from scrapy_rep import _compat
from scrapy_rep import signals as rep_signals
from scrapy_rep.cluster import RedisUnavailable
from scrapy_rep.origin import origin_text, robots_url
from scrapy_rep.policy import PARSED, REFUSED_LOCALLY, UNAVAILABLE, UNREACHABLE, delay_for
from scrapy_rep.robotparser import RobotParser

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_rep.cache import RulesCache
    from scrapy_rep.cluster import ClusterDelay, RedisRulesCache
    from scrapy_rep.cluster.link import Sleep
    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Entry
    from scrapy_rep.report import CrawlReport

logger = logging.getLogger(__name__)

ROBOTS_META = "rep_robotstxt"
"""Meta key marking scrapy-rep's own robots.txt requests (value: the origin text)."""


class _Fetch:
    """One in-flight robots.txt fetch and the requests waiting for it."""

    __slots__ = ("task", "trigger", "waiters")

    def __init__(self, trigger: Request | None) -> None:
        self.waiters: list[Deferred[Entry]] = []
        self.trigger = trigger  # the request that made the fetch start
        self.task: Deferred[None] | None = None


class RobotsFetcher:
    """Fetches, stores and announces origins' robots.txt (see the module docstring)."""

    def __init__(
        self,
        crawler: Crawler,
        config: Config,
        cache: RulesCache,
        *,
        shared_rules: RedisRulesCache | None = None,
        cluster_delay: ClusterDelay | None = None,
        sleep: Sleep,
        report: CrawlReport,
    ) -> None:
        self.crawler = crawler
        self.config = config
        self._policy = config.policy
        self._cache = cache
        self._shared_rules = shared_rules
        self._cluster_delay = cluster_delay
        self._sleep = sleep
        self._report = report
        self._stats = crawler.stats
        self._fetches: dict[Origin, _Fetch] = {}
        self._downloads = 0  # robots.txt downloads in flight (bytes_received connected)
        self._sizes: dict[Request, int] = {}

    def join(self, origin: Origin, trigger: Request | None = None) -> Deferred[Entry]:
        """The origin's entry once fetched: joins the fetch in flight, or starts one
        (``trigger``: the request that needs it, for Scrapy's robots_parsed)."""
        waiter: Deferred[Entry] = Deferred()
        fetch = self._fetches.get(origin)
        if fetch is None:
            fetch = self._start(origin, trigger)
        fetch.waiters.append(waiter)
        return waiter

    def refresh(self, origin: Origin, trigger: Request | None = None) -> None:
        """Fetch the origin's robots.txt anew in the background, unless under way."""
        if origin not in self._fetches:
            self._start(origin, trigger)

    def _start(self, origin: Origin, trigger: Request | None) -> _Fetch:
        fetch = _Fetch(trigger)
        self._fetches[origin] = fetch  # before starting: the fetch may end at once
        fetch.task = deferred_from_coro(self._fetch(origin, fetch))
        return fetch

    async def _fetch(self, origin: Origin, fetch: _Fetch) -> None:
        previous = self._cache.get(origin)
        response: Response | None = None
        try:
            if self._shared_rules is not None:
                entry, response = await self._fetch_shared(origin, previous, self._shared_rules)
            else:
                entry, response = await self._download(origin, previous)
                entry = self._store(origin, entry, previous)
            await self._announce(origin, entry, previous, response, fetch.trigger)
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
            delay = delay_for(found.robots, self.config.user_agent, self.config.max_crawl_delay)
            found = dataclasses.replace(found, delay=delay[0])
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

    # -- downloading -------------------------------------------------------------

    def _request(self, url: str, origin: Origin) -> Request:
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
            request = self._request(url, origin)
            self._stats.inc_value("rep/robotstxt/request_count")
            self._watch_sizes(1)
            try:
                if engine is None:
                    raise RuntimeError("the crawler has no engine")
                response = await engine.download_async(request)
            except IgnoreRequest as exc:
                # Refused by a downloader middleware of this crawl, not by the site.
                self._stats.inc_value("rep/robotstxt/refused_locally")
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                return policy.refused_locally(reason, now=time.time()), None
            except Exception as exc:
                name = f"{type(exc).__module__}.{type(exc).__qualname__}"
                self._stats.inc_value(f"rep/robotstxt/exception_count/{name}")
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                return policy.on_error(reason, now=time.time(), previous=previous), None
            finally:
                self._sizes.pop(request, None)
                self._watch_sizes(-1)
            status = response.status
            self._stats.inc_value("rep/robotstxt/response_count")
            self._stats.inc_value(f"rep/robotstxt/response_status_count/{status}")
            self._stats.inc_value(f"rep/robotstxt/response_status_class/{status // 100}xx")
            if 300 <= status < 400 and status != 304:
                location = response.headers.get(b"Location")
                target = _redirect_target(response.url, location) if location else None
                if target is None or hop == self.config.max_redirects:
                    # nowhere to go, or too far: as if there were no robots.txt (§2.3.1.2)
                    if target is None:
                        reason = f"HTTP {status} without a usable Location"
                    else:
                        self._stats.inc_value("rep/robotstxt/redirects_exceeded")
                        reason = f"more than {self.config.max_redirects} redirects"
                    entry = policy.unavailable(reason, now=time.time())
                    hops = hop if target is None else hop + 1
                    entry = dataclasses.replace(
                        entry, status=status, url=response.url, redirects=hops
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
                date_header=_header(headers.get(b"Date")),
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

    # -- results -------------------------------------------------------------------

    def _store(self, origin: Origin, entry: Entry, previous: Entry | None) -> Entry:
        stats = self._stats
        text = origin_text(origin)
        stats.inc_value(f"rep/robotstxt/outcome/{entry.outcome}")
        if entry.truncated and entry.outcome == PARSED:
            stats.inc_value("rep/robotstxt/truncated")
            logger.info("robots.txt of %s is longer than REP_MAX_SIZE: cut there", text)
        changed = previous is None or previous.outcome != entry.outcome
        if entry.outcome == UNREACHABLE:
            self._log_unreachable(text, entry)
        elif entry.outcome == UNAVAILABLE and changed:
            logger.debug("robots.txt of %s unavailable (%s): all allowed", text, entry.reason)
        elif entry.outcome == REFUSED_LOCALLY and changed:
            logger.warning(
                "robots.txt of %s was not requested: a downloader middleware of this crawl "
                "refused it (%s); its requests are let through as if it had no robots.txt",
                text,
                entry.reason,
            )
        if entry.robots is not None and self.config.obey_crawl_delay and not entry.stale:
            delay, asked = delay_for(
                entry.robots, self.config.user_agent, self.config.max_crawl_delay
            )
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
        self._report.fetched(origin, entry)
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
        self,
        origin: Origin,
        entry: Entry,
        previous: Entry | None,
        response: Response | None,
        trigger: Request | None,
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
            # Scrapy's documentation: the request that triggered the download.
            request = trigger if trigger is not None else response.request
            if request is not None:
                parser = RobotParser(entry.robots)
                await _compat.send_robots_parsed(self.crawler, parser, request)
        if previous is None:
            sitemaps = entry.robots.sitemaps if entry.outcome == PARSED and entry.robots else ()
            await sig.send_catch_log_async(
                signal=rep_signals.sitemaps_found, urls=sitemaps, origin=text
            )


def _header(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value else None


def _redirect_target(base: str, location: bytes) -> str | None:
    """The absolute http(s) URL a Location header names; None for anything
    else ('http://[', a port past 65535, another scheme, no host)."""
    try:
        target = urljoin(base, safe_url_string(location.decode("latin-1").strip()))
        parts = urlparse(target)
        parts.port  # noqa: B018  (raises ValueError when out of range)
        Request(target)  # what Scrapy would refuse to download
    except ValueError:
        return None
    return target if parts.scheme in ("http", "https") and parts.hostname else None
