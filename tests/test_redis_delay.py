"""Cluster-wide Crawl-delay on a real Redis (REP_REDIS_URL), in one process.

Several workers spaced together are in test_redis_cluster.py; here: what one
worker does with its reservations.
"""

from __future__ import annotations

import time
from typing import ClassVar

import pytest
import pytest_twisted
from crawls import run_crawl
from redis_server import RedisServer, shared
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
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


@pytest_twisted.ensureDeferred
async def test_a_turn_holds_its_slot_until_its_request_arrives(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """A busy worker's request reaches the site late (0.3 s after its turn
    here): the next turn, another worker's, comes a full spacing after it
    arrived. Before, the next turn came a spacing after the first one was
    reserved, and the site saw the two as much closer as the first was late
    (bench-cluster, scrapy-redis's queue, 4 workers on 2 cores: 0.028 s for
    0.25 s asked)."""
    import asyncio
    import time

    from scrapy import Spider
    from scrapy.utils.test import get_crawler
    from twisted.internet.defer import Deferred

    from scrapy_rep.cluster import PACED
    from scrapy_rep.cluster.link import RedisLink
    from scrapy_rep.cluster.pacing import ClusterDelay
    from scrapy_rep.config import Config

    spacing, late = 0.25, 0.3
    config = Config.from_settings(shared(redis_server, redis_prefix))

    async def sleep(seconds: float) -> bool:
        await asyncio.sleep(seconds)
        return True

    async def two_workers() -> tuple[float, float, dict[str, int]]:
        stats = [get_crawler(Spider).stats for _ in range(2)]
        links = [RedisLink(config, worker) for worker in stats]
        busy, other = (
            ClusterDelay(link, config, worker) for link, worker in zip(links, stats, strict=True)
        )
        first, second = Request("http://a.test/1"), Request("http://a.test/2")
        try:
            assert await busy.pace("slot", spacing, sleep, first) == PACED
            taking = asyncio.ensure_future(other.pace("slot", spacing, sleep, second))
            await asyncio.sleep(late)  # the busy worker sends it late
            arrived = time.monotonic()
            busy.release(first)  # its answer begins
            assert await taking == PACED
            sent_next = time.monotonic()
            other.release(second)
        finally:
            for link in links:
                await link.close()
        return arrived, sent_next, stats[1].get_stats()

    arrived, sent_next, stats = await Deferred.fromFuture(asyncio.ensure_future(two_workers()))
    assert sent_next - arrived >= spacing, sent_next - arrived
    assert stats["rep/redis/delay/held"] == 1
    assert redis_server.client().keys(f"{redis_prefix}hold:*") == []


class DropLater:
    """A downloader middleware after scrapy-rep's that drops ``/dropped``
    (the request has taken its Crawl-delay turn), noting when."""

    dropped_at: ClassVar[list[float]] = []

    def process_request(self, request: Request) -> None:
        if request.url.endswith("/dropped"):
            DropLater.dropped_at.append(time.time())
            raise IgnoreRequest("dropped after its turn")


@pytest_twisted.ensureDeferred
async def test_a_request_dropped_after_its_turn_gives_its_slot_back(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    """A later middleware drops a request that took its turn: no signal says
    it ended, yet the slot is not held until the hold expires (601 s here,
    DOWNLOAD_TIMEOUT + 1 s, past CLOSESPIDER_TIMEOUT): the next request goes
    once a look at the downloader (every SWEEP_EVERY) misses the dropped one."""
    site.robots("User-agent: *\nCrawl-delay: 0.5\n")
    DropLater.dropped_at.clear()
    settings = shared(
        redis_server,
        redis_prefix,
        DOWNLOAD_TIMEOUT=600,
        CLOSESPIDER_TIMEOUT=30,
        DOWNLOADER_MIDDLEWARES={f"{__name__}.DropLater": 200},
    )
    urls: list[str | Request] = [Request(site.url("/dropped"), priority=1), site.url("/next")]
    result = await run_crawl(urls, settings)
    assert list(result.responses) == [site.url("/next")]
    assert result.failed_with(site.url("/dropped")) is IgnoreRequest
    assert DropLater.dropped_at
    assert result.stats["finish_reason"] == "finished"
    assert redis_server.client().keys(f"{redis_prefix}hold:*") == []
