"""Shared robots.txt state on a real Redis (REP_REDIS_URL), in one process.

Each ``run_crawl`` is a new crawler with an empty local cache: a worker that
knows only what Redis tells it. The multi-process tests are in
test_redis_cluster.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from types import ModuleType
from typing import Any

import pytest
import pytest_twisted
from clock_steps import until
from crawls import CrawlResult, run_crawl, sleep, stat_of
from redis_proxy import CuttingProxy
from redis_server import RedisServer, shared
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import Response
from servers import PAGE, Reply, ScriptedServer, gaps, refused_port
from twisted.internet.defer import Deferred, ensureDeferred, gatherResults

from scrapy_rep import ForbiddenByRobots, RobotsTxtUnavailable
from scrapy_rep.config import Config
from scrapy_rep.exceptions import InvalidSetting

pytestmark = pytest.mark.asyncio_only

ROBOTS = b"User-agent: *\nDisallow: /private\n"
RETRY_MIN = 600.0  # of scrapy-rep's clock: crawls in a row never reach it in real time
TTL = 600.0  # the same, for rules that expire between two crawls


def state(redis: RedisServer, prefix: str, site: ScriptedServer) -> dict[bytes, bytes]:
    """The origin's hash in Redis."""
    return state_of(redis, prefix, site.origin)


def state_of(redis: RedisServer, prefix: str, origin: str) -> dict[bytes, bytes]:
    result: dict[bytes, bytes] = redis.client().hgetall(f"{prefix}robots:{origin}")
    return result


