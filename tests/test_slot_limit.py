"""The slot limit: at most a download slot's concurrency of requests in flight, on every reactor.

Scrapy's downloader starts every request queued in a slot in one loop turn
on the asyncio reactor, before any counts as transferring, so 40 requests
released together when their robots.txt arrives used to reach a
``CONCURRENT_REQUESTS_PER_DOMAIN = 2`` site 14 at a time. Each page here
takes the server ``PAGE_TIME`` seconds: a request the crawler sends only
after an earlier one was answered cannot overlap it, so the overlaps of
``[arrival, arrival + PAGE_TIME)`` count what the crawler had in flight.

The limit is for requests that reach the robots middleware by another way than
scrapy-rep's scheduler queue (which hands a slot no more than it can take,
tests/test_frontier.py): these crawls turn the queue off (``OTHER_QUEUE``),
except the one that shows the same holds with it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, MutableSet
from typing import Any

import pytest
import pytest_twisted
from crawls import PATIENT, loopback_names, run_crawl
from scrapy import Request
from scrapy.core.downloader import Downloader
from scrapy.exceptions import IgnoreRequest
from servers import PAGE, Gate, Hit, Reply, ScriptedServer, gaps

from scrapy_rep import ForbiddenByRobots
from scrapy_rep._slots import ledger, limit_problems

ROBOTS = b"User-agent: *\nDisallow: /private\n"
PAGE_TIME = 0.15
WAITERS = 40
OTHER_QUEUE = {"REP_FRONTIER": False}
"""Scrapy's own scheduler queue: requests leave it before their slot can take them."""


def most_at_once(hits: list[Hit], seconds: float = PAGE_TIME) -> int:
    """The most requests whose ``[arrival, arrival + seconds)`` overlap."""
    edges = sorted(
        [(hit.time, 1) for hit in hits] + [(hit.time + seconds, -1) for hit in hits],
        key=lambda edge: (edge[0], edge[1]),  # an end before a start at the same time
    )
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def slow_pages(site: ScriptedServer, count: int, prefix: str = "/p/") -> list[str]:
    """``count`` pages that each take the server PAGE_TIME seconds, and their URLs."""
    urls = []
    for i in range(count):
        site.script(f"{prefix}{i}", Reply(body=PAGE, delay=PAGE_TIME))
        urls.append(site.url(f"{prefix}{i}"))
    return urls


def host_of(hit: Hit) -> str:
    return hit.headers.get("Host", "").split(":")[0]


def by_host(site: ScriptedServer) -> dict[str, list[Hit]]:
    hosts: dict[str, list[Hit]] = {}
    for hit in site.page_hits():
        hosts.setdefault(host_of(hit), []).append(hit)
    return hosts


async def released_together(site: ScriptedServer, settings: dict[str, Any]) -> Any:
    """WAITERS pages (and one disallowed) waiting for a slow robots.txt, all
    released when it arrives."""
    site.script("/robots.txt", Reply(body=ROBOTS, delay=0.5))
    urls = [*slow_pages(site, WAITERS), site.url("/private/x")]
    # PATIENT: a loaded machine may take seconds to answer, and this is not about timeouts
    result = await run_crawl(
        urls, {"CONCURRENT_REQUESTS": 100, **PATIENT, **OTHER_QUEUE, **settings}
    )
    # nothing lost: every request reached its callback or its errback
    assert sorted(result.responses) == sorted(urls[:-1])
    assert list(result.failures) == [urls[-1]]
    assert result.failed_with(urls[-1]) is ForbiddenByRobots
    assert len(site.page_hits("/p/")) == WAITERS
    return result


@pytest_twisted.ensureDeferred
async def test_per_domain_concurrency_holds_when_robots_txt_releases_40(
    site: ScriptedServer,
) -> None:
    """CONCURRENT_REQUESTS_PER_DOMAIN = 2: never more than 2 in flight (Scrapy
    sends 9 at once on asyncio without robots.txt; scrapy-rep used to send 14)."""
    result = await released_together(site, {"CONCURRENT_REQUESTS_PER_DOMAIN": 2})
    assert most_at_once(site.page_hits("/p/")) == 2
    assert limit_problems(result.crawler.engine.downloader) == []  # checked at start
    stats = result.rep_stats()
    assert stats["rep/slot_limit/held"] >= WAITERS - 2 - 1  # the first two went at once
    assert "rep/slot_limit/dropped_closing" not in stats


@pytest_twisted.ensureDeferred
async def test_the_same_holds_with_scrapy_reps_queue(site: ScriptedServer) -> None:
    """With scrapy-rep's scheduler queue on, the queue itself keeps the slot to
    2: the slot limit lets its requests go at once, holding none."""
    result = await released_together(
        site, {"CONCURRENT_REQUESTS_PER_DOMAIN": 2, "REP_FRONTIER": True}
    )
    assert most_at_once(site.page_hits("/p/")) == 2
    assert "rep/slot_limit/held" not in result.rep_stats()


