"""Politeness shared by many Scrapy processes through Redis (``REP_REDIS_URL``).

robots.txt (:mod:`~scrapy_rep.cluster.rules`: the others re-parse the stored
body, parser objects are never pickled), Crawl-delay
(:mod:`~scrapy_rep.cluster.pacing`: turns on Redis's clock, the slot's local
delay then zero, its own delay folded into the spacing) and slow-down pauses
(:mod:`~scrapy_rep.cluster.pauses`), each on by its own setting. docs/cluster.md
describes each, its keys and its faults (Redis down or slow:
:mod:`~scrapy_rep.cluster.link`). Shared state needs the asyncio reactor
(``redis.asyncio``); on another, :meth:`SharedState.connect` logs a WARNING
and keeps all state local.
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
        rules = RedisRulesCache(link, config, stats) if robots else None
        if rules is not None:  # its late publications stop before the client closes
            crawler.signals.connect(rules.close, signal=signals.engine_stopped)
        crawler.signals.connect(link.close, signal=signals.engine_stopped)
        asked = {"robots.txt": robots, "Crawl-delay": delay, "slow-down pauses": pauses}
        names = [name for name, on in asked.items() if on]
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
        return cls(rules, shared_delay, shared_pauses)
