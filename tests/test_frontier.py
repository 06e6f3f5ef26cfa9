"""scrapy_rep.PolitePriorityQueue: requests wait in the scheduler until their site is ready.

Real crawls against one local server standing for many sites
(tests/frontier_sites.py; ``*.test`` host names resolve to 127.0.0.1).
Times are the server's arrival times and the spider's answer times, with
the slack of a loaded machine.
"""

from __future__ import annotations

import gc
import itertools
import logging
import weakref
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
from crawls import BASE_SETTINGS, PATIENT, loopback_names
from frontier_sites import BroadSpider, Sites
from scrapy import Request, signals
from scrapy.core.engine import ExecutionEngine
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from sent_stamp import let_go_at

from scrapy_rep import PolitePriorityQueue

pytestmark = pytest.mark.slow  # real-time delays

QUEUE = "scrapy_rep.PolitePriorityQueue"
SETTINGS: dict[str, Any] = {**BASE_SETTINGS, "LOG_LEVEL": "INFO"}
FIFO = {"SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue"}


async def crawl(
    urls: list[str | Request],
    settings: dict[str, Any] | None = None,
    close_after: set[str] | None = None,
    *,
    follow: Callable[[Response], list[Request]] | None = None,
    before: Callable[[Crawler], None] | None = None,
) -> tuple[Crawler, dict[str, float], dict[str, str]]:
    """Crawl ``urls``: (the crawler, answered URL -> time.time(), failed URL -> exception name)."""
    answered: dict[str, float] = {}
    failed: dict[str, str] = {}
    crawler = get_crawler(BroadSpider, {**SETTINGS, **(settings or {})})
    if before is not None:
        before(crawler)
    await deferred_from_coro(
        crawler.crawl_async(
            urls=urls, answered=answered, failed=failed, close_after=close_after, follow=follow
        )
    )
    return crawler, answered, failed


def stats(crawler: Crawler) -> dict[str, Any]:
    assert crawler.stats is not None
    return crawler.stats.get_stats()


# -- (1), (2) head-of-line: polite sites cost the others nothing -----------------------

SITES = 60
POLITE_SITES = 9  # 15 %
OTHER_PAGES = 8
POLITE_PAGES = 12  # more than REP_MAX_WAITING below
CRAWL_DELAY = 1.0
MAX_WAITING = 8
PACED = 3  # pages of each polite site the crawl waits for, to measure their gaps


def hosts() -> tuple[list[str], list[str]]:
    """(all hosts, the polite ones): every sixth site asks for a Crawl-delay."""
    names = [f"o{number}.test" for number in range(SITES)]
    return names, names[::6][:POLITE_SITES]


def broad_urls(sites: Sites, names: list[str], polite: list[str]) -> list[str | Request]:
    """Pages interleaved as a broad crawl discovers them: page n of every site, then n+1."""
    urls: list[str | Request] = []
    for page in range(max(OTHER_PAGES, POLITE_PAGES)):
        for host in names:
            if page < (POLITE_PAGES if host in polite else OTHER_PAGES):
                urls.append(sites.url(host, f"/p{page}"))
    return urls


class QueuedInSlots:
    """The most pages of the given sites queued in the downloader's slots at
    once, waiting there for their turn (reached, not yet let go: sent_stamp.py):
    each holds a place of CONCURRENT_REQUESTS. Pages being transferred are not
    counted (a busy machine makes transfers long, not turns early)."""

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = set(hosts)
        self.inside: set[Request] = set()
        self.most = 0

    def connect(self, crawler: Crawler) -> None:
        crawler.signals.connect(self._reached, signal=signals.request_reached_downloader)
        crawler.signals.connect(self._left, signal=signals.request_left_downloader)

    def _reached(self, request: Request) -> None:
        parts = urlsplit(request.url)
        if parts.hostname in self.hosts and parts.path != "/robots.txt":
            self.inside.add(request)
            queued = sum(1 for inside in self.inside if let_go_at(inside) is None)
            self.most = max(self.most, queued)

    def _left(self, request: Request) -> None:
        self.inside.discard(request)


