"""Slow-down pauses shared through a real Redis (REP_REDIS_URL, REP_REDIS_SLOWDOWN).

The workers of the first test are real Scrapy processes (tests/_redis_worker.py),
each request carrying the header ``X-Worker``; the others run one crawl here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from types import ModuleType
from typing import Any

import pytest
import pytest_twisted
import redis_workers
from clock_steps import PauseSteps, settle, until
from crawls import run_crawl, stat_of
from redis_proxy import CuttingProxy
from redis_server import RedisServer, shared
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.test import get_crawler
from scrapy_forks import Process
from servers import PAGE, Gate, InTurn, Reply, ScriptedServer, gaps
from test_redis_cluster import START_DEADLINE
from test_slowdown import IN_FLIGHT, RETRYING, TOLERANCE, SlowSite, inside_pauses
from twisted.internet.defer import Deferred, ensureDeferred

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only]  # real-time pauses, worker subprocesses


def start_worker(name: str, urls: list[str], settings: dict[str, Any]) -> Process:
    config = {"name": name, "urls": urls, "settings": settings}
    config["scrapy_redis"] = "SCHEDULER_QUEUE_CLASS" in settings  # the Redis queue
    return redis_workers.start_worker(config)


def report_of(worker: Process, timeout: float = 60) -> dict[str, Any]:
    out, err = worker.communicate(timeout=timeout)
    assert worker.returncode == 0, err[-3000:]
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    report["log"] = err
    assert report["finish_reason"] == "finished", err[-3000:]
    return report


def wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


BUSY_START = 1.0
"""Seconds a loaded machine may take from a worker's spider_opened to its
slow-down subscription reading Redis's running pauses."""