@pytest_twisted.ensureDeferred
async def test_with_scrapy_reps_queue_a_429_pause_never_overfills_the_slot(
    site: ScriptedServer,
) -> None:
    """With scrapy-rep's queue, requests waiting at a 429 pause's gate count
    as out of their slot (the crawl's ledger): the queue alone holds the
    slot to 3, while the pause lasts and while the gate lets its requests go
    again, and the slot limit holds none."""
    site.robots(ROBOTS)
    busy = Reply(status=429, headers={"Retry-After": "1"}, delay=PAGE_TIME)
    for i in range(3):
        site.script(f"/p/{i}", [busy, Reply(body=PAGE, delay=PAGE_TIME)])
    urls = [site.url(f"/p/{i}") for i in range(3)] + slow_pages(site, 20, "/q/")
    result = await run_crawl(
        urls,
        {
            "CONCURRENT_REQUESTS": 100,
            "CONCURRENT_REQUESTS_PER_DOMAIN": 3,
            "REP_FRONTIER": True,
            "RETRY_ENABLED": True,
            "RETRY_TIMES": 2,
            **PATIENT,
        },
    )
    assert sorted(result.responses) == sorted(urls)
    assert len(site.page_hits()) == 3 + 3 + 20  # the three 429s retried once
    assert most_at_once(site.page_hits()) == 3
    stats = result.rep_stats()
    assert stats["rep/slowdown/held"] >= 1  # some waited at the gate
    assert "rep/slot_limit/held" not in stats


@pytest_twisted.ensureDeferred
async def test_download_slots_concurrency_holds(site: ScriptedServer) -> None:
    """A slot's own DOWNLOAD_SLOTS concurrency is its limit, above or below the default."""
    result = await released_together(
        site,
        {
            "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
            "DOWNLOAD_SLOTS": {"127.0.0.1": {"concurrency": 3}},
        },
    )
    assert most_at_once(site.page_hits("/p/")) == 3
    assert result.stats["rep/slot_limit/held"] > 0


@pytest_twisted.ensureDeferred
async def test_each_site_has_its_own_limit(site: ScriptedServer) -> None:
    """Four host names on one server, 15 pages each, all known at once: at most
    2 in flight per host, and the hosts do not wait for each other: the first
    pages wait at the server until 8 are there, 2 of each host (a host held to
    fewer, or one waiting for another, would leave them waiting)."""
    site.robots(ROBOTS)
    hosts = [f"limit{i}.test" for i in range(4)]
    all_places = Gate(after=2 * len(hosts))  # opened by the 8th page to arrive
    urls = []
    for i in range(15):
        path = f"/p/{i}"
        site.script(
            path,
            Reply(
                body=PAGE, delay=PAGE_TIME, opens=all_places, wait_for=all_places, wait_timeout=30
            ),
        )
        urls += [f"http://{host}:{site.port}{path}" for host in hosts]
    with loopback_names():
        result = await run_crawl(urls, {**OTHER_QUEUE, "CONCURRENT_REQUESTS_PER_DOMAIN": 2})
    assert sorted(result.responses) == sorted(urls)
    assert all_places.is_set(), "the hosts' places were never all taken at once"
    seen = by_host(site)
    assert sorted(seen) == hosts
    first = sorted(site.page_hits(), key=lambda hit: hit.time)[: 2 * len(hosts)]
    assert Counter(host_of(hit) for hit in first) == dict.fromkeys(hosts, 2)
    assert max(most_at_once(hits) for hits in seen.values()) <= 2


@pytest_twisted.ensureDeferred
async def test_meta_download_slot_shares_one_limit(site: ScriptedServer) -> None:
    """Two host names in one ``download_slot``: the slot's limit covers both."""
    from scrapy import Request

    site.robots(ROBOTS)
    urls = []
    for path in slow_pages(site, 12):
        tail = path.split(str(site.port), 1)[1]
        urls += [f"http://{host}.test:{site.port}{tail}" for host in ("one", "two")]
    requests: list[str | Request] = [
        Request(url, dont_filter=True, meta={"download_slot": "shared"}) for url in urls
    ]
    with loopback_names():
        result = await run_crawl(requests, {**OTHER_QUEUE, "CONCURRENT_REQUESTS_PER_DOMAIN": 2})
    assert sorted(result.responses) == sorted(urls)
    assert most_at_once(site.page_hits("/p/")) == 2


@pytest_twisted.ensureDeferred
async def test_a_crawl_delay_site_still_gets_its_gaps(site: ScriptedServer) -> None:
    """Held by the limit and by the Crawl-delay together: both hold."""
    site.robots(b"User-agent: *\nCrawl-delay: 0.4\n")
    urls = slow_pages(site, 6)
    result = await run_crawl(urls, {**OTHER_QUEUE, "CONCURRENT_REQUESTS_PER_DOMAIN": 2})
    assert sorted(result.responses) == sorted(urls)
    assert min(gaps(site.page_hits("/p/"))) >= 0.4 - 0.02


@pytest_twisted.ensureDeferred
async def test_off_with_rep_slot_limit_false(site: ScriptedServer) -> None:
    """REP_SLOT_LIMIT = False leaves the slot to Scrapy: nothing held, nothing counted."""
    result = await released_together(
        site, {"CONCURRENT_REQUESTS_PER_DOMAIN": 2, "REP_SLOT_LIMIT": False}
    )
    assert not [key for key in result.rep_stats() if key.startswith("rep/slot_limit/")]


