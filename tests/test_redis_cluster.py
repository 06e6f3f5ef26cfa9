"""Many real Scrapy processes sharing one real Redis (REP_REDIS_URL).

Each worker is a process of its own running tests/_redis_worker.py (forked:
redis_workers.py); the site is a
real local HTTP server recording every hit with its time and the worker that
sent it (header ``X-Worker``). Origin A asks for ``Crawl-delay: 1``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from redis_server import RedisServer
from redis_workers import start_worker
from scrapy_forks import Process
from servers import PAGE, Await, Gate, Raw, Reply, ScriptedServer, gaps

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free]  # worker subprocesses

DELAYED = b"User-agent: *\nDisallow: /private\nCrawl-delay: 1\n"
UNDELAYED = b"User-agent: *\nDisallow: /private\n"
TOLERANCE = 0.05  # seconds: clock and scheduling jitter between processes
START_DEADLINE = 120.0
"""Seconds the test waits for every worker to send its first page: three
Scrapy processes took 27 s to start with two suites at once on two cores."""


def start_workers(configs: list[dict[str, Any]]) -> list[Process]:
    return [start_worker(config) for config in configs]


def finish(workers: list[Process], timeout: float = 60) -> list[dict[str, Any]]:
    """Each worker's JSON report (and its log, under "log"), once all have exited."""
    reports = []
    for worker in workers:
        out, err = worker.communicate(timeout=timeout)
        assert worker.returncode == 0, err[-3000:]
        report = json.loads(out.strip().splitlines()[-1])
        report["log"] = err
        assert report["finish_reason"] == "finished", err[-3000:]
        reports.append(report)
    return reports


def worker_settings(redis: RedisServer, prefix: str, **extra: Any) -> dict[str, Any]:
    return {"REP_REDIS_URL": redis.url, "REP_REDIS_PREFIX": prefix, **extra}


def test_three_workers_fetch_robots_once_and_space_requests_cluster_wide(
    make_site: Callable[[], ScriptedServer], redis_server: RedisServer, redis_prefix: str
) -> None:
    """Each worker has its own pages on A (Crawl-delay: 1) and on B (none);
    robots.txt answers slowly, so all three want it at once."""
    delayed, undelayed = make_site(), make_site()
    delayed.robots(DELAYED, delay=0.5)
    undelayed.robots(UNDELAYED, delay=0.5)
    configs = []
    for n in range(3):
        urls = [delayed.url(f"/w{n}/page{i}") for i in range(3)]
        urls += [delayed.url(f"/private/w{n}"), undelayed.url(f"/private/w{n}")]
        urls += [undelayed.url(f"/w{n}/page{i}") for i in range(10)]
        configs.append(
            {"name": f"w{n}", "urls": urls, "settings": worker_settings(redis_server, redis_prefix)}
        )
    reports = finish(start_workers(configs))

    assert delayed.hits("/robots.txt") == 1
    assert undelayed.hits("/robots.txt") == 1
    assert sum(r["stats"].get("rep/robotstxt/request_count", 0) for r in reports) == 2
    assert sum(r["stats"].get("rep/redis/robots/received", 0) for r in reports) >= 2
    for site in (delayed, undelayed):
        assert not [hit for hit in site.log() if hit.path.startswith("/private")]
        paths = [hit.path for hit in site.page_hits()]
        assert len(paths) == len(set(paths))  # nothing fetched twice
    assert len(delayed.page_hits()) == 9
    assert len(undelayed.page_hits()) == 30

    # Every request to A, robots.txt included, at least 1 s after the one before,
    # whichever worker sent them; and all three workers did send some.
    spacing = gaps(delayed.log())
    assert min(spacing) >= 1 - TOLERANCE, spacing
    assert {hit.headers.get("X-Worker") for hit in delayed.page_hits()} == {"w0", "w1", "w2"}

    for report, config in zip(reports, configs, strict=True):
        fetched = set(report["responses"])
        dropped = report["failures"]
        assert set(dropped.values()) == {"ForbiddenByRobots"}
        assert fetched | set(dropped) == set(config["urls"])
        assert report["stats"]["rep/redis/delay/paced"] == 3


