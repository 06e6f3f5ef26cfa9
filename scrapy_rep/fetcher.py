"""The robots.txt fetch: an origin in, an :class:`~scrapy_rep.policy.Entry` out.

One fetch in flight per origin, shared by every request waiting for it
(:mod:`scrapy_rep._in_flight`).

The download, bounded in bytes, time, places and retries, is
:mod:`scrapy_rep._download`'s; what its result means (RFC 9309 §2.3.1) is
:mod:`scrapy_rep.policy`'s. The fetcher stores the entry, logs what a user
should know (once per origin and outage), and sends the signals.

With shared state (:mod:`scrapy_rep.cluster`), a fetch first asks Redis for
another worker's result or for the origin's fetch lock, and publishes its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from scrapy import Request
from twisted.internet.defer import Deferred

from scrapy_rep import _compat, _slots
from scrapy_rep import signals as rep_signals
from scrapy_rep._download import RobotsDownload
from scrapy_rep._in_flight import InFlight
from scrapy_rep.cluster import RedisUnavailable
from scrapy_rep.origin import origin_text, robots_url
from scrapy_rep.policy import PARSED, REFUSED_LOCALLY, UNAVAILABLE, UNREACHABLE, delay_for
from scrapy_rep.robotparser import RobotParser

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_rep.cache import RulesCache
    from scrapy_rep.cluster import ClusterDelay, RedisRulesCache
    from scrapy_rep.cluster.link import Sleep
    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Entry
    from scrapy_rep.report import CrawlReport

__all__ = ["RobotsFetcher"]

logger = logging.getLogger(__name__)


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
    ) -> None:
        self.crawler = crawler
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
        if not self.download.busy:
            self._fetches.start(origin, lambda: self._fetch(origin, trigger))

    async def _fetch(self, origin: Origin, trigger: Request | None) -> Entry:
        previous = self._cache.get(origin)
        response: Response | None = None
        try:
            if self._shared_rules is not None:
                entry, response = await self._fetch_shared(origin, previous, self._shared_rules)
            else:
                entry, response = await self.download.entry(origin, previous)
                entry = self._store(origin, entry, previous)
            await self._announce(origin, entry, previous, response, trigger)
        except Exception:  # a bug here must not leave waiters hanging
            logger.exception("scrapy-rep: error while fetching %s", robots_url(origin))
            entry = self._policy.on_error("internal error", now=time.time(), previous=previous)
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
        entry = self._store(origin, entry, base)
        body = response.body if response is not None and entry.outcome == PARSED else None
        # The turn first: a worker learning the rules from Redis (or the Redis
        # queue making the slot ready) must find the robots.txt request counted.
        if entry.delay and response is not None and self._cluster_delay is not None:
            await self._count_robots_turn(origin, entry.delay, self._cluster_delay)
        await shared.publish(origin, entry, body)
        return entry, response

    async def _count_robots_turn(self, origin: Origin, delay: float, cluster: ClusterDelay) -> None:
        """The robots.txt request was one of the origin's requests: the next
        page request, from any worker, comes at least ``delay`` after it."""
        key = _slots.slot_key(self.crawler.engine, Request(robots_url(origin)))
        with contextlib.suppress(RedisUnavailable):
            await cluster.reserve(key, delay)

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
        self._cache.put(origin, entry)
        self._report.fetched(origin, entry)
        return entry

    def _log_unreachable(self, text: str, entry: Entry) -> None:
        """One WARNING per outage: its first failure (the failure count outlives
        the origin's rules in the cache: scrapy_rep._backoff_table); DEBUG after."""
        self._stats.inc_value("rep/robotstxt/unreachable")
        retry = entry.expires - time.time()
        if entry.stale:
            self._stats.inc_value("rep/robotstxt/stale_served")
            action = f"keeping its rules of {time.time() - entry.fetched:.0f} s ago"
        else:
            action = {
                "disallow": "its requests are dropped",
                "allow": "its requests are let through (REP_UNREACHABLE = 'allow')",
                "defer": "its requests are kept until it answers (REP_UNREACHABLE = 'defer')",
            }[self.config.unreachable]
        logger.log(
            logging.WARNING if entry.failures == 1 else logging.DEBUG,
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
