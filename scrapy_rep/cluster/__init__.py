"""Politeness shared by many Scrapy processes through Redis (``REP_REDIS_URL``).

Three pieces, each on by its own setting, all keyed under ``REP_REDIS_PREFIX``
and every key with a TTL, so Redis holds a bounded amount per origin and slot.

robots.txt (``REP_REDIS_ROBOTS``): :class:`RedisRulesCache`
    Each worker keeps its in-process LRU of rules: requests to an origin it
    knows are checked without Redis. When its copy is missing or expired, one
    script call either returns the origin's state from Redis or takes the
    origin's fetch lock (``SET NX PX``: it expires, so a worker that dies
    while fetching blocks nobody for long). The lock holder downloads
    robots.txt the usual way and, in one more call, stores the result and
    releases the lock. The others poll with backoff (50 ms doubling to 1 s)
    until the result is there, or the lock is free (they take it), or twice the
    lock's lifetime has passed (they fetch themselves). Redis keeps the
    robots.txt body, at most ``REP_MAX_SIZE`` + 1 bytes (one byte more, so that
    a re-parse cuts an over-long file at the same line), and what the fetch
    found: outcome, expiry, consecutive failures, reason, status. Other workers
    re-parse the body (parsing is fast; parser objects are never pickled).
    Unreachable results travel with their retry time and failure count, so
    the whole cluster backs off together, and an expired state is kept
    ``REP_REDIS_KEEP`` seconds longer: the next fetch, by any worker, counts
    failures on from it and can serve its rules as stale-if-error.

Crawl-delay (``REP_REDIS_DELAY``): :class:`ClusterDelay`
    Each request to an origin with a Crawl-delay (or Request-rate) takes the
    next turn of its download slot in one script call, on Redis's clock
    (``TIME``): ``at = max(now, next_free)``, ``next_free = at + spacing``,
    the slot held for the request (``hold:<slot>``), and the call answers ``at -
    now``. The worker waits that long, out of the downloader's active set
    (like requests waiting for robots.txt), then lets the request go. The hold
    ends when the request reaches the site (its answer begins, or it ends
    without one) and the next turn, any worker's, is a spacing from then: a
    request taken up late or sent late by a busy worker never brings the next
    one closer, as the site sees them. While a slot is held, the others ask
    again a spacing later (the next turn cannot come sooner).

    The slot's *local* delay must then be zero (``SlotDelays.let_cluster_pace``):
    a local delay (Crawl-delay, ``DOWNLOAD_DELAY``, jitter, AutoThrottle) would
    hold the released request back and keep the slot held longer, so the
    slot's own delay is folded into the spacing instead (``max(Crawl-delay,
    own delay)``) and AutoThrottle does not move it. Each worker takes at most
    one turn per slot at a time; its other requests for the slot wait in
    order behind it, in-process, and a hold ends by itself after
    ``min(DOWNLOAD_TIMEOUT, 30 s)`` + 1 s past its turn, so a worker that
    dies holds a slot no longer than that. The worker that downloads an
    origin's robots.txt counts a turn for it once answered: it was a request
    to the origin.

Slow-down pauses (``REP_REDIS_SLOWDOWN``): :class:`ClusterPauses`
    A worker whose request is answered 429 or 503 pauses the download slot at
    once, locally (:mod:`scrapy_rep.slowdown`), and calls one script at once,
    a blocking round trip of its own client (before the worker schedules the
    retry or hands out anything else). On Redis's clock, the script keeps the slot's ``{until,
    level}`` (the pause is computed there by the same rule, so workers agree on
    its length and on the backoff level), adds the slot to the sorted set
    ``pauses`` (score: its end; ended pauses pruned at each call), pushes the
    slot's Crawl-delay reservation key past the end (a turn reserved
    afterwards, by any worker, comes after the pause) and publishes the pause
    on the channel ``slowdown``. Each worker has one subscriber, started when
    the spider opens, which reads the sorted set when it (re)subscribes, so a
    late worker learns the pauses that run. Requests cost no Redis call; only
    slow-down answers do, and one good answer per worker after a pause, which
    resets the level. A challenged answer (stop signals,
    :mod:`scrapy_rep.challenges`) is counted in the same record by a script of
    its own: the run of challenges, its doubling and its give-up count are the
    cluster's. Redis down: each worker pauses on its own.

Redis down or slow (:class:`RedisLink`)
    Calls time out after ``REP_REDIS_TIMEOUT`` seconds and are not retried. On
    a failure, one WARNING per outage, and for ``REP_REDIS_RETRY`` seconds the
    worker does not try Redis at all: robots.txt is fetched locally, and
    Crawl-delay becomes the slot's local minimum again. Then the next call
    tries Redis again; once it answers, an INFO line says so and shared state
    resumes.

Shared state needs the asyncio reactor (``redis.asyncio``); on another
reactor :meth:`SharedState.connect` logs a WARNING and keeps all state local.

Modules: :mod:`~scrapy_rep.cluster.link` (the client, outages),
:mod:`~scrapy_rep.cluster.rules` (robots.txt), :mod:`~scrapy_rep.cluster.pacing`
(Crawl-delay), :mod:`~scrapy_rep.cluster.pauses` (slow-down pauses).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy import signals

from scrapy_rep.cluster.link import RedisLink, RedisUnavailable, reactor_problem
from scrapy_rep.cluster.pacing import CLOSING, LOCAL, PACED, ClusterDelay
from scrapy_rep.cluster.pauses import ClusterPauses
from scrapy_rep.cluster.rules import RedisRulesCache
from scrapy_rep.exceptions import InvalidSetting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_rep.config import Config

__all__ = [
    "CLOSING",
    "LOCAL",
    "PACED",
    "ClusterDelay",
    "ClusterPauses",
    "RedisLink",
    "RedisRulesCache",
    "RedisUnavailable",
    "SharedState",
    "reactor_problem",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SharedState:
    """What this worker shares through Redis: robots.txt, Crawl-delay, slow-down
    pauses, any of them or none."""

    rules: RedisRulesCache | None = None
    delay: ClusterDelay | None = None
    pauses: ClusterPauses | None = None

    @classmethod
    def connect(cls, crawler: Crawler, config: Config, *, pacing: bool) -> SharedState:
        """The shared state the settings ask for (``pacing``: Crawl-delay is
        obeyed at all); nothing shared without ``REP_REDIS_URL`` / ``REDIS_URL``."""
        robots = config.redis_robots
        delay = config.redis_delay and pacing
        pauses = config.redis_slowdown and config.slowdown
        if config.redis_url is None or not (robots or delay or pauses):
            return cls()
        problem = reactor_problem()
        if problem is not None:
            logger.warning(
                "REP_REDIS_URL is set but %s: robots.txt, Crawl-delay and "
                "slow-down pauses stay local to this worker. Shared state needs TWISTED_REACTOR = "
                "'twisted.internet.asyncioreactor.AsyncioSelectorReactor'.",
                problem,
            )
            return cls()
        stats = crawler.stats
        assert stats is not None
        try:
            link = RedisLink(config, stats)
        except ImportError:
            raise InvalidSetting(
                "REP_REDIS_URL",
                "shared state needs the Redis client: pip install 'scrapy-rep[redis]'",
            ) from None
        shared_pauses = ClusterPauses(link, config, stats) if pauses else None
        if shared_pauses is not None:  # the subscriber stops before the client closes
            crawler.signals.connect(shared_pauses.close, signal=signals.engine_stopped)
        crawler.signals.connect(link.close, signal=signals.engine_stopped)
        names = [
            name
            for name, on in (
                ("robots.txt", robots),
                ("Crawl-delay", delay),
                ("slow-down pauses", pauses),
            )
            if on
        ]
        shared = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
        logger.info(
            "Sharing %s with other workers through Redis at %s (keys %s*)",
            shared,
            link.url,
            config.redis_prefix,
        )
        shared_delay = ClusterDelay(link, config, stats) if delay else None
        if shared_delay is not None:  # a turn holds its slot until its request arrives
            shared_delay.watch(crawler)
        return cls(
            RedisRulesCache(link, config, stats) if robots else None, shared_delay, shared_pauses
        )