@pytest_twisted.ensureDeferred
async def test_a_second_worker_uses_the_first_ones_robots_txt(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    site.robots(ROBOTS)
    settings = shared(redis_server, redis_prefix)
    first = await run_crawl([site.url("/a"), site.url("/private/a")], settings)
    second = await run_crawl([site.url("/b"), site.url("/private/b")], settings)
    assert site.hits("/robots.txt") == 1
    assert site.pages() == ["/a", "/b"]
    assert first.failed_with(site.url("/private/a")) is ForbiddenByRobots
    assert second.failed_with(site.url("/private/b")) is ForbiddenByRobots
    assert first.stats["rep/redis/robots/published"] == 1
    assert second.stats["rep/redis/robots/received"] == 1
    assert "rep/robotstxt/request_count" not in second.stats
    # What Redis holds: the body, not a parser object.
    stored = state(redis_server, redis_prefix, site)
    assert stored[b"body"] == ROBOTS
    assert json.loads(stored[b"meta"])["outcome"] == "parsed"


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_workers_running_together_fetch_once(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    """The first worker takes the origin's lock; the other waits for its result."""
    site.robots(ROBOTS, delay=1.0)
    settings = shared(redis_server, redis_prefix)
    results: list[CrawlResult] = await gatherResults(
        [
            Deferred.fromCoroutine(run_crawl([site.url(f"/{n}"), site.url("/private/x")], settings))
            for n in range(2)
        ]
    )
    assert site.hits("/robots.txt") == 1
    assert sorted(site.pages()) == ["/0", "/1"]
    assert sorted(r.stats.get("rep/redis/robots/waited", 0) for r in results) == [0, 1]
    assert all(r.failed_with(site.url("/private/x")) is ForbiddenByRobots for r in results)


@pytest_twisted.ensureDeferred
async def test_a_dead_workers_lock_expires(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    """A worker died holding the origin's fetch lock: the others wait until it
    expires, then one of them fetches. (The lock lasts until the test has seen
    the crawl wait on it, then expires: however slow the crawl's start.)"""
    site.robots(ROBOTS)
    client = redis_server.client()
    lock = f"{redis_prefix}robots-lock:{site.origin}"
    client.set(lock, "dead-worker", px=120_000)
    crawlers: list[Crawler] = []
    crawl = ensureDeferred(
        run_crawl([site.url("/a")], shared(redis_server, redis_prefix), before=crawlers.append)
    )
    try:
        await until(lambda: stat_of(crawlers, "rep/redis/robots/waited") == 1)
        await sleep(0.3)  # a poll or two more, the lock still held
        assert site.hits("/robots.txt") == 0
    finally:
        expired_at = time.time()
        client.pexpire(lock, 1)
    result = await crawl
    assert site.hits("/robots.txt") == 1
    assert site.log()[0].time >= expired_at
    assert site.pages() == ["/a"]
    assert result.stats["rep/redis/robots/waited"] == 1
    assert result.stats["rep/redis/robots/published"] == 1


@pytest.mark.parametrize(
    "meta",
    [
        b"not json",
        json.dumps({"outcome": "parsed", "rules": "bytecode"}).encode(),
        json.dumps({"outcome": "maybe", "rules": "none"}).encode(),
    ],
    ids=["not-json", "unknown-rules", "unknown-outcome"],
)
@pytest_twisted.ensureDeferred
async def test_unreadable_shared_state_is_fetched_again_and_overwritten(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str, meta: bytes
) -> None:
    """State another release (or a hand) wrote that this one cannot read: the
    worker fetches robots.txt itself, obeys it, and shares what it read."""
    site.robots(ROBOTS)
    key = f"{redis_prefix}robots:{site.origin}"
    redis_server.client().hset(key, mapping={"meta": meta, "body": b"garbage"})
    result = await run_crawl(
        [site.url("/a"), site.url("/private/a")], shared(redis_server, redis_prefix)
    )
    assert site.hits("/robots.txt") == 1
    assert site.pages() == ["/a"]
    assert result.failed_with(site.url("/private/a")) is ForbiddenByRobots
    assert result.stats["rep/redis/robots/published"] == 1
    assert json.loads(state(redis_server, redis_prefix, site)[b"meta"])["outcome"] == "parsed"


@pytest_twisted.ensureDeferred
async def test_unreachable_robots_txt_is_shared_with_its_backoff(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str, rep_clock: ModuleType
) -> None:
    """(The retry time is scrapy-rep's clock's: the second worker comes before
    it however slow the machine, and the test moves the clock past it.)"""
    site.script("/robots.txt", Reply(status=503))
    settings = shared(redis_server, redis_prefix, REP_RETRY_MIN=RETRY_MIN)
    first = await run_crawl([site.url("/a")], settings)
    second = await run_crawl([site.url("/b")], settings)
    assert site.hits("/robots.txt") == 1  # the second worker backs off too
    assert site.pages() == []
    assert first.failed_with(site.url("/a")) is RobotsTxtUnavailable
    assert second.failed_with(site.url("/b")) is RobotsTxtUnavailable
    assert second.stats["rep/redis/robots/received"] == 1

    rep_clock.advance(RETRY_MIN + 1)  # retry time: the next worker fetches, counting on
    third = await run_crawl([site.url("/c")], settings)
    assert site.hits("/robots.txt") == 2
    assert third.failed_with(site.url("/c")) is RobotsTxtUnavailable
    assert json.loads(state(redis_server, redis_prefix, site)[b"meta"])["failures"] == 2


@pytest_twisted.ensureDeferred
async def test_last_good_rules_served_by_every_worker_while_unreachable(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str, rep_clock: ModuleType
) -> None:
    """stale-if-error across workers: the worker whose refresh fails keeps the
    rules another worker fetched, and so does the next worker."""
    site.script(
        "/robots.txt", [Reply(body=ROBOTS, headers={"Content-Type": "text/plain"}), Reply(503)]
    )
    settings = shared(redis_server, redis_prefix, REP_CACHE_TTL=TTL, REP_CACHE_MIN_TTL=0)
    await run_crawl([site.url("/a")], settings)
    rep_clock.advance(TTL + 1)  # the shared rules have expired
    refreshing = await run_crawl([site.url("/b"), site.url("/private/b")], settings)
    later = await run_crawl([site.url("/c"), site.url("/private/c")], settings)
    assert site.hits("/robots.txt") == 2
    assert site.pages() == ["/a", "/b", "/c"]
    assert refreshing.failed_with(site.url("/private/b")) is ForbiddenByRobots
    assert refreshing.stats["rep/robotstxt/stale_served"] == 1
    assert later.failed_with(site.url("/private/c")) is ForbiddenByRobots
    assert later.stats["rep/redis/robots/received"] == 1


@pytest_twisted.ensureDeferred
async def test_body_capped_at_max_size_and_cut_at_the_same_line(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    body = b"User-agent: *\nDisallow: /a\n" + b"# padding\n" * 20 + b"Disallow: /b\n"
    site.robots(body)
    settings = shared(redis_server, redis_prefix, REP_MAX_SIZE=100)
    first = await run_crawl([site.url("/a"), site.url("/b")], settings)
    second = await run_crawl([site.url("/a"), site.url("/b")], settings)
    for result in (first, second):
        assert result.failed_with(site.url("/a")) is ForbiddenByRobots
        assert site.url("/b") in result.responses  # its rule lies past REP_MAX_SIZE
    assert second.stats["rep/robotstxt/truncated"] == 1
    assert len(state(redis_server, redis_prefix, site)[b"body"]) == 101


@pytest_twisted.ensureDeferred
async def test_every_key_under_the_prefix_with_a_ttl(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    site.robots(ROBOTS + b"Crawl-delay: 0.2\n")
    settings = shared(redis_server, redis_prefix, REP_CACHE_TTL=600, REP_REDIS_KEEP=60)
    await run_crawl([site.url("/a"), site.url("/b")], settings)
    client = redis_server.client()
    keys = sorted(client.keys(redis_prefix + "*"))
    assert keys == [
        f"{redis_prefix}delay:127.0.0.1".encode(),
        f"{redis_prefix}robots:{site.origin}".encode(),
    ]
    assert 0 < client.pttl(keys[0]) <= 1_200  # the next free time, 1 s after it at most
    assert 600_000 < client.pttl(keys[1]) <= 660_000  # freshness + REP_REDIS_KEEP


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_redis_down_from_the_start(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    site.robots(ROBOTS + b"Crawl-delay: 0.5\n")
    settings = {"REP_REDIS_URL": f"redis://127.0.0.1:{refused_port()}/0"}
    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        result = await run_crawl(
            [site.url("/a"), site.url("/b"), site.url("/c"), site.url("/private/d")], settings
        )
    assert site.hits("/robots.txt") == 1
    assert sorted(site.pages()) == ["/a", "/b", "/c"]
    assert result.failed_with(site.url("/private/d")) is ForbiddenByRobots
    warnings = [r.getMessage() for r in caplog.records if "Redis" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "unavailable" in warnings[0], warnings
    assert result.stats["rep/redis/outages"] == 1
    # The local Crawl-delay between pages. (robots.txt -> first page is spaced by
    # the slot from when robots.txt left, so its arrival, on a fresh connection,
    # may come late by the connection set-up: measured at the server it is shorter.)
    assert min(gaps(site.page_hits())) >= 0.45, gaps(site.page_hits())


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_redis_too_slow_to_answer(
    site: ScriptedServer,
    own_redis: RedisServer,
    redis_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A frozen Redis (SIGSTOP: connections are accepted, nothing answers):
    the worker times out once and carries on with its own state."""
    site.robots(ROBOTS + b"Crawl-delay: 0.3\n")
    assert own_redis.process is not None
    os.kill(own_redis.process.pid, signal.SIGSTOP)
    try:
        with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
            result = await run_crawl(
                [site.url("/a"), site.url("/b"), site.url("/private/c")],
                shared(own_redis, redis_prefix, REP_REDIS_TIMEOUT=0.3),
            )
    finally:
        os.kill(own_redis.process.pid, signal.SIGCONT)
    assert site.hits("/robots.txt") == 1
    assert sorted(site.pages()) == ["/a", "/b"]
    assert result.failed_with(site.url("/private/c")) is ForbiddenByRobots
    warnings = [r.getMessage() for r in caplog.records if "Redis" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "Timeout" in warnings[0], warnings
    assert result.stats["rep/redis/delay/local"] == 2


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_back_to_shared_state_when_redis_returns(
    site: ScriptedServer,
    site2: ScriptedServer,
    own_redis: RedisServer,
    redis_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis is down when the crawl starts and back a moment later: origins
    met after that are shared again."""
    site.robots(ROBOTS)
    site2.robots(ROBOTS)
    own_redis.stop()

    pages_asked: list[str] = []

    def back_with_the_first_page(number: int) -> Reply:
        # Redis returns while the first page is asked for: the worker met it
        # down for site's robots.txt, and meets site2 only after its retry
        # pause (0.3 s) and two more pages (each at least 0.25 s, DOWNLOAD_DELAY
        # 0.5 s with Scrapy's jitter) have gone by.
        pages_asked.append("page")
        if len(pages_asked) == 1:
            own_redis.start()
        return Reply(body=PAGE)

    for i in range(3):
        site.script(f"/a{i}", back_with_the_first_page)
    answered: list[str] = []

    def then_site2(response: Response) -> list[Request]:
        answered.append(response.url)
        return [Request(site2.url("/x"))] if len(answered) == 3 else []

    settings = shared(own_redis, redis_prefix, REP_REDIS_RETRY=0.3, DOWNLOAD_DELAY=0.5)
    with caplog.at_level(logging.INFO, logger="scrapy_rep"):
        urls = [site.url(f"/a{i}") for i in range(3)]
        result = await run_crawl(urls, settings, follow=then_site2)
    assert len(result.responses) == 4
    assert result.stats["rep/redis/outages"] == 1
    assert any("answers again" in r.getMessage() for r in caplog.records)
    assert state(own_redis, redis_prefix, site) == {}  # fetched while Redis was down
    assert state(own_redis, redis_prefix, site2)[b"body"] == ROBOTS


@pytest_twisted.ensureDeferred
async def test_rules_fetched_in_an_outage_reach_redis_once_it_answers(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """A worker holds an origin's fetch lock, and cannot reach Redis when its
    download ends: once Redis answers it again, it publishes the rules, and
    another worker waiting on the lock gets them without waiting for the lock
    to lapse (REP_FETCH_TIMEOUT + 5 s; 605 s here, out of reach of the test's
    60 s) to fetch the file again."""
    from urllib.parse import urlparse

    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_rep.cluster.link import RedisLink
    from scrapy_rep.cluster.rules import RedisRulesCache
    from scrapy_rep.origin import origin_of
    from scrapy_rep.policy import PARSED, Entry
    from scrapy_rep.robotstxt import RobotsTxt

    origin = origin_of(urlparse("http://a.test/"))
    assert origin is not None
    proxy = CuttingProxy(redis_server.port, "0" * 40, lambda _: False)

    def worker(url: str) -> RedisRulesCache:
        settings = {
            "REP_REDIS_URL": url,
            "REP_REDIS_PREFIX": redis_prefix,
            "REP_REDIS_RETRY": 1.0,
            "REP_FETCH_TIMEOUT": 600.0,
            "REP_FETCH_RETRIES": 0,
        }
        crawler = get_crawler(Spider, settings)
        crawler.stats.open_spider()
        config = Config.from_settings(crawler.settings)
        return RedisRulesCache(RedisLink(config, crawler.stats), config, crawler.stats)

    async def sleep_on(seconds: float) -> bool:
        await asyncio.sleep(seconds)
        return True

    async def fetched_in_an_outage() -> None:
        fetcher, other = worker(proxy.url), worker(redis_server.url)
        try:
            assert not (await fetcher.claim(origin, sleep_on)).fresh  # the lock: it fetches
            proxy.fail(down=600)
            now = time.time()
            entry = Entry(RobotsTxt.parse(ROBOTS), PARSED, now + 600, now, url=origin.robots_url)
            await fetcher.publish(origin, entry, ROBOTS)  # Redis unreachable: not taken
            assert state_of(redis_server, redis_prefix, origin.text) == {}
            waiting = asyncio.ensure_future(other.claim(origin, sleep_on))
            await asyncio.sleep(0.5)
            assert not waiting.done()  # the other worker waits on the lock
            proxy.restore()
            claim = await asyncio.wait_for(waiting, 60)
            assert claim.fresh
            assert claim.entry is not None
            assert claim.entry.robots is not None
            assert not claim.entry.robots.allowed("/private", user_agent="ExampleBot")
        finally:
            for rules in (fetcher, other):
                rules.close()
                await rules.link.close()
            proxy.close()

    await Deferred.fromFuture(asyncio.ensure_future(fetched_in_an_outage()))


# -- settings --------------------------------------------------------------------------------------


def test_redis_settings_defaults_and_scrapy_redis_fallback() -> None:
    config = Config.from_settings({})
    assert config.redis_url is None
    assert (config.redis_robots, config.redis_delay, config.redis_prefix) == (True, True, "rep:")
    assert (config.redis_timeout, config.redis_retry, config.redis_keep) == (1, 30, 86_400)
    assert Config.from_settings({"REDIS_URL": "redis://h:1/2"}).redis_url == "redis://h:1/2"
    both = {"REDIS_URL": "redis://h:1/2", "REP_REDIS_URL": "redis://other:3/0"}
    assert Config.from_settings(both).redis_url == "redis://other:3/0"


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("REP_REDIS_URL", "localhost:6379"),
        ("REP_REDIS_URL", 6379),
        ("REDIS_URL", "http://localhost"),
        ("REP_REDIS_PREFIX", ""),
        ("REP_REDIS_PREFIX", 5),
        ("REP_REDIS_TIMEOUT", 0),
        ("REP_REDIS_RETRY", -1),
        ("REP_REDIS_KEEP", "long"),
        ("REP_REDIS_ROBOTS", "perhaps"),
    ],
)
def test_invalid_redis_settings_are_named(setting: str, value: Any) -> None:
    with pytest.raises(InvalidSetting, match=setting):
        Config.from_settings({setting: value})


@pytest_twisted.ensureDeferred
async def test_workers_revalidate_the_shared_robots_txt_with_its_etag(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str, rep_clock: ModuleType
) -> None:
    """The validators travel with the shared state: once it expired, the next
    worker asks with If-None-Match, and on a 304 Redis keeps the body, fresh
    again, for the worker after it (which asks nothing)."""
    etag = '"v1"'

    headers = {"ETag": etag, "Cache-Control": f"max-age={TTL:g}"}  # of scrapy-rep's clock
    not_modified = Reply(status=304, headers=headers)
    site.script(
        "/robots.txt", Reply(body=ROBOTS, headers=headers, if_none_match=(etag, not_modified))
    )
    settings = {**shared(redis_server, redis_prefix), "REP_CACHE_MIN_TTL": 0}
    await run_crawl([site.url("/a")], settings)
    rep_clock.advance(TTL + 1)
    second = await run_crawl([site.url("/private/b")], settings)
    third = await run_crawl([site.url("/private/c")], settings)
    robots = [hit for hit in site.log() if hit.path == "/robots.txt"]
    assert [hit.headers.get("If-None-Match") for hit in robots] == [None, etag]
    assert second.stats["rep/robotstxt/not_modified"] == 1
    assert second.failed_with(site.url("/private/b")) is ForbiddenByRobots
    assert third.stats["rep/redis/robots/received"] == 1
    assert third.failed_with(site.url("/private/c")) is ForbiddenByRobots
    assert state(redis_server, redis_prefix, site)[b"body"] == ROBOTS