async def crawl_with_polite_sites(settings: dict[str, Any]) -> tuple[dict[str, list[float]], int]:
    """A broad crawl with polite sites: when the crawler sent each page, by host,
    and the most pages of polite sites waiting in download slots at once. The
    crawl closes once the other sites' pages are answered, and the polite sites'
    first ``PACED`` pages."""
    names, polite = hosts()
    others = [host for host in names if host not in polite]
    delay = f"User-agent: *\nCrawl-delay: {CRAWL_DELAY:g}\n"
    with (
        Sites(
            robots=lambda host: delay if host in polite else "User-agent: *\nAllow: /\n",
            page_delay=0.02,
        ) as sites,
        loopback_names(),
    ):
        urls = broad_urls(sites, names, polite)
        watched = {
            url
            for url in urls
            if isinstance(url, str) and url.split("/")[2].split(":")[0] in others
        }
        recorded: list[dict[str, list[float]]] = []
        held = QueuedInSlots(polite)

        def record(crawler: Crawler) -> None:
            recorded.append(sites.sent(crawler))
            held.connect(crawler)

        paced = {sites.url(host, f"/p{page}") for host in polite for page in range(PACED)}
        _, answered, failed = await crawl(
            urls,
            {"REP_MAX_WAITING": MAX_WAITING, **PATIENT, **settings},
            close_after=watched | paced,
            before=record,
        )
        assert not failed, failed
        assert watched <= answered.keys()
        return recorded[0], held.most


@pytest.mark.parametrize(
    "settings", [pytest.param({}, id="default-queue-replaced"), pytest.param(FIFO, id="fifo")]
)
async def test_polite_sites_cost_the_others_nothing(settings: dict[str, Any]) -> None:
    """9 of 60 sites ask for a Crawl-delay and have more queued pages than
    REP_MAX_WAITING: their pages wait in the scheduler, not in the downloader
    (at most one per site there at once), so they hold none of the places the
    other sites' pages need. (What that is worth in time, the other sites'
    pages finishing 0.90-1.12x as fast as without the polite ones, is measured
    side by side by `make bench-broad`: docs/scheduling.md.)"""
    sent, most = await crawl_with_polite_sites(settings)
    # (1) the downloader's places: what the other sites' speed follows
    assert most <= POLITE_SITES, f"{most} pages of polite sites waited in slots at once"
    # (2) the polite sites still get their full gaps (as the crawler sent them)
    _, polite = hosts()
    for host in polite:
        times = sorted(sent.get(host, []))
        assert len(times) >= PACED, f"{host}: {times}"
        gaps = [round(b - a, 3) for a, b in itertools.pairwise(times)]
        assert all(gap >= CRAWL_DELAY - 0.1 for gap in gaps), f"{host}: gaps {gaps}"


# -- the engine is woken at a slot's turn ----------------------------------------------


HEARTBEAT_NEVER = 600.0
"""Scrapy's engine heartbeat (5 s), moved out of any test's reach."""


async def test_the_engine_is_woken_at_the_next_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """One site asks for Crawl-delay: 1 and nothing else is crawled: each page
    goes when its turn comes, not at Scrapy's heartbeat. The heartbeat is moved
    out of reach here, so only the frontier's wake-up can send the pages before
    CLOSESPIDER_TIMEOUT. (The Crawl-delay is the download slot's delay too,
    which Scrapy counts in real time: this test runs on it.)"""
    monkeypatch.setattr(ExecutionEngine, "_SLOT_HEARTBEAT_INTERVAL", HEARTBEAT_NEVER)
    robots = "User-agent: *\nCrawl-delay: 1\n"
    with Sites(robots=robots) as sites, loopback_names():
        urls: list[str | Request] = [sites.url("lone.test", f"/p{page}") for page in range(4)]
        recorded: list[dict[str, list[float]]] = []
        crawler, answered, failed = await crawl(
            urls,
            {"CLOSESPIDER_TIMEOUT": 30},
            before=lambda crawler: recorded.append(sites.sent(crawler)),
        )
    assert not failed, failed
    assert stats(crawler)["finish_reason"] == "finished", "a page waited for no wake-up"
    assert len(answered) == len(urls)
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(sorted(recorded[0]["lone.test"]))]
    assert all(gap >= 0.9 for gap in gaps), f"gaps {gaps}"
    assert stats(crawler).get("rep/frontier/wakeups", 0) >= 2


# -- (3) the per-site limit holds --------------------------------------------------


async def test_concurrent_requests_per_domain_holds() -> None:
    """CONCURRENT_REQUESTS_PER_DOMAIN = 2: at most 2 pages of one site in flight,
    also when all its queued requests become ready at once (robots.txt arrives)."""
    names = [f"c{number}.test" for number in range(3)]
    with (
        Sites(robots="User-agent: *\nAllow: /\n", page_delay=0.1) as sites,
        loopback_names(),
    ):
        urls: list[str | Request] = [
            sites.url(host, f"/p{page}") for page in range(15) for host in names
        ]
        crawler, answered, failed = await crawl(urls, {"CONCURRENT_REQUESTS_PER_DOMAIN": 2})
    assert not failed, failed
    assert len(answered) == len(urls)
    assert max(sites.max_in_flight.values()) <= 2, sites.max_in_flight
    assert stats(crawler)["rep/frontier/ready"] == len(urls)


