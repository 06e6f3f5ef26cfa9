"""RobotsTxtMiddleware: waiting for robots.txt, freshness, REP_UNREACHABLE = defer.

Real crawls against real local servers (on Twisted's epoll reactor too:
make pytest-twisted runs them on it).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted
from clock_steps import settle, until
from crawls import run_crawl, stat_of
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.defer import deferred_from_coro
from servers import PAGE, Gate, Reply, ScriptedServer
from twisted.internet.defer import ensureDeferred

from scrapy_rep import ForbiddenByRobots, RobotsTxtUnavailable
from scrapy_rep._slots import waiting_problems

ROBOTS = b"User-agent: *\nDisallow: /private\n"


def private_pages(site: ScriptedServer, count: int) -> list[str]:
    return [site.url(f"/private/{i}") for i in range(count)]


# -- one fetch, every waiter gets the verdict ------------------------------------------------------


@pytest.mark.parametrize("max_waiting", [256, 0])
@pytest_twisted.ensureDeferred
async def test_40_concurrent_waiters_all_get_the_verdict(
    site: ScriptedServer, max_waiting: int
) -> None:
    """Scrapy 2.19's own middleware let 38 of these 40 through."""
    site.script("/robots.txt", Reply(body=ROBOTS, delay=0.3))
    result = await run_crawl(
        [*private_pages(site, 40), site.url("/public")],
        {"CONCURRENT_REQUESTS": 64, "REP_MAX_WAITING": max_waiting},
    )
    assert site.hits("/robots.txt") == 1
    assert [p for p in site.paths() if p.startswith("/private")] == []
    assert site.hits("/public") == 1
    assert result.stats["rep/forbidden"] == 40
    assert result.stats["rep/robotstxt/request_count"] == 1


# -- waiting does not starve known origins ---------------------------------------------------------


def starving_sites(
    slow: ScriptedServer, fast: ScriptedServer, wait_timeout: float
) -> tuple[list[str], Gate]:
    """``slow``'s robots.txt answers once ``fast``'s last page was requested
    (or after ``wait_timeout``)."""
    fast_done = Gate()
    slow.script("/robots.txt", Reply(body=ROBOTS, wait_for=fast_done, wait_timeout=wait_timeout))
    fast.robots(ROBOTS)

    fast.script("/p/9", Reply(body=PAGE, opens=fast_done))
    urls = [slow.url(f"/s/{i}") for i in range(10)] + [fast.url(f"/p/{i}") for i in range(10)]
    return urls, fast_done


def slow_pages_came_after_fast_pages(slow: ScriptedServer, fast: ScriptedServer) -> bool:
    last_fast = max(hit.time for hit in fast.log() if hit.path.startswith("/p/"))
    first_slow = min(hit.time for hit in slow.log() if hit.path.startswith("/s/"))
    return last_fast < first_slow


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_requests_to_known_origins_flow_while_others_wait(
    site: ScriptedServer, site2: ScriptedServer
) -> None:
    urls, fast_done = starving_sites(site, site2, wait_timeout=10)
    # Both servers are one download slot (127.0.0.1): the 10 fast pages, released
    # together by their robots.txt, must not wait for places in it (REP_SLOT_LIMIT).
    result = await run_crawl(urls, {"CONCURRENT_REQUESTS": 2, "CONCURRENT_REQUESTS_PER_DOMAIN": 16})
    assert fast_done.is_set()
    assert all(site2.hits(f"/p/{i}") == 1 for i in range(10))
    assert all(site.hits(f"/s/{i}") == 1 for i in range(10))
    assert slow_pages_came_after_fast_pages(site, site2)
    assert not result.failures


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_without_rep_max_waiting_waiters_fill_concurrent_requests(
    site: ScriptedServer, site2: ScriptedServer
) -> None:
    """The same crawl with REP_MAX_WAITING = 0 (Scrapy's way of waiting): the
    slow origin's waiters hold both places, the fast origin waits for them."""
    urls, _ = starving_sites(site, site2, wait_timeout=1.0)
    # REP_FRONTIER off: the requests reach the middleware before their robots.txt is known
    settings = {"CONCURRENT_REQUESTS": 2, "REP_MAX_WAITING": 0, "REP_FRONTIER": False}
    await run_crawl(urls, settings)
    assert not slow_pages_came_after_fast_pages(site, site2)


