"""The robots.txt fetch: an origin in, an :class:`~scrapy_rep.policy.Entry` out.

One fetch in flight per origin (:mod:`scrapy_rep._in_flight`), bounded by
:mod:`scrapy_rep._download`; :class:`RobotsDownload` adds the retries and reads
the answer (RFC 9309 §2.3.1). With Redis (:mod:`scrapy_rep.cluster`), a fetch
first asks for another worker's result or the origin's fetch lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from twisted.internet.defer import Deferred

from scrapy_rep import _clock, _compat, _slots
from scrapy_rep import signals as rep_signals
from scrapy_rep._download import OwnDownloads
from scrapy_rep._in_flight import InFlight
from scrapy_rep.cluster import RedisUnavailable
from scrapy_rep.exceptions import PaymentRequired, SiteChallenged
from scrapy_rep.origin import ROBOTS_PATH
from scrapy_rep.policy import (
    CHALLENGED,
    PARSED,
    REFUSED_LOCALLY,
    UNAVAILABLE,
    conditional_headers,
    delay_for,
    header_text,
    retry_after,
)
from scrapy_rep.robotparser import RobotParser
from scrapy_rep.stop_signals import RULES, Detector, described

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_rep._download import Budget
    from scrapy_rep.cache import RulesCache
    from scrapy_rep.cluster import ClusterDelay, RedisRulesCache
    from scrapy_rep.cluster.link import Sleep
    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin
    from scrapy_rep.pins import PinWatch
    from scrapy_rep.policy import Entry
    from scrapy_rep.report import CrawlReport
    from scrapy_rep.state import StateStore

__all__ = ["RobotsDownload", "RobotsFetcher"]

logger = logging.getLogger(__name__)

FIRST_RETRY = 1.0
"""Seconds before the first retry without Retry-After (then doubling), and at least."""


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
        uncapped: bool = False,
        state: StateStore | None = None,
        pins: PinWatch | None = None,
    ) -> None:
        self.crawler = crawler
        self._state = state
        self._pins = pins
        self.config = config
        self._policy = config.policy
        self._cache = cache
        self._shared_rules = shared_rules
        self._cluster_delay = cluster_delay
        self._sleep = sleep
        self._report = report
        self.download = RobotsDownload(crawler, config, sleep=sleep, uncapped=uncapped)
        self._stats = crawler.stats
        self._fetches: InFlight[Origin, Entry] = InFlight()
        self.on_fetched: Callable[[Origin, Entry, Response | None], None] | None = None
        """Told of each fetch's entry and last response (scrapy_rep.evidence)."""

    def join(
        self, origin: Origin, trigger: Request | None = None, *, timeout: float | None = None
    ) -> Deferred[Entry | None]:
        """The origin's entry once fetched: joins the fetch in flight, or starts one
        (``trigger``: the request that needs it, for Scrapy's robots_parsed);
        None if ``timeout`` seconds pass first."""
        return self._fetches.join(origin, lambda: self._fetch(origin, trigger), timeout=timeout)

    def refresh(self, origin: Origin, trigger: Request | None = None) -> None:
        """Fetch the origin's robots.txt anew in the background, unless under way
        (or robots.txt downloads are at REP_MAX_FETCHES: the old rules serve on)."""
        if not self.download.files.busy:
            self._fetches.start(origin, lambda: self._fetch(origin, trigger))

    async def _fetch(self, origin: Origin, trigger: Request | None) -> Entry:
        previous = self._cache.get(origin)
        response: Response | None = None
        try:
            if previous is None and self._state is not None:
                previous = self._state.previous(origin)  # a past crawl's
                if previous is not None and previous.expires > _clock.now():
                    self._stats.inc_value("rep/state/used")
                    entry = self._store(origin, previous, None)
                    if self._pins is not None:
                        self._pins.check(origin, entry, None, None)
                    await self._announce(origin, entry, None, None, trigger)
                    return entry
            if self._shared_rules is not None:
                entry, response = await self._fetch_shared(origin, previous, self._shared_rules)
            else:
                entry, response = await self.download.entry(origin, previous)
                entry = self._store(origin, entry, previous)
            body = _new_body(entry, response)
            if self._pins is not None:  # first: the state may hold the pinned body
                self._pins.check(origin, entry, previous, body)
            if self._state is not None:
                self._state.record(origin, entry, body)
            if self.on_fetched is not None:  # provenance, evidence (scrapy_rep.evidence)
                self.on_fetched(origin, entry, response)
            await self._announce(origin, entry, previous, response, trigger)
        except Exception:  # a bug here must not leave waiters hanging
            logger.exception("Error while fetching %s", origin.robots_url)
            entry = self._policy.on_error("internal error", now=_clock.now(), previous=previous)
            self._cache.put(origin, entry)
        return entry

    async def _fetch_shared(
        self, origin: Origin, previous: Entry | None, shared: RedisRulesCache
    ) -> tuple[Entry, Response | None]:
        """The origin's rules from Redis, or downloaded here (by the worker
        holding the origin's lock, or by any when Redis cannot help) and shared."""
        claim = await shared.claim(origin, self._sleep)
        found = claim.entry  # its delay is set by _store, as for a download
        if claim.fresh and found is not None:
            return self._store(origin, found, previous), None
        base = found or previous  # Redis's state is the cluster's latest
        entry, response = await self.download.entry(origin, base)
        entry = self._store(origin, entry, base, cache=False)
        body = _new_body(entry, response)  # none for a 304: Redis keeps the one it has
        # The robots.txt request was one of the origin's requests: the next page
        # request, from any worker, comes at least the delay after it. The turn
        # first: a worker learning the rules from Redis, or from this worker's
        # cache, must find the robots.txt request counted.
        cluster = self._cluster_delay
        try:
            if entry.delay and response is not None and cluster is not None:
                key = _slots.slot_key(self.crawler.engine, Request(origin.robots_url))
                with contextlib.suppress(RedisUnavailable):
                    await cluster.reserve(key, entry.delay)
        finally:
            self._cache.put(origin, entry)
        await shared.publish(origin, entry, body)
        return entry, response

    # -- results -------------------------------------------------------------------

    def _store(
        self, origin: Origin, entry: Entry, previous: Entry | None, *, cache: bool = True
    ) -> Entry:
        stats = self._stats
        text = origin.text
        stats.inc_value(f"rep/robotstxt/outcome/{entry.outcome}")
        if entry.truncated and entry.outcome == PARSED:
            stats.inc_value("rep/robotstxt/truncated")
            logger.info("robots.txt of %s is longer than REP_MAX_SIZE: cut there", text)
        changed = previous is None or previous.outcome != entry.outcome
        if entry.failed:
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
        if entry.robots is not None and self.config.obey_crawl_delay:
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
        if cache:
            self._cache.put(origin, entry)
        self._report.fetched(origin, entry)
        return entry

    def _log_unreachable(self, text: str, entry: Entry) -> None:
        """One WARNING per outage: its first failure (the failure count outlives
        the origin's rules in the cache: scrapy_rep._backoff_table); DEBUG after."""
        challenged = entry.outcome == CHALLENGED
        self._stats.inc_value(
            "rep/robotstxt/challenged" if challenged else "rep/robotstxt/unreachable"
        )
        retry = entry.expires - _clock.now()
        if entry.stale:
            self._stats.inc_value("rep/robotstxt/stale_served")
            action = f"keeping its rules of {_clock.now() - entry.fetched:.0f} s ago"
        else:
            action = {
                "disallow": "its requests are dropped",
                "allow": "its requests are let through (REP_UNREACHABLE = 'allow')",
                "defer": "its requests are kept until it answers (REP_UNREACHABLE = 'defer')",
            }[self.config.unreachable]
        logger.log(
            logging.WARNING if entry.failures == 1 else logging.DEBUG,
            "robots.txt of %s %s (%s): %s; retry in %.0f s",
            text,
            "answered with a stop signal, not rules" if challenged else "unreachable",
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
        text = origin.text
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


class RobotsDownload:
    """One origin's robots.txt as an entry: downloaded bounded, retried on the
    server's terms (docs/robotstxt.md, "Retries"). Not retried within a fetch
    after a timeout: a server that hangs would hold its waiting requests twice as long."""

    def __init__(self, crawler: Crawler, config: Config, *, sleep: Sleep, uncapped: bool) -> None:
        self.files = OwnDownloads(crawler, config, ROBOTS_PATH, uncapped=uncapped)
        self.config = config
        self._policy = config.policy
        self._stats = crawler.stats
        self._sleep = sleep
        self._detect = (
            Detector(RULES + config.block_markers).detect if config.stop_signals else None
        )

    def _stop_signal(self, response: Response) -> str | None:
        """What stop signal ``response`` is (a reason text), None if none."""
        if self._detect is None:
            return None
        signal = self._detect(response.status, response.headers, response.body)
        return None if signal is None else described(signal)

    async def entry(self, origin: Origin, previous: Entry | None) -> tuple[Entry, Response | None]:
        """The origin's robots.txt as an entry (``previous``: what was known), and
        the last response (None when there was none)."""
        budget = self.files.budget(self.config.fetch_retries)
        failures: list[Entry] = []
        validators = conditional_headers(previous)  # sent only to the URL they came from

        async def get(url: str) -> Response | None:
            extra = validators[1] if validators is not None and url == validators[0] else None
            response, failed = await self._get(url, origin, previous, budget, extra)
            if failed is not None:
                failures.append(failed)
            return response

        response, redirects, stopped = await self.files.follow(origin.robots_url, get)
        if response is None:
            return failures[-1], None
        status = response.status
        signal = self._stop_signal(response)
        if signal is not None:  # a page for browsers or buyers: no rules were said
            self._stats.inc_value(f"rep/robotstxt/stop_signal/{signal.split(' ', 1)[0]}")
            entry = self._policy.challenged(signal, now=_clock.now(), previous=previous)
        elif stopped is not None:  # nowhere to go, or too far: as if there were none (§2.3.1.2)
            if stopped == "too_many":
                self._stats.inc_value("rep/robotstxt/redirects_exceeded")
                reason = f"more than {self.config.max_redirects} redirects"
            else:
                reason = f"HTTP {status} without a usable Location"
            entry = self._policy.unavailable(reason, now=_clock.now())
        else:
            headers = response.headers
            sent = response.request.headers if response.request is not None else {}
            conditional = b"If-None-Match" in sent or b"If-Modified-Since" in sent
            entry = self._policy.on_response(
                status,
                response.body,
                url=response.url,
                now=_clock.now(),
                previous=previous,
                cache_control=header_text(headers.get(b"Cache-Control")),
                retry_after_header=header_text(headers.get(b"Retry-After")),
                date_header=header_text(headers.get(b"Date")),
                etag=header_text(headers.get(b"ETag")),
                last_modified=header_text(headers.get(b"Last-Modified")),
                conditional=conditional,
            )
            if status == 304 and entry.outcome == PARSED:
                self._stats.inc_value("rep/robotstxt/not_modified")
            entry = dataclasses.replace(
                entry,
                truncated=entry.truncated or "download_stopped" in response.flags,
                size=entry.size if status == 304 else len(response.body),
            )
        entry = dataclasses.replace(entry, status=status, url=response.url, redirects=redirects)
        return entry, response

    async def _get(
        self,
        url: str,
        origin: Origin,
        previous: Entry | None,
        budget: Budget,
        validators: dict[bytes, bytes] | None = None,
    ) -> tuple[Response | None, Entry | None]:
        """One hop, tried again on the server's terms within the fetch's
        ``budget``: its last response, or the entry of the last failure."""
        failed: Entry | None = None
        for attempt in itertools.count():
            response: Response | None = None
            try:
                request = self.files.request(url, origin, budget, validators)
                if validators:
                    self._stats.inc_value("rep/robotstxt/conditional")
                response = await self._download(request)
            except (SiteChallenged, PaymentRequired) as exc:  # its slot is stopped: not sent
                return None, self._policy.challenged(str(exc), now=_clock.now(), previous=previous)
            except IgnoreRequest as exc:
                # Refused by a downloader middleware of this crawl, not by the site.
                self._stats.inc_value("rep/robotstxt/refused_locally")
                return None, self._policy.refused_locally(_reason(exc), now=_clock.now())
            except Exception as exc:
                name = f"{type(exc).__module__}.{type(exc).__qualname__}"
                self._stats.inc_value(f"rep/robotstxt/exception_count/{name}")
                failed = self._policy.on_error(_reason(exc), now=_clock.now(), previous=previous)
                if isinstance(exc, _compat.TIMEOUT_ERRORS):
                    break  # it had REP_FETCH_TIMEOUT already: asked again after REP_RETRY_MIN
            else:
                if response.status != 429 and response.status < 500:
                    return response, None
                if self._stop_signal(response) is not None:  # never asked again in this fetch
                    return response, None
            wait = self._retry_wait(response, attempt)
            if wait is None or not budget.retries:
                break
            budget.retries -= 1
            self._stats.inc_value("rep/robotstxt/retry_count")
            with budget.paused():  # the server asked for the wait: not download time
                if not await self._sleep(wait):  # the spider closes
                    break
        if response is not None:
            return response, None  # its status says unreachable, with its Retry-After
        return None, failed

    def _retry_wait(self, response: Response | None, attempt: int) -> float | None:
        """Seconds before the next try: the server's Retry-After, else a doubling
        backoff; None when the server asks for longer than a fetch may take."""
        asked = None
        if response is not None:
            headers = response.headers
            asked = retry_after(
                header_text(headers.get(b"Retry-After")),
                _clock.now(),
                date=header_text(headers.get(b"Date")),
            )
        if asked is None:
            return min(FIRST_RETRY * 2.0**attempt, self.config.fetch_timeout)
        if asked > self.config.fetch_timeout:
            return None  # the entry's retry time honours it
        return max(asked, FIRST_RETRY)

    async def _download(self, request: Request) -> Response:
        stats = self._stats
        stats.inc_value("rep/robotstxt/request_count")
        response = await self.files.send(request)
        status = response.status
        stats.inc_value("rep/robotstxt/response_count")
        stats.inc_value(f"rep/robotstxt/response_status_count/{status}")
        stats.inc_value(f"rep/robotstxt/response_status_class/{status // 100}xx")
        return response


def _new_body(entry: Entry, response: Response | None) -> bytes | None:
    """The body ``entry``'s rules were just read from (None: not read anew,
    a 304 or stale rules)."""
    if response is None or entry.outcome != PARSED or response.status == 304:
        return None
    return response.body


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