# -- (4) JOBDIR: stopped and resumed, nothing lost, nothing repeated -----------------------


async def test_jobdir_stop_and_resume_loses_and_repeats_nothing(tmp_path: Path) -> None:
    names = ["j0.test", "j1.test", "j2.test"]
    first_run = True

    def robots(host: str) -> str:
        # In the first run, the first site's pages wait for a turn a minute after its
        # robots.txt (which counts as a request): they are on disk when the crawl
        # stops, however late it stops.
        if host == "j0.test" and first_run:
            return "User-agent: *\nCrawl-delay: 60\n"
        return "User-agent: *\n"

    with Sites(robots=robots, page_delay=0.02) as sites, loopback_names():
        urls = [sites.url(host, f"/p{page}") for page in range(10) for host in names]
        requests: list[str | Request] = [Request(url) for url in urls]  # filtered: seen once
        job = {"JOBDIR": str(tmp_path / "job")}
        first_stop = {urls[1], urls[2]}  # the other sites' first pages, then stop
        crawler, first, failed = await crawl(requests, job, close_after=first_stop)
        assert not failed, failed
        assert stats(crawler).get("finish_reason") == "finished"
        assert [url for url in first if "j0.test" in url] == []
        first_run = False
        crawler, second, failed = await crawl(requests, job)
        assert not failed, failed
        pages = [hit.path for hit in sites.hits if hit.path != "/robots.txt"]
        hits = {(hit.host, hit.path) for hit in sites.hits if hit.path != "/robots.txt"}
    assert first.keys() | second.keys() == set(urls)
    assert not first.keys() & second.keys(), "pages answered twice"
    assert len(pages) == len(hits) == len(urls), "a page was requested twice"


# -- (5) robots.txt fetched while the request waits in the queue ------------------------------


async def test_robots_txt_fetched_while_its_request_waits_in_the_queue() -> None:
    """A page yields a request for a new origin, then 300 requests of its own
    site; the new origin's request waits behind them all (same download slot,
    lower priority), and its robots.txt is fetched when it enters the queue,
    long before its turn (fetched at its turn, it would come after 270 pages
    or more)."""
    scheduled = itertools.count(1)
    crawlers: list[Crawler] = []

    def hold(crawler: Crawler) -> None:
        crawlers.append(crawler)
        crawler.signals.connect(count, signal=signals.request_scheduled, weak=False)

    def count(request: Request) -> None:
        # The engine takes nothing from the queue while the seed's 301 requests are
        # queued, so the queue, not how fast a loaded machine runs the spider,
        # decides the order (the robots.txt prefetch does not go through the queue).
        if next(scheduled) == 302:
            crawlers[0].engine.unpause()

    def follow(response: Response) -> list[Request]:
        if response.url != seed:
            return []
        crawlers[0].engine.pause()
        return [waiting, *busy]

    with Sites(robots="User-agent: *\nAllow: /\n") as sites, loopback_names():
        late = sites.url("new.test", "/late")
        waiting = Request(late, priority=-1, dont_filter=True, meta={"download_slot": "busy.test"})
        busy = [
            Request(sites.url("busy.test", f"/p{page}"), dont_filter=True) for page in range(300)
        ]
        seed = sites.url("busy.test", "/seed")
        crawler, answered, failed = await crawl(
            [seed],
            {**PATIENT, "CONCURRENT_REQUESTS_PER_DOMAIN": 16},  # 300 pages: not about timeouts
            close_after={late},
            follow=follow,
            before=hold,
        )
        robots_at = sites.first("new.test", "/robots.txt")
        busy_pages = sites.page_times("busy.test")
    assert not failed, failed
    assert late in answered
    assert robots_at is not None
    served_before = sum(1 for moment in busy_pages if moment < robots_at)
    assert served_before < 100, f"new.test's robots.txt came after {served_before} pages"
    # and the request did wait behind the others
    assert sum(1 for moment in busy_pages if moment < answered[late]) >= 270
    assert stats(crawler).get("rep/frontier/robotstxt_prefetched", 0) >= 2
    assert not stats(crawler).get("rep/waited/robotstxt")


# -- (6) forbidden requests leave at once -------------------------------------------------------


