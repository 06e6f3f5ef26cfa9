"""Cluster-wide Crawl-delay on a real Redis (REP_REDIS_URL), in one process.

Several workers spaced together are in test_redis_cluster.py; here: what one
worker does with its reservations.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from crawls import run_crawl
from redis_server import RedisServer, shared
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import Response
from servers import ScriptedServer, gaps

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only]  # real-time delays

TOLERANCE = 0.1  # a turn is reserved, then the request goes its way: a busy machine


@pytest_twisted.ensureDeferred
async def test_waiting_for_a_turn_leaves_the_concurrency_to_other_sites(
    site: ScriptedServer, site2: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    """With CONCURRENT_REQUESTS = 2, requests waiting for their Crawl-delay turn
    on one site do not hold back another site's pages. Both robots.txt files
    are known before the measured requests start."""
    site.robots("User-agent: *\nCrawl-delay: 1\n")
    site2.robots("User-agent: *\nDisallow: /private\n")

    def then_the_rest(response: Response) -> list[Request]:
        if response.url != site.url("/warm"):
            return []
        # Scrapy's queues are LIFO: the slow site's requests come out first.
        fast = [Request(site2.url(f"/fast{i}")) for i in range(12)]
        return fast + [Request(site.url(f"/slow{i}")) for i in range(1, 4)]

    result = await run_crawl(
        [site.url("/warm"), site2.url("/warm")],
        # REP_FRONTIER off: the turns are waited for in the middleware (both
        # sites share the download slot 127.0.0.1, whose turns the frontier keeps)
        shared(redis_server, redis_prefix, CONCURRENT_REQUESTS=2, REP_FRONTIER=False),
        follow=then_the_rest,
    )
    assert len(result.responses) == 17
    slow = [hit for hit in site.log() if hit.path.startswith("/slow")]
    fast = [hit for hit in site2.log() if hit.path.startswith("/fast")]
    assert len(fast) == 12
    assert all(hit.time < slow[1].time for hit in fast)
    assert min(gaps(site.log())) >= 1 - TOLERANCE
    assert result.stats["rep/redis/delay/paced"] == 4


@pytest.mark.parametrize("autothrottle", [False, True])
@pytest_twisted.ensureDeferred
async def test_the_local_slot_delay_is_folded_into_the_reserved_spacing(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str, autothrottle: bool
) -> None:
    """A released request must leave at once: its slot has no local delay
    (AutoThrottle cannot give it one), and DOWNLOAD_DELAY, larger than the
    Crawl-delay here, spaces the reservations instead."""
    site.robots("User-agent: *\nCrawl-delay: 0.3\n")
    crawlers: list[Crawler] = []
    slot_delays: list[float] = []

    def record_slot_delay(response: Response) -> list[Request]:
        assert crawlers[0].engine is not None
        slot_delays.append(crawlers[0].engine.downloader.slots["127.0.0.1"].delay)
        return []

    settings = shared(
        redis_server, redis_prefix, DOWNLOAD_DELAY=0.6, AUTOTHROTTLE_ENABLED=autothrottle
    )
    result = await run_crawl(
        [site.url(f"/{i}") for i in range(4)],
        settings,
        follow=record_slot_delay,
        before=crawlers.append,
    )
    assert len(result.responses) == 4
    assert slot_delays == [0.0] * 4
    assert min(gaps(site.page_hits())) >= 0.6 - TOLERANCE
    assert result.stats["rep/redis/delay/paced"] == 4


@pytest_twisted.ensureDeferred
async def test_robots_only_leaves_crawl_delay_local(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    site.robots("User-agent: *\nCrawl-delay: 0.4\n")
    settings = shared(redis_server, redis_prefix, REP_REDIS_DELAY=False)
    result = await run_crawl([site.url(f"/{i}") for i in range(3)], settings)
    assert len(result.responses) == 3
    assert min(gaps(site.log())) >= 0.4 - TOLERANCE
    assert "rep/redis/delay/paced" not in result.stats
    assert result.stats["rep/redis/robots/published"] == 1
    assert redis_server.client().keys(f"{redis_prefix}delay:*") == []


@pytest_twisted.ensureDeferred
async def test_delay_only_leaves_robots_txt_local(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    site.robots("User-agent: *\nCrawl-delay: 0.4\n")
    settings = shared(redis_server, redis_prefix, REP_REDIS_ROBOTS=False)
    first = await run_crawl([site.url("/a"), site.url("/b")], settings)
    second = await run_crawl([site.url("/c"), site.url("/d")], settings)
    assert site.hits("/robots.txt") == 2
    assert first.stats["rep/redis/delay/paced"] == second.stats["rep/redis/delay/paced"] == 2
    assert min(gaps(site.page_hits())) >= 0.4 - TOLERANCE  # across both crawls
    assert redis_server.client().keys(f"{redis_prefix}robots*") == []
