"""``scrapy_rep.RedisPoliteQueue`` driven directly in a real crawl, in pytest's
process (asyncio reactor), against a real redis-server: requests kept in the
worker during an outage and pushed to Redis after it, and ``clear()`` at scale.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_twisted
from crawls import BASE_SETTINGS, loopback_names
from redis_server import RedisServer
from scrapy import Request, Spider
from scrapy.http import Response
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from servers import ScriptedServer

from scrapy_rep.frontier import redis_queue
from scrapy_rep.frontier.redis_queue import CLEAR_BATCH, RedisPoliteQueue

pytestmark = pytest.mark.asyncio_only

ORIGINS = 4
PAGES = 2


class QueueSpider(Spider):
    """Runs ``act(queue)`` at start, then crawls what the queue hands out."""

    name = "rep-queue"

    def __init__(self, act: Callable[[RedisPoliteQueue], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.act = act
        self.responses: list[tuple[str, float]] = []

    async def start(self) -> AsyncIterator[Request]:
        assert self.crawler.engine is not None
        queue = self.crawler.engine._slot.scheduler.queue  # type: ignore[union-attr]
        assert isinstance(queue, RedisPoliteQueue)
        self.act(queue)
        return
        yield

    def parse(self, response: Response) -> None:
        self.responses.append((response.url, time.monotonic()))


def queue_settings(redis: RedisServer, prefix: str, **extra: Any) -> dict[str, Any]:
    return {
        **BASE_SETTINGS,
        "LOG_LEVEL": "INFO",
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_PERSIST": True,
        "REDIS_URL": redis.url,
        "REP_REDIS_URL": redis.url,
        "REP_REDIS_PREFIX": prefix,
        "SCHEDULER_QUEUE_CLASS": "scrapy_rep.RedisPoliteQueue",
        "SCHEDULER_QUEUE_KEY": prefix + "%(spider)s:requests",
        "SCHEDULER_DUPEFILTER_KEY": prefix + "%(spider)s:dupefilter",
        **extra,
    }


async def crawl_queue(settings: dict[str, Any], act: Callable[[Any], None]) -> Any:
    crawler = get_crawler(QueueSpider, settings)
    await deferred_from_coro(crawler.crawl_async(act=act))
    return crawler


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_requests_pushed_to_redis_after_an_outage_get_their_robots_txt_at_once(
    site: ScriptedServer,
    own_redis: RedisServer,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Redis down while requests of new origins are scheduled: the worker keeps
    them; once Redis answers they go to Redis, and their robots.txt is fetched
    then (their slots waited ``AWAIT_ROBOTS``, 30 s, for a fetch nobody made).
    AWAIT_ROBOTS is moved out of reach here (600 s): a slot parked for a fetch
    nobody made keeps its pages past CLOSESPIDER_TIMEOUT."""
    monkeypatch.setattr(redis_queue, "AWAIT_ROBOTS", 600.0)
    site.robots(b"User-agent: *\nDisallow: /private\n")
    urls = [f"http://o{n}.test:{site.port}/page{p}" for n in range(ORIGINS) for p in range(PAGES)]

    def during_an_outage(queue: RedisPoliteQueue) -> None:
        own_redis.stop()
        for url in urls:
            queue.push(Request(url, callback=queue.spider.parse, dont_filter=True))
        own_redis.start()

    # REP_REDIS_RETRY 0: the first pop tries Redis again, and pushes the requests there
    settings = queue_settings(own_redis, redis_prefix, REP_REDIS_RETRY=0.0, CLOSESPIDER_TIMEOUT=30)
    with loopback_names():
        crawler = await crawl_queue(settings, during_an_outage)
    stats = crawler.stats.get_stats()
    assert stats["rep/redis/frontier/local"] == len(urls)  # kept during the outage
    assert stats["rep/redis/frontier/pushed"] == len(urls)  # then pushed to Redis
    responses = crawler.spider.responses
    assert sorted(url for url, _ in responses) == sorted(urls)
    assert stats["finish_reason"] == "finished"
    assert stats["rep/frontier/robotstxt_prefetched"] == ORIGINS
    assert site.hits("/robots.txt") == ORIGINS


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_clear_at_100k_slots_never_holds_redis_long(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """``clear()`` of a queue of 100,000 slots (its queues, metas, leases):
    every key gone, in commands of at most ``CLEAR_BATCH`` keys (one DEL of all
    of them held Redis 571 ms)."""
    slots = 100_000
    client = redis_server.client()
    key = redis_prefix + "rep-queue:requests"
    pipe = client.pipeline(transaction=False)
    for n in range(slots):
        pipe.zadd(f"{key}:q:o{n}.test", {b"request": 0})
        pipe.hset(f"{key}:meta:o{n}.test", "limit", 1)
        if n % 10 == 0:
            pipe.zadd(f"{key}:out:o{n}.test", {"token": 0})
        if n % 5000 == 4999:
            pipe.execute()
    # not due for a long while: nothing is popped before clear()
    pipe.zadd(f"{key}:slots", {f"o{n}.test": 1e18 for n in range(slots)})
    pipe.set(f"{key}:count", slots)
    pipe.execute()
    other = redis_prefix + "other"  # not the queue's: kept
    client.set(other, 1)
    client.config_resetstat()
    cleared: list[int] = []

    def clear(queue: RedisPoliteQueue) -> None:
        queue.clear()
        cleared.append(1)

    await crawl_queue(queue_settings(redis_server, redis_prefix), clear)
    assert cleared
    assert client.keys(key + "*") == []
    assert client.get(other) == b"1"
    stats = client.info("commandstats")
    assert "cmdstat_del" not in stats
    unlinked = stats["cmdstat_unlink"]
    keys = slots * 2 + slots // 10 + 3
    assert unlinked["calls"] >= keys / CLEAR_BATCH
    print(f"clear(): {unlinked['calls']} UNLINK, {unlinked['usec_per_call']:.0f} us each")