@pytest_twisted.ensureDeferred
async def test_the_waiting_internals_are_where_scrapy_kept_them(site: ScriptedServer) -> None:
    problems: list[list[str]] = []

    def listen(crawler: Crawler) -> None:
        def opened(spider: Any) -> None:
            problems.append(waiting_problems(crawler.engine))

        crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)

    await run_crawl([site.url("/")], before=listen)
    assert problems == [[]], "Scrapy changed: see scrapy_rep/_slots/"


# -- REP_UNREACHABLE = defer -----------------------------------------------------------------------


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_defer_keeps_requests_until_robots_txt_answers(site: ScriptedServer) -> None:
    site.script("/robots.txt", [Reply(status=503), Reply(status=503), Reply(body=ROBOTS)])
    result = await run_crawl(
        [*private_pages(site, 3), site.url("/a"), site.url("/b")],
        {"REP_UNREACHABLE": "defer", "REP_RETRY_MIN": 0.2, "REP_MAX_WAITING": 2},
    )
    assert site.hits("/robots.txt") == 3
    assert (site.hits("/a"), site.hits("/b")) == (1, 1)
    assert [p for p in site.paths() if p.startswith("/private")] == []
    assert result.stats["rep/deferred"] == 5
    assert result.stats["rep/deferred/released"] == 5
    assert result.stats["rep/forbidden"] == 3


UNREACHABLE = "rep/robotstxt/outcome/unreachable"
RETRY_MIN = 10.0  # of the clock: the fetches after the first come 10 s, then 20 s later
DEFER_MAX = 60.0  # of the clock: after the third fetch has begun