def test_a_429_seen_by_one_worker_pauses_the_others(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    """B crawls steadily; A's first page is answered 429 + Retry-After: 4; C
    starts during that pause. No request of any worker arrives inside it.

    B sends one page at a time, and its fourth waits at the site for A's 429
    (A starts once that page is there, whatever the machine's speed): B has
    that page in flight when the pause begins, gets its answer DOWNLOAD_DELAY later (when
    its next page would have gone, crawling steadily), and has its last four
    still to send. (Before, B crawled 40 pages so as to outlast A's start and
    the pause, and went on 5 s after it.)"""
    paused = Gate()
    site.script(
        "/a0", [Reply(status=429, headers={"Retry-After": "4"}, opens=paused), Reply(body=PAGE)]
    )
    step = 0.2  # B's DOWNLOAD_DELAY
    # B's fourth request, whichever page Scrapy's scheduler took fourth
    fourth = Reply(body=PAGE, wait_for=paused, wait_timeout=START_DEADLINE, delay=step)
    b_page = InTurn(Reply(body=PAGE), Reply(body=PAGE), Reply(body=PAGE), fourth, Reply(body=PAGE))
    for i in range(8):
        site.script(f"/b{i}", b_page)
    settings = shared(redis_server, redis_prefix, **RETRYING, DOWNLOAD_DELAY=step)
    one_at_a_time = {
        **settings,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_TIMEOUT": START_DEADLINE + 30,  # the fourth page's wait
    }
    b = start_worker("b", [site.url(f"/b{i}") for i in range(8)], one_at_a_time)
    wait_for(lambda: len(site.page_hits("/b")) >= 4)
    a = start_worker("a", [site.url(f"/a{i}") for i in range(3)], settings)
    wait_for(paused.is_set)
    answered = [hit.arrived for hit in site.log() if hit.path == "/a0"]  # A's 429
    c = start_worker("c", [site.url(f"/c{i}") for i in range(3)], settings)
    reports = {name: report_of(worker) for name, worker in (("a", a), ("b", b), ("c", c))}

    start, end = answered[0] + IN_FLIGHT, answered[0] + 4 - TOLERANCE
    inside = [(h.path, round(h.time - answered[0], 3)) for h in site.log() if start < h.time < end]
    assert inside == []
    assert len(site.page_hits("/b")) == 8
    b_sends = [(h.path, round(h.time - answered[0], 3)) for h in site.page_hits("/b")]
    assert [t > 0 for _, t in b_sends] == [False] * 4 + [True] * 4, b_sends  # 4 to send in it
    for name, count in (("a", 3), ("b", 8), ("c", 3)):
        assert len(reports[name]["responses"]) == count
        assert reports[name]["failures"] == {}
    stats = {name: report["stats"] for name, report in reports.items()}
    assert stats["a"]["rep/slowdown/pauses"] == 1
    assert stats["a"]["rep/slowdown/redis/published"] == 1
    assert stats["b"]["rep/slowdown/redis/received"] == 1
    assert stats["b"]["rep/slowdown/pauses/cluster"] == 1
    assert "paused by another worker for 4.0 s" in reports["b"]["log"]
    # C learnt the pause from Redis's set of running pauses when it subscribed
    # (unless a loaded machine started it only as the pause ended)
    if reports["c"]["opened"] < end - BUSY_START:
        assert stats["c"]["rep/slowdown/pauses/cluster"] == 1
    assert min(h.time for h in site.page_hits("/c")) >= end
    # a good answer after the pause reset the backoff level for the cluster
    assert redis_server.client().keys(f"{redis_prefix}slowdown:*") == []


@pytest_twisted.ensureDeferred
async def test_crawl_delay_paced_through_redis_waits_for_the_pause(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    """A slot paced cluster-wide (Crawl-delay) reserves no turn during a pause,
    and its Crawl-delay holds again afterwards."""
    site.robots("User-agent: *\nCrawl-delay: 0.5\n")
    slow = SlowSite(site, window=0.3, retry_after=lambda now: ("2", 2.0))
    urls = slow.pages(4)
    result = await run_crawl(urls, shared(redis_server, redis_prefix, **RETRYING))

    assert sorted(result.responses) == sorted(urls)
    assert inside_pauses(site.log(), slow.slow_answers(), result=result) == []
    assert min(gaps(site.log())) >= 0.5 - TOLERANCE
    assert result.stats["rep/slowdown/redis/published"] == 1
    assert result.stats["rep/redis/delay/paced"] >= 4


@pytest_twisted.ensureDeferred
async def test_redis_down_each_worker_pauses_on_its_own(
    site: ScriptedServer,
    own_redis: RedisServer,
    redis_prefix: str,
    caplog: pytest.LogCaptureFixture,
    rep_clock: ModuleType,
) -> None:
    """(The pauses run on scrapy-rep's clock, stepped over by PauseSteps: the
    probe after the first pause meets the site's 503s, however slow the machine.)"""
    caplog.set_level(logging.INFO, logger="scrapy_rep")
    own_redis.stop()
    slow = SlowSite(site, window=150, retry_after=lambda now: ("100", 100.0))
    urls = slow.pages(3)
    with PauseSteps(rep_clock):
        result = await run_crawl(urls, shared(own_redis, redis_prefix, **RETRYING))

    assert sorted(result.responses) == sorted(urls)
    assert inside_pauses(site.page_hits(), slow.slow_answers(), result=result) == []
    assert result.stats["rep/slowdown/pauses"] == 2
    assert result.stats["rep/slowdown/redis/local"] >= 2
    unshared = [
        r for r in caplog.records if r.levelno == logging.WARNING and "holds for this" in r.message
    ]
    assert len(unshared) == 1


def test_the_running_pauses_are_bounded_in_redis(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """Every key the pauses write expires; the set of running pauses is pruned."""
    from scrapy_rep.cluster.pauses import _PAUSE

    client = redis_server.client()
    pause = client.register_script(_PAUSE)
    keys = [f"{redis_prefix}slowdown:s", f"{redis_prefix}pauses", f"{redis_prefix}delay:s"]
    args = ["s", -1, 100_000, 300_000, 60_000, f"{redis_prefix}slowdown", "me", "http://s"]
    first = pause(keys=keys, args=args)
    assert first[1:] == [1, 1]
    assert 99_000 < first[0] <= 100_000
    again = pause(keys=keys, args=args)  # during the pause: not doubled, not published
    assert again[1:] == [1, 0]
    for key in keys:
        assert 0 < client.pttl(key) <= 61_000 + 1_000
    assert int(client.get(keys[2])) >= int(client.hget(keys[0], "until"))
    threading.Event().wait(0.15)
    doubled = pause(keys=keys, args=args)  # after it: the next level, 200 ms
    assert doubled[1:] == [2, 1]
    assert 190_000 < doubled[0] <= 200_000
    threading.Event().wait(0.25)
    other = [f"{redis_prefix}slowdown:t", keys[1], f"{redis_prefix}delay:t"]
    pause(keys=other, args=["t", *args[1:]])
    assert client.zrange(keys[1], 0, -1) == [b"t"]  # "s" ended: pruned


CAP = 100.0  # REP_SLOWDOWN_MAX_DELAY, of scrapy-rep's clock: the test steps over it


@pytest_twisted.ensureDeferred
async def test_what_other_workers_publish_cannot_pause_longer_than_the_cap(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str, rep_clock: ModuleType
) -> None:
    """A message on the channel is read with care: garbage is skipped, a pause
    of years is cut to REP_SLOWDOWN_MAX_DELAY. (The pause runs on scrapy-rep's
    clock: 1 s before the cap /second has not come, and once the clock is past
    the cap it comes; a pause of years would never end.)"""
    channel = f"{redis_prefix}slowdown"
    years = json.dumps({"slot": "127.0.0.1", "left": 10**17, "level": 1, "by": "x"})
    received = Gate()  # /meanwhile answers once the crawl has read the messages
    site.script("/meanwhile", Reply(body=PAGE, wait_for=received, wait_timeout=60))

    def publish(response: Response) -> list[Request]:
        if response.url == site.url("/first"):
            client = redis_server.client()
            client.publish(channel, b"\xff not json")
            client.publish(channel, json.dumps({"slot": "127.0.0.1"}))
            client.publish(channel, years)
            meanwhile = {"download_slot": "meanwhile"}
            return [Request(site.url("/meanwhile"), dont_filter=True, meta=meanwhile)]
        if response.url == site.url("/meanwhile"):
            return [Request(site.url("/second"), dont_filter=True)]
        return []

    crawlers: list[Crawler] = []
    crawl = ensureDeferred(
        run_crawl(
            [site.url("/first")],
            shared(redis_server, redis_prefix, REP_SLOWDOWN_MAX_DELAY=CAP),
            follow=publish,
            before=crawlers.append,
        )
    )
    try:
        await until(lambda: stat_of(crawlers, "rep/slowdown/pauses/cluster") == 1)
        seen = rep_clock.now()  # the pause began before this, at most CAP ago
    finally:
        received.set()
    await until(lambda: site.hits("/meanwhile") == 1)
    [first] = site.page_hits("/first")
    rep_clock.advance(max(first.time + CAP - 1 - rep_clock.now(), 0.0))  # 1 s before the cap
    await settle()
    assert site.hits("/second") == 0
    rep_clock.advance(max(seen + CAP + 1 - rep_clock.now(), 0.0))  # past the cap
    result = await crawl
    assert len(result.responses) == 3
    first, _, second = site.page_hits()
    assert second.time - first.time >= CAP - TOLERANCE
    assert result.stats["rep/slowdown/redis/received"] == 1
    assert result.stats["rep/slowdown/pauses/cluster"] == 1


@pytest_twisted.ensureDeferred
async def test_a_probes_good_answer_sent_in_an_outage_reaches_redis_once_it_answers(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """A worker claims the probe of a shared pause, and its probe is answered
    well while that worker cannot reach Redis: once Redis answers it again,
    the good answer clears the pause, and the other workers go on without
    waiting for the claim to lapse (DOWNLOAD_TIMEOUT + 10 s; 600 s here, out
    of reach of the test's 60 s)."""
    from scrapy_rep.cluster.link import RedisLink
    from scrapy_rep.cluster.pauses import ClusterPauses
    from scrapy_rep.config import Config

    slot, bound = "s.test", 600.0
    proxy = CuttingProxy(redis_server.port, "0" * 40, lambda _: False)
    client = redis_server.client()
    seconds, micros = client.time()
    client.hset(f"{redis_prefix}slowdown:{slot}", "until", (seconds - 1) * 1_000_000 + micros)

    def worker(url: str) -> ClusterPauses:
        settings = {"REP_REDIS_URL": url, "REP_REDIS_PREFIX": redis_prefix, "REP_REDIS_RETRY": 1.0}
        crawler = get_crawler(Spider, settings)
        crawler.stats.open_spider()
        config = Config.from_settings(crawler.settings)
        return ClusterPauses(RedisLink(config, crawler.stats), config, crawler.stats)

    async def probe_answered_in_an_outage() -> None:
        prober, other = worker(proxy.url), worker(redis_server.url)
        try:
            assert await prober.claim_probe(slot, bound) == 0  # the pause ended: it probes
            assert await other.claim_probe(slot, bound) > bound - 60  # the others wait
            proxy.fail(down=600)
            prober.resume(slot)  # its probe was answered well
            await asyncio.sleep(0.5)
            assert await other.claim_probe(slot, bound) > bound - 60  # not in Redis yet
            proxy.restore()
            deadline = time.monotonic() + 60
            while await other.claim_probe(slot, bound) > 0:
                assert time.monotonic() < deadline, "the probe's good answer never reached Redis"
                await asyncio.sleep(0.1)
        finally:
            for pauses in (prober, other):
                pauses.close()
                await pauses.link.close()
            proxy.close()

    await Deferred.fromFuture(asyncio.ensure_future(probe_answered_in_an_outage()))
    assert client.exists(f"{redis_prefix}slowdown:{slot}") == 0
