"""The frontier's robots.txt prefetch: its window, its fetch cap, hanging servers.

Real crawls against one local server standing for many sites
(tests/frontier_sites.py; ``*.test`` host names resolve to 127.0.0.1).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

import pytest
from clock_steps import settle, until
from crawls import PATIENT, loopback_names
from frontier_sites import HANG, BroadSpider, Sites
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.squeues import LifoMemoryQueue
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from test_frontier import SETTINGS, crawl, stats
from twisted.internet.defer import ensureDeferred

from scrapy_rep import _clock
from scrapy_rep.frontier.queue import AWAIT_ROBOTS
from scrapy_rep.frontier.robots import SLOW_SHARES

pytestmark = pytest.mark.slow  # real-time waits


# -- a request the disk queue cannot store ------------------------------------------------


class UnstorableSpider(BroadSpider):
    """Its requests carry a lambda errback: JOBDIR's disk queue cannot store
    them, and Scrapy keeps them in memory instead."""

    async def start(self) -> AsyncIterator[Request]:
        for url in self.urls:
            assert isinstance(url, str)
            yield Request(url, callback=self.parse, errback=lambda failure: self.failed(failure))


async def test_requests_the_disk_queue_cannot_store_are_crawled(tmp_path: Path) -> None:
    """REP_CACHE_MAX_ORIGINS = 2 (one origin fetched ahead at a time), JOBDIR,
    three origins' pages that cannot be serialized: the window comes back as
    each origin's page leaves, so all three are crawled and the crawl finishes
    (it stalled after the first, each page counted twice in the window)."""
    with Sites(robots="User-agent: *\nAllow: /\n") as sites, loopback_names():
        urls = [sites.url(f"u{number}.test", "/page") for number in range(3)]
        answered: dict[str, float] = {}
        failed: dict[str, str] = {}
        crawler = get_crawler(
            UnstorableSpider,
            {
                **SETTINGS,
                "JOBDIR": str(tmp_path / "job"),
                "REP_CACHE_MAX_ORIGINS": 2,
                "CLOSESPIDER_TIMEOUT": 10,
            },
        )
        await deferred_from_coro(crawler.crawl_async(urls=urls, answered=answered, failed=failed))
    assert not failed, failed
    assert set(answered) == set(urls)
    assert stats(crawler).get("finish_reason") == "finished"


async def test_requests_that_ignore_robots_txt_do_not_open_the_window_early() -> None:
    """REP_CACHE_MAX_ORIGINS = 2 (one origin fetched ahead at a time). The
    first origin asks for Crawl-delay: 1 and has 3 pages queued, with 3
    requests that ignore robots.txt (``dont_obey_robotstxt``); two more
    origins follow. Requests that ignore robots.txt were never counted in the
    window but were discounted: the next origins were fetched ahead while the
    first one's pages still waited, its rules left the cache, and its
    robots.txt was fetched again. Now once."""
    robots = {"slow.test": "User-agent: *\nCrawl-delay: 1\n"}
    with (
        Sites(robots=lambda host: robots.get(host, "User-agent: *\nAllow: /\n")) as sites,
        loopback_names(),
    ):
        urls: list[str | Request] = [sites.url("slow.test", f"/p{page}") for page in range(3)]
        urls += [
            Request(sites.url("slow.test", f"/free{page}"), meta={"dont_obey_robotstxt": True})
            for page in range(3)
        ]
        urls += [sites.url(f"o{number}.test", "/page") for number in range(2)]
        _, answered, failed = await crawl(urls, {"REP_CACHE_MAX_ORIGINS": 2})
        fetched = [hit.host for hit in sites.hits if hit.path == "/robots.txt"]
    assert not failed, failed
    assert len(answered) == len(urls)
    assert fetched.count("slow.test") == 1, fetched


# -- a slot waits for its robots.txt in the queue at most AWAIT_ROBOTS --------------------

SLOW_AFTER = 2 * AWAIT_ROBOTS  # when the stalled fetch would give its place up
STALL_TIMEOUT = SLOW_SHARES * SLOW_AFTER  # REP_FETCH_TIMEOUT


async def test_a_slot_waits_for_robots_txt_in_the_queue_at_most_await_robots(
    rep_clock: ModuleType,
) -> None:
    """REP_MAX_FETCHES = 1 and a first origin whose robots.txt never answers:
    the next origin's fetch cannot start from the queue before the first
    turns slow (an eighth of REP_FETCH_TIMEOUT, here 60 s), and meanwhile no
    fetch starts or ends. Its page leaves the queue after AWAIT_ROBOTS (30 s)
    and the robots middleware fetches its robots.txt: sent between 30 s and
    60 s after it was queued, in scrapy-rep's time, which the test moves
    forward once the stalled robots.txt is at the server and the page queued."""
    with (
        Sites(
            robots="User-agent: *\nAllow: /\n",
            robots_wait=lambda host: HANG if host == "stall.test" else 0.0,
        ) as sites,
        loopback_names(),
    ):
        stalled, ordinary = sites.url("stall.test", "/page"), sites.url("next.test", "/page")
        scheduled: dict[str, float] = {}
        answered: dict[str, float] = {}
        failed: dict[str, str] = {}
        crawler = get_crawler(
            BroadSpider,
            {**SETTINGS, "REP_MAX_FETCHES": 1, "REP_FETCH_TIMEOUT": STALL_TIMEOUT},
        )

        def on_scheduled(request: Request) -> None:
            scheduled.setdefault(request.url, rep_clock.now())

        crawler.signals.connect(on_scheduled, signal=signals.request_scheduled, weak=False)
        sent = sites.sent(crawler)
        done = deferred_from_coro(
            crawler.crawl_async(urls=[stalled, ordinary], answered=answered, failed=failed)
        )
        try:
            await until(lambda: ordinary in scheduled and sites.first("stall.test", "/robots.txt"))
            # 1 s before the deadline, then past it
            rep_clock.advance(scheduled[ordinary] + AWAIT_ROBOTS - 1 - rep_clock.now())
            await settle()
            rep_clock.advance(2)
            await until(lambda: ordinary in answered or ordinary in failed)
        finally:
            sites.release_hanging()  # the stalled page ends: the crawl can
            await done
    assert ordinary in answered, failed
    [at] = sent["next.test"]
    waited = at - scheduled[ordinary]
    assert AWAIT_ROBOTS <= waited < SLOW_AFTER, f"sent {waited:.2f} s after it was queued"
    assert stats(crawler).get("rep/frontier/robotstxt_overdue", 0) >= 1


# -- REP_MAX_FETCHES holds for the prefetch -----------------------------------------------

MANY_ORIGINS = 200
FEW_FETCHES = 4


async def test_prefetch_runs_at_most_rep_max_fetches_robots_txt_at_once() -> None:
    """200 new origins queued at once, REP_MAX_FETCHES = 4, robots.txt answered
    after 0.05 s: the server never has more than 4 robots.txt requests at once
    (every waiting origin's fetch started in one run of pushes), and every page
    is crawled."""
    with (
        Sites(
            robots="User-agent: *\nAllow: /\n",
            robots_wait=0.05,
        ) as sites,
        loopback_names(),
    ):
        urls: list[str | Request] = [
            sites.url(f"m{number}.test", "/page") for number in range(MANY_ORIGINS)
        ]
        crawler, answered, failed = await crawl(
            urls, {**PATIENT, "REP_MAX_FETCHES": FEW_FETCHES, "CONCURRENT_REQUESTS": 64}
        )
        peak = sites.max_robots_in_flight
        robots_hits = sum(1 for hit in sites.hits if hit.path == "/robots.txt")
    assert not failed, failed
    assert len(answered) == MANY_ORIGINS
    assert robots_hits == MANY_ORIGINS
    # A fetch still under way after an eighth of REP_FETCH_TIMEOUT gives its place
    # to the next (frontier/robots.py): on a loaded machine a few do, each counted.
    slow = crawler.stats.get_value("rep/frontier/robotstxt_slow", 0)
    assert peak <= FEW_FETCHES + slow, f"{peak} robots.txt requests at once, {slow} slow"
    assert stats(crawler).get("rep/frontier/robotstxt_prefetched") == MANY_ORIGINS


# -- hanging robots.txt files do not hold new origins back ------------------------------------

HANGING = 40
ORDINARY = 10
WINDOW = 8  # REP_MAX_FETCHES
FETCH_TIMEOUT = 24.0
"""REP_FETCH_TIMEOUT, on scrapy-rep's clock, which the test moves (never
passing on its own in the test's real seconds). Under AWAIT_ROBOTS (30 s): the
queue hands a slot out once its origin waited that long while the window did
not move, so with a longer timeout a first-in-first-out window would cost
AWAIT_ROBOTS, not its queue of timeouts, and the test would prove nothing."""
EIGHTH = FETCH_TIMEOUT / SLOW_SHARES  # when a fetch gives its place in the window up
LEAD = 0.1
"""Seconds of the clock past EIGHTH to which the test moves it."""
SETTLE = 1.0
"""Seconds an ordinary origin's page may take past REP_FETCH_TIMEOUT from when
its request was scheduled: its own robots.txt fetch and its page's turn."""


class RobotsInFlight:
    """The most robots.txt downloads in Scrapy's downloader at once (from
    reaching it to leaving it: a hanging server's request leaves at its
    timeout), how many reached it, and when the newest did (``_clock.monotonic()``)."""

    def __init__(self) -> None:
        self.inside: set[Request] = set()
        self.most = 0
        self.reached = 0
        self.newest = 0.0

    def connect(self, crawler: Crawler) -> None:
        crawler.signals.connect(self._reached, signal=signals.request_reached_downloader)
        crawler.signals.connect(self._left, signal=signals.request_left_downloader)

    def _reached(self, request: Request) -> None:
        if urlsplit(request.url).path == "/robots.txt":
            self.inside.add(request)
            self.most = max(self.most, len(self.inside))
            self.reached += 1
            self.newest = _clock.monotonic()

    def _left(self, request: Request) -> None:
        self.inside.discard(request)


async def _quiet(sites: Sites, robots: RobotsInFlight) -> None:
    """Real time: until every robots.txt request in Scrapy's downloader has
    reached the server and nothing reached it for a ``settle()``: the crawl
    waits on the clock. Fails if not seen within 30 s of real time."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = (len(sites.hits), robots.reached)
        await settle()
        at_server = sum(hit.path == "/robots.txt" for hit in sites.hits)
        if (len(sites.hits), robots.reached) == seen and at_server >= robots.reached:
            return
    raise AssertionError("the crawl never waited on the clock within 30 s of real time")


async def test_hanging_robots_txt_cost_ordinary_origins_one_timeout_at_most(
    rep_clock: ModuleType,
) -> None:
    """40 origins whose robots.txt never answers are queued before 10 ordinary
    ones: each ordinary page is sent within REP_FETCH_TIMEOUT (+ SETTLE) of its
    request entering the queue, in scrapy-rep's time (a first-in-first-out
    window of 8 held them 5 timeouts), and robots.txt downloads in flight never
    exceed the stated bound: REP_MAX_FETCHES fetches younger than an eighth of
    REP_FETCH_TIMEOUT, SLOW_SHARES x REP_MAX_FETCHES in all. Whenever the crawl
    waits, the test moves the clock to an eighth of REP_FETCH_TIMEOUT (LEAD
    past it) after the newest robots.txt request reached the downloader, or by
    an eighth when that has passed, up to twice REP_FETCH_TIMEOUT in all. (Once
    the ordinary pages are in, the hanging servers close their connections, so
    the crawl ends without waiting for their timeouts.)"""
    hanging = [f"h{number}.test" for number in range(HANGING)]
    ordinary = [f"n{number}.test" for number in range(ORDINARY)]
    with (
        Sites(
            robots="User-agent: *\nAllow: /\n",
            robots_wait=lambda host: HANG if host.startswith("h") else 0.0,
        ) as sites,
        loopback_names(),
    ):
        urls: list[str | Request] = [sites.url(host, "/page") for host in hanging + ordinary]
        watched = {sites.url(host, "/page") for host in ordinary}
        waiting = set(watched)
        scheduled: dict[str, float] = {}
        sent: list[dict[str, list[float]]] = []
        robots = RobotsInFlight()

        def record(crawler: Crawler) -> None:
            def on_scheduled(request: Request) -> None:
                scheduled.setdefault(request.url, _clock.now())

            def on_answered(response: Response, request: Request) -> None:
                waiting.discard(request.url)
                if not waiting:
                    sites.release_hanging()  # their pages end: the crawl can

            crawler.signals.connect(on_scheduled, signal=signals.request_scheduled, weak=False)
            crawler.signals.connect(on_answered, signal=signals.response_received, weak=False)
            sent.append(sites.sent(crawler))
            robots.connect(crawler)

        done = ensureDeferred(
            crawl(
                urls,
                {
                    "REP_MAX_FETCHES": WINDOW,
                    "REP_FETCH_TIMEOUT": FETCH_TIMEOUT,
                    "CONCURRENT_REQUESTS": 16,
                },
                close_after=watched,
                before=record,
            )
        )
        try:
            moved = 0.0
            while waiting and moved < 2 * FETCH_TIMEOUT:
                await _quiet(sites, robots)
                if not waiting:
                    break
                step = robots.newest + EIGHTH + LEAD - rep_clock.monotonic()
                step = step if step > 0 else EIGHTH
                rep_clock.advance(step)
                moved += step
        finally:
            sites.release_hanging()  # (late pages: the crawl ends now)
            _, answered, failed = await done
    assert watched <= answered.keys(), failed
    late = {}
    for host in ordinary:
        url = sites.url(host, "/page")
        [at] = sent[0][host]
        waited = at - scheduled[url]
        if waited > FETCH_TIMEOUT + SETTLE:
            late[host] = round(waited, 2)
    assert not late, f"ordinary pages sent this long after they were queued: {late}"
    bound = SLOW_SHARES * WINDOW
    assert robots.most <= bound, f"{robots.most} robots.txt downloads at once (bound {bound})"


# -- a queue class whose name does not say LIFO ---------------------------------------------------


class NewestFirst(LifoMemoryQueue):
    """A project's queue: last in, first out, though its name does not say so."""


async def test_a_queue_of_any_name_keeps_its_order_when_robots_txt_arrives() -> None:
    """Pages queued for a new origin while its robots.txt is fetched (0.5 s)
    are crawled, once it arrives, in the order the project's memory queue
    gives (here newest first), whatever the queue class is called."""
    pages = 6
    with (
        Sites(
            robots="User-agent: *\nAllow: /\n",
            robots_wait=lambda host: 0.5 if host == "later.test" else 0.0,
        ) as sites,
        loopback_names(),
    ):
        seed = sites.url("seed.test", "/seed")
        later = [sites.url("later.test", f"/p{page}") for page in range(pages)]
        _, answered, failed = await crawl(
            [seed],
            {
                "SCHEDULER_MEMORY_QUEUE": f"{__name__}.NewestFirst",
                "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
            },
            follow=lambda response: (
                [Request(url, dont_filter=True) for url in later] if response.url == seed else []
            ),
        )
        order = [hit.path for hit in sites.hits if hit.host == "later.test"]
    assert not failed, failed
    assert set(later) <= answered.keys()
    assert order[1:] == [f"/p{page}" for page in reversed(range(pages))], order