@pytest_twisted.ensureDeferred
async def test_cached_responses_free_their_place_at_once(
    site: ScriptedServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HttpCacheMiddleware answers never reach the slot: they must not hold
    its places (which would pace a cached crawl at 2 pages per REACH_TIMEOUT).
    The reach timeout is moved out of reach here (600 s): one place held by a
    cached answer until it would keep the next page back past
    CLOSESPIDER_TIMEOUT."""
    monkeypatch.setattr(ledger, "REACH_TIMEOUT", 600.0)
    site.robots(ROBOTS)
    urls = [site.url(f"/p/{i}") for i in range(30)]  # quick pages: only the cache matters
    cache = {
        "HTTPCACHE_ENABLED": True,
        "HTTPCACHE_DIR": str(tmp_path / "cache"),
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "CLOSESPIDER_TIMEOUT": 30,
        **OTHER_QUEUE,
    }
    await run_crawl(urls, cache)
    assert len(site.page_hits("/p/")) == 30
    again = await run_crawl(urls, cache)
    assert sorted(again.responses) == sorted(urls)
    assert len(site.page_hits("/p/")) == 30  # all from the cache
    assert again.stats["finish_reason"] == "finished"


class DropMarked:
    """A downloader middleware after the robots middleware that drops the
    requests marked ``drop``, as a project's own filter would."""

    def process_request(self, request: Request, spider: Any = None) -> None:
        if request.meta.get("drop"):
            raise IgnoreRequest("dropped by a later middleware")


@pytest_twisted.ensureDeferred
async def test_with_scrapy_reps_queue_a_dropped_request_frees_its_place_at_once(
    site: ScriptedServer,
) -> None:
    """With scrapy-rep's queue, the downloader's active set tells when a
    request leaves it: a request a later middleware drops frees its place
    then, not at the sweep half a second to a second later (counted
    rep/slot_limit/not_reached), which would pace a one-place slot at one
    request per sweep."""
    site.robots(ROBOTS)
    kept = [site.url(f"/p/{i}") for i in range(10)]
    dropped = [Request(site.url(f"/d/{i}"), meta={"drop": True}) for i in range(10)]
    urls: list[str | Request] = [u for pair in zip(kept, dropped, strict=True) for u in pair]
    result = await run_crawl(
        urls,
        {
            "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
            "REP_FRONTIER": True,
            "DOWNLOADER_MIDDLEWARES": {DropMarked: 950},
        },
    )
    assert sorted(result.responses) == sorted(kept)
    assert all(result.failed_with(r.url) is IgnoreRequest for r in dropped)
    assert not site.page_hits("/d/")
    stats = result.rep_stats()
    assert "rep/slot_limit/not_reached" not in stats  # no place waited for the sweep


class _ActiveRequests(MutableSet[Request]):
    """A downloader's active set that is no ``set``, as a Scrapy release might
    make it: the frontier cannot be told of departures from it."""

    def __init__(self) -> None:
        self._requests: set[Request] = set()

    def __contains__(self, request: object) -> bool:
        return request in self._requests

    def __iter__(self) -> Iterator[Request]:
        return iter(self._requests)

    def __len__(self) -> int:
        return len(self._requests)

    def add(self, request: Request) -> None:
        self._requests.add(request)

    def discard(self, request: Request) -> None:
        self._requests.discard(request)


class UnwatchedDownloader(Downloader):
    def __init__(self, crawler: Any) -> None:
        super().__init__(crawler)
        self.active = _ActiveRequests()  # type: ignore[assignment]


@pytest_twisted.ensureDeferred
async def test_with_scrapy_reps_queue_unwatched_the_slot_still_holds(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A downloader whose active set the frontier cannot watch (logged at
    start): the queue counts the requests it handed out until they are no
    longer under way, so it still keeps the slot to 2 and the crawl ends."""
    site.robots(ROBOTS)
    urls = slow_pages(site, 12)
    with caplog.at_level(logging.ERROR):
        result = await run_crawl(
            urls,
            {
                "CONCURRENT_REQUESTS": 100,
                "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
                "REP_FRONTIER": True,
                "DOWNLOADER": UnwatchedDownloader,
                **PATIENT,
                "CLOSESPIDER_TIMEOUT": 30,  # a slot left full for good fails, not hangs
            },
        )
    assert sorted(result.responses) == sorted(urls)
    assert most_at_once(site.page_hits("/p/")) == 2
    assert any("Downloader.active" in r.getMessage() for r in caplog.records)


def test_a_scrapy_without_what_the_limit_needs_is_named() -> None:
    """A Scrapy release that moved a downloader internal is reported at start."""

    class Moved:
        def __init__(self) -> None:
            self.slots: dict[str, object] = {}
            self.per_slot_settings: dict[str, object] = {}

    assert limit_problems(Moved()) == [
        "Downloader.get_slot_key(request) is missing",
        "Downloader.domain_concurrency is missing",
        "Downloader.ip_concurrency is missing",
    ]