def test_scrapy_redis_scheduler_and_dupefilter_unchanged(
    make_site: Callable[[], ScriptedServer], redis_server: RedisServer, redis_prefix: str
) -> None:
    """Three workers on scrapy-redis's shared queue, all starting from the
    same URLs: the dupefilter lets each page through once, anywhere in the
    cluster, and scrapy-rep still fetches robots.txt once and spaces A's pages."""
    delayed, undelayed = make_site(), make_site()
    delayed.robots(DELAYED, delay=0.3)
    undelayed.robots(UNDELAYED, delay=0.3)
    urls = [delayed.url(f"/page{i}") for i in range(6)] + [delayed.url("/private/x")]
    urls += [undelayed.url(f"/page{i}") for i in range(12)]
    settings = worker_settings(
        redis_server,
        redis_prefix,
        REDIS_URL=redis_server.url,
        SCHEDULER_QUEUE_KEY=redis_prefix + "%(spider)s:requests",
        SCHEDULER_DUPEFILTER_KEY=redis_prefix + "%(spider)s:dupefilter",
    )
    configs = [
        {"name": f"w{n}", "urls": urls, "settings": settings, "scrapy_redis": True}
        for n in range(3)
    ]
    reports = finish(start_workers(configs))

    assert delayed.hits("/robots.txt") == 1
    assert undelayed.hits("/robots.txt") == 1
    assert delayed.hits("/private/x") == 0
    for site, count in ((delayed, 6), (undelayed, 12)):
        paths = [hit.path for hit in site.page_hits()]
        assert sorted(paths) == sorted(f"/page{i}" for i in range(count))
    spacing = gaps(delayed.log())
    assert min(spacing) >= 1 - TOLERANCE, spacing
    responses = [url for report in reports for url in report["responses"]]
    assert sorted(responses) == sorted(u for u in urls if "/private/" not in u)


def test_killing_redis_mid_crawl_loses_no_request(
    site: ScriptedServer, own_redis: RedisServer, redis_prefix: str
) -> None:
    """Redis dies once every worker has the rules (its first page sent): every
    worker warns once, goes on with its own state (its own rules, fetched
    nowhere again, and its own 1 s Crawl-delay), and fetches or accounts for
    every page. (A worker that a loaded machine starts only after Redis died
    has no rules and rightly fetches robots.txt: three fetches were seen so.)"""
    site.robots(DELAYED)
    redis_gone = Gate()
    # Headers at once (the turn's hold ends), the body once Redis is gone:
    # with one request at a time, a worker's later pages meet the outage
    # however late the others started.
    answer_once_redis_is_gone = Reply(
        raw=Raw(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n",
            b"Content-Length: %d\r\n\r\n" % len(PAGE),
            Await(redis_gone, START_DEADLINE),
            PAGE,
        )
    )

    for n in range(3):
        site.script(f"/w{n}/page1", answer_once_redis_is_gone)
    settings = worker_settings(
        own_redis,
        redis_prefix,
        CONCURRENT_REQUESTS_PER_DOMAIN=1,
        DOWNLOAD_TIMEOUT=START_DEADLINE + 30,
    )
    configs = [
        {
            "name": f"w{n}",
            "urls": [site.url(f"/w{n}/page{i}") for i in range(4)],
            "settings": settings,
        }
        for n in range(3)
    ]
    workers = start_workers(configs)
    killed_after = -1
    first_pages = {f"/w{n}/page0" for n in range(3)}

    def kill_when_every_worker_sent_a_page() -> None:
        nonlocal killed_after
        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            hits = site.page_hits()
            if first_pages <= {hit.path for hit in hits}:
                killed_after = len(hits)
                own_redis.stop()
                break
            time.sleep(0.02)
        redis_gone.set()

    killer = threading.Thread(target=kill_when_every_worker_sent_a_page)
    killer.start()
    try:
        reports = finish(workers, timeout=2 * START_DEADLINE)
    finally:
        redis_gone.set()
        killer.join()

    assert 3 <= killed_after < 12, "Redis was not killed mid-crawl"
    assert site.hits("/robots.txt") == 1
    paths = [hit.path for hit in site.page_hits()]
    assert sorted(paths) == sorted(url.split(site.origin)[1] for c in configs for url in c["urls"])
    for report, config in zip(reports, configs, strict=True):
        assert sorted(report["responses"]) == sorted(config["urls"])
        assert report["failures"] == {}
        assert report["log"].count("unavailable") == 1, report["log"][-3000:]
        assert report["stats"]["rep/redis/outages"] == 1
        # On its own state, each worker still keeps 1 s between its requests.
        mine = [hit for hit in site.page_hits() if hit.headers.get("X-Worker") == report["name"]]
        assert min(gaps(mine)) >= 1 - TOLERANCE


def test_other_reactors_warn_and_keep_state_local(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str
) -> None:
    site.robots(DELAYED)
    settings = worker_settings(
        redis_server,
        redis_prefix,
        TWISTED_REACTOR="twisted.internet.selectreactor.SelectReactor",
    )
    urls = [site.url("/a"), site.url("/b"), site.url("/private/c")]
    (report,) = finish(start_workers([{"name": "w0", "urls": urls, "settings": settings}]))
    assert "is not the asyncio one" in report["log"]
    assert sorted(report["responses"]) == urls[:2]
    assert report["failures"] == {urls[2]: "ForbiddenByRobots"}
    assert "rep/redis/calls" not in report["stats"]
    assert redis_server.client().keys(redis_prefix + "*") == []
    assert min(gaps(site.page_hits())) >= 1 - TOLERANCE  # the local Crawl-delay