@pytest_twisted.ensureDeferred
async def test_rep_defer_max_also_bounds_a_fetch_in_flight(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """REP_DEFER_MAX counts from the first unreachable answer, and a robots.txt
    fetch still under way at the deadline does not keep the requests longer:
    the third fetch gets its answer only once the request was dropped, as the
    deadline passed on scrapy-rep's clock. Each step of the clock waits until
    the crawl has acted on the last answer, so no count rides on the machine's
    speed."""
    third = Gate()
    site.script(
        "/robots.txt",
        [Reply(status=503), Reply(status=503), Reply(status=503, wait_for=third, wait_timeout=120)],
    )
    crawlers: list[Crawler] = []
    crawl = ensureDeferred(
        run_crawl(
            [site.url("/a")],
            {"REP_UNREACHABLE": "defer", "REP_RETRY_MIN": RETRY_MIN, "REP_DEFER_MAX": DEFER_MAX,
             "REP_FETCH_TIMEOUT": 600,
             # each 503 would pause the origin's slot (slowdown.py) past the fetches
             # this test needs within REP_DEFER_MAX
             "REP_SLOWDOWN": False},
            before=crawlers.append,
        )
    )  # fmt: skip

    try:
        # the first answer starts REP_DEFER_MAX: its deadline is at most this
        # now + DEFER_MAX, and at least the first fetch's send stamp + DEFER_MAX
        await until(lambda: stat_of(crawlers, "rep/deferred") == 1)
        first = rep_clock.now()
        [sent] = [hit.time for hit in site.log() if hit.path == "/robots.txt"]
        for answered, retry_in in ((1, RETRY_MIN), (2, 2 * RETRY_MIN)):
            await until(lambda n=answered: stat_of(crawlers, UNREACHABLE) == n)
            rep_clock.advance(retry_in + 1)  # the next fetch is due (REP_RETRY_MIN, doubling)
            await until(lambda n=answered: site.hits("/robots.txt") == n + 1)
        rep_clock.advance(max(sent + DEFER_MAX - 1 - rep_clock.now(), 0.0))  # 1 s before
        await settle()
        assert stat_of(crawlers, "rep/deferred/expired") == 0, "dropped before REP_DEFER_MAX"
        rep_clock.advance(max(first + DEFER_MAX + 1 - rep_clock.now(), 0.0))  # 1 s after
        await until(lambda: stat_of(crawlers, "rep/deferred/expired") == 1)
        assert site.hits("/robots.txt") == 3  # the third still unanswered: it did not hold /a
    finally:
        third.set()
    result = await crawl
    assert result.failed_with(site.url("/a")) is RobotsTxtUnavailable
    assert site.hits("/robots.txt") == 3
    assert site.hits("/a") == 0
    assert result.stats["rep/deferred"] == 1
    assert result.stats["rep/deferred/expired"] == 1


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_defer_drops_with_a_count_after_rep_defer_max(site: ScriptedServer) -> None:
    site.script("/robots.txt", Reply(status=503))
    urls = [site.url("/a"), site.url("/b")]
    result = await run_crawl(
        urls, {"REP_UNREACHABLE": "defer", "REP_RETRY_MIN": 0.2, "REP_DEFER_MAX": 0.7}
    )
    assert site.hits("/a") == site.hits("/b") == 0
    assert site.hits("/robots.txt") >= 2  # retried while the requests were kept
    assert result.stats["rep/deferred"] == 2
    assert result.stats["rep/deferred/expired"] == 2
    assert all(result.failed_with(url) is RobotsTxtUnavailable for url in urls)


@pytest_twisted.ensureDeferred
async def test_kept_requests_do_not_hold_up_closing_the_spider(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """The spider closes (as CLOSESPIDER_TIMEOUT closes it) while a request is
    kept for an unreachable robots.txt: it ends in its errback at once, not at
    the next fetch (REP_RETRY_MIN of scrapy-rep's clock, never moved)."""
    site.script("/robots.txt", Reply(status=503))
    crawlers: list[Crawler] = []
    crawl = ensureDeferred(
        run_crawl(
            [site.url("/a")],
            # REP_FRONTIER off: the request waits in the middleware, not in the scheduler
            {"REP_UNREACHABLE": "defer", "REP_RETRY_MIN": 600, "REP_FRONTIER": False},
            before=crawlers.append,
        )
    )
    await until(lambda: stat_of(crawlers, "rep/deferred") == 1)
    engine = crawlers[0].engine
    assert engine is not None
    await deferred_from_coro(engine.close_spider_async(reason="closespider_timeout"))
    result = await crawl
    assert result.stats["finish_reason"] == "closespider_timeout"
    assert result.stats["rep/deferred/dropped_closing"] == 1
    assert result.failed_with(site.url("/a")) is RobotsTxtUnavailable
    assert site.hits("/a") == 0
    assert site.hits("/robots.txt") == 1


# -- freshness -------------------------------------------------------------------------------------


def then(*steps: tuple[str, list[str]]) -> Any:
    """A follow function: after the response of path P, request the URLs listed for P."""
    plan = dict(steps)

    def follow(response: Response) -> list[Request]:
        path = response.url.split("/", 3)[-1]
        return [Request(url, dont_filter=True) for url in plan.get("/" + path, [])]

    return follow


TTL = 600.0  # of scrapy-rep's clock: the rules expire only when the test moves it


@pytest.mark.parametrize("max_fetches", [64, 0])  # 0: robots.txt downloads count as pages
@pytest_twisted.ensureDeferred
async def test_expired_rules_are_served_while_the_refresh_loads(
    site: ScriptedServer, max_fetches: int, rep_clock: ModuleType
) -> None:
    """Once the rules expired (the clock moved past REP_CACHE_TTL), /b1 is let
    go on the old rules while their refresh is under way (its answer held
    until /b1 arrived); /b2, after the refresh, meets the new rules."""
    refresh = Gate()  # the second robots.txt answer, held until /b1 has come
    refreshed = Gate()  # /next answers once the crawl has read the new rules
    site.script(
        "/robots.txt",
        [
            Reply(body=b"User-agent: *\nDisallow: /a\n"),
            Reply(body=b"User-agent: *\nDisallow: /b\n", wait_for=refresh, wait_timeout=60),
        ],
    )
    site.script("/next", Reply(body=PAGE, wait_for=refreshed, wait_timeout=60))
    crawlers: list[Crawler] = []

    def follow(response: Response) -> list[Request]:
        path = urlsplit(response.url).path
        if path == "/first":
            rep_clock.advance(TTL + 1)  # the rules have expired: /b1 starts their refresh
        plan = {"/first": "/b1", "/b1": "/next", "/next": "/b2"}
        return [Request(site.url(plan[path]), dont_filter=True)] if path in plan else []

    crawl = ensureDeferred(
        run_crawl(
            [site.url("/first")],
            {"REP_CACHE_TTL": TTL, "REP_CACHE_MIN_TTL": 0, "REP_MAX_FETCHES": max_fetches},
            follow=follow,
            before=crawlers.append,
        )
    )
    try:
        # /b1 on the old rules, the refresh asked for and its answer held
        await until(lambda: site.hits("/b1") == 1 and site.hits("/robots.txt") == 2)
        refresh.set()
        await until(lambda: stat_of(crawlers, "rep/robotstxt/outcome/parsed") == 2)
    finally:
        refresh.set()
        refreshed.set()
    result = await crawl
    assert (site.hits("/b1"), site.hits("/b2")) == (1, 0)
    assert result.failed_with(site.url("/b2")) is ForbiddenByRobots
    assert result.stats["rep/forbidden"] == 1
    assert site.hits("/robots.txt") == 2


@pytest_twisted.ensureDeferred
async def test_last_good_rules_are_kept_when_robots_txt_becomes_unreachable(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """(The rules expire when the test moves scrapy-rep's clock past
    REP_CACHE_TTL, after /first; the refresh's 503 is asked again only after
    REP_RETRY_MIN.)"""
    site.script("/robots.txt", [Reply(body=ROBOTS), Reply(status=503)])
    follow = then(("/first", [site.url("/x1")]), ("/x1", [site.url("/private/1"), site.url("/x2")]))

    def expire_after_first(response: Response) -> list[Request]:
        if urlsplit(response.url).path == "/first":
            rep_clock.advance(TTL + 1)
        requests: list[Request] = follow(response)
        return requests

    result = await run_crawl(
        [site.url("/first")],
        {"REP_CACHE_TTL": TTL, "REP_CACHE_MIN_TTL": 0, "REP_RETRY_MIN": 600},
        follow=expire_after_first,
    )
    assert site.hits("/robots.txt") == 2
    assert (site.hits("/x1"), site.hits("/x2"), site.hits("/private/1")) == (1, 1, 0)
    assert result.stats["rep/robotstxt/stale_served"] == 1
    assert "rep/unreachable/dropped" not in result.stats


@pytest_twisted.ensureDeferred
async def test_cache_is_bounded_by_rep_cache_max_origins(
    site: ScriptedServer, site2: ScriptedServer
) -> None:
    site.robots(ROBOTS)
    site2.robots(ROBOTS)
    await run_crawl(
        [site.url("/1")],
        {"REP_CACHE_MAX_ORIGINS": 1},
        follow=then(("/1", [site2.url("/2")]), ("/2", [site.url("/3")])),
    )
    assert (site.hits("/1"), site2.hits("/2"), site.hits("/3")) == (1, 1, 1)
    assert site.hits("/robots.txt") == 2  # evicted by site2, fetched again


# -- robots.txt known at once (Scrapy's HTTP cache) ------------------------------------------------


@pytest.mark.parametrize("ignore_missing", [False, True])
@pytest_twisted.ensureDeferred
async def test_robots_txt_from_scrapys_http_cache(
    site: ScriptedServer, tmp_path: Path, ignore_missing: bool
) -> None:
    """A cached robots.txt arrives without the fetch ever waiting: on Twisted's
    own reactor the first page then failed with a KeyError (0.1.0.dev0)."""
    site.robots(ROBOTS)
    urls = [site.url("/public"), site.url("/private/1")]
    cache = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_DIR": str(tmp_path / "httpcache")}
    await run_crawl(urls, cache)  # fills the cache
    hits = site.hits("/robots.txt")
    result = await run_crawl(urls, {**cache, "HTTPCACHE_IGNORE_MISSING": ignore_missing})
    assert site.hits("/robots.txt") == hits == 1  # the second crawl read it from the cache
    assert list(result.responses) == [site.url("/public")]
    assert result.failed_with(site.url("/private/1")).__name__ == "ForbiddenByRobots"
    assert result.stats["rep/forbidden"] == 1