async def test_forbidden_requests_leave_at_once(rep_clock: ModuleType) -> None:
    """A site asks for Crawl-delay: 600 and forbids /private: its forbidden
    requests, queued among allowed ones, end with ForbiddenByRobots at once
    instead of waiting for turns; the server never sees them. (The delay runs
    on scrapy-rep's clock, which the test never moves: a forbidden request that
    waited for a turn would never end, and CLOSESPIDER_TIMEOUT would fail it.)"""
    robots = "User-agent: *\nCrawl-delay: 600\nDisallow: /private\n"
    with Sites(robots=robots) as sites, loopback_names():
        urls: list[str | Request] = []
        private: set[str] = set()
        for page in range(6):
            urls.append(sites.url("slow.test", f"/p{page}"))
            url = sites.url("slow.test", f"/private/{page}")
            urls.append(url)
            private.add(url)
        crawler, _, failed = await crawl(
            urls, {"CLOSESPIDER_TIMEOUT": 30}, close_after=set(private)
        )
        seen = [hit.path for hit in sites.hits]
    assert {url: failed.get(url) for url in private} == dict.fromkeys(private, "ForbiddenByRobots")
    assert stats(crawler)["finish_reason"] == "finished", "forbidden requests waited for turns"
    assert not any(path.startswith("/private") for path in seen)
    assert stats(crawler)["rep/forbidden"] == len(private)
    assert stats(crawler).get("rep/frontier/forbidden_released", 0) == len(private)


# -- (7) the add-on -----------------------------------------------------------------------------


def test_addon_installs_the_queue_over_scrapys_default() -> None:
    crawler = get_crawler(BroadSpider, SETTINGS)
    assert crawler.settings["SCHEDULER_PRIORITY_QUEUE"] == QUEUE


def test_addon_keeps_a_projects_own_queue_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    own = "scrapy.pqueues.DownloaderAwarePriorityQueue"
    with caplog.at_level(logging.WARNING):
        crawler = get_crawler(BroadSpider, {**SETTINGS, "SCHEDULER_PRIORITY_QUEUE": own})
    assert crawler.settings["SCHEDULER_PRIORITY_QUEUE"] == own
    warnings = [r for r in caplog.records if "SCHEDULER_PRIORITY_QUEUE" in r.getMessage()]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    for part in (own, "CONCURRENT_REQUESTS", QUEUE, "REP_FRONTIER = False"):
        assert part in message


def test_rep_frontier_false_keeps_scrapys_queue(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        crawler = get_crawler(BroadSpider, {**SETTINGS, "REP_FRONTIER": False})
    assert crawler.settings["SCHEDULER_PRIORITY_QUEUE"] != QUEUE
    assert not [r for r in caplog.records if "SCHEDULER_PRIORITY_QUEUE" in r.getMessage()]


def test_a_subclass_of_the_queue_is_kept_without_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        crawler = get_crawler(BroadSpider, {**SETTINGS, "SCHEDULER_PRIORITY_QUEUE": OwnQueue})
    assert crawler.settings["SCHEDULER_PRIORITY_QUEUE"] is OwnQueue
    assert not [r for r in caplog.records if "SCHEDULER_PRIORITY_QUEUE" in r.getMessage()]


class OwnQueue(PolitePriorityQueue):
    pass


async def test_concurrent_requests_per_ip_is_refused() -> None:
    with Sites() as sites, loopback_names():
        crawler = get_crawler(BroadSpider, {**SETTINGS, "CONCURRENT_REQUESTS_PER_IP": 2})
        with pytest.raises(ValueError, match="CONCURRENT_REQUESTS_PER_IP"):
            await deferred_from_coro(
                crawler.crawl_async(urls=[sites.url("a.test")], answered={}, failed={})
            )


# -- memory: what the queue keeps of the requests it handed out -------------------------


async def test_requests_done_with_are_not_kept_alive() -> None:
    """A request the downloader is done with is freed: the queue forgot the
    last requests of each site it emptied only when it looked at the site
    again, which it never does (2,000 new origins: megabytes of finished
    requests, their headers and provenance, kept to the end of the crawl)."""
    reached: list[weakref.ref[Request]] = []

    def watch(crawler: Crawler) -> None:
        def seen(request: Request, **_: Any) -> None:
            reached.append(weakref.ref(request))

        crawler.signals.connect(seen, signal=signals.request_reached_downloader, weak=False)

    with Sites(robots="User-agent: *\nAllow: /\n") as sites, loopback_names():
        urls: list[str | Request] = [
            sites.url(f"site{n}.test", f"/p{page}") for n in range(6) for page in range(3)
        ]
        crawler, answered, failed = await crawl(urls, before=watch)
    assert not failed, failed
    assert len(answered) == 18
    assert stats(crawler).get("rep/frontier/ready") == 18
    gc.collect()
    alive = [ref() for ref in reached if ref() is not None]
    assert [request.url for request in alive if request is not None] == []
