"""UsageMiddleware against hostile tdmrep.json servers: real crawls, real local servers.

A page waits for its origin's ``/.well-known/tdmrep.json`` before it reaches
the spider. That wait must cost other origins nothing (it is out of
CONCURRENT_REQUESTS, as robots.txt waits are) and must end (REP_FETCH_TIMEOUT
after the file was asked for); and the file's answers, a probe scrapy-rep
sends on its own, do not pause the site's pages.

Times are taken in the crawler (``response_received``), not at the server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import pytest_twisted
from crawls import CrawlResult, loopback_names, run_crawl
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from servers import Reply, ScriptedServer, gaps

TDMREP = "/.well-known/tdmrep.json"
RULES = b"User-agent: *\nDisallow: /private\n"
TRAIN = {"REP_PURPOSES": ["train-ai"]}
RESERVED = json.dumps([{"location": "/*", "tdm-reservation": 1}]).encode()
KNOWN_PAGES = 300
HOSTILE_ORIGINS = 40
FETCH_TIMEOUT = 5.0


KNOWN_GAP = 4.0
"""Seconds a known origin's pages may pause beside the hostile ones: a busy
machine's event loop, not the wait (before: the whole wait, 9 s and more;
3.1 s with two test suites at once on two cores, load average 17)."""

WAIT_SLACK = 3.0
"""Seconds past REP_FETCH_TIMEOUT a hostile origin's page may reach the spider
after its tdmrep.json was asked for: a busy machine's event loop."""


def json_reply(body: bytes, **kwargs: Any) -> Reply:
    return Reply(body=body, headers={"Content-Type": "application/json"}, **kwargs)


class Arrivals:
    """When each response reached the crawler (``response_received``,
    ``time.time()``: the servers' clock), by host."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}

    def connect(self, crawler: Crawler) -> None:
        crawler.signals.connect(self._received, signal=signals.response_received)

    def _received(self, response: Response, request: Request, spider: Any = None) -> None:
        path = request.url.split("/", 3)[-1]
        if path in ("robots.txt", TDMREP[1:]) or path.startswith("hop/"):
            return  # scrapy-rep's own downloads
        host = request.url.split("/")[2].split(":")[0]
        self.times.setdefault(host, []).append(time.time())

    def largest_gap(self, host: str) -> float:
        return max(gaps(self.times[host]))

    def longest_wait(self, hostile: ScriptedServer) -> float:
        """The longest time from a hostile origin's tdmrep.json request (sent) to
        its page reaching the spider."""
        asked = {
            hit.headers["Host"].split(":")[0]: hit.time
            for hit in reversed(hostile.log())
            if hit.path == TDMREP
        }
        assert len(asked) == HOSTILE_ORIGINS, sorted(asked)
        return max(self.times[host][-1] - asked[host] for host in asked)


def nothing_lost(result: CrawlResult, urls: list[str]) -> None:
    """Every request reached its callback or its errback."""
    reached = set(result.responses) | set(result.failures)
    assert reached == set(urls), set(urls) - reached


async def known_origin_beside_hostile_ones(
    known: ScriptedServer,
    hostile: ScriptedServer,
    settings: dict[str, Any] | None = None,
) -> tuple[CrawlResult, Arrivals, list[str]]:
    """300 pages of an origin whose robots.txt and tdmrep.json answer at once,
    interleaved with one page each of 40 origins (``h<n>.test``, on ``hostile``:
    each its own download slot, as on the web) whose tdmrep.json the test scripts."""
    known.robots(RULES)
    known.script(TDMREP, Reply(status=404))
    hostile.robots(RULES)
    urls: list[str] = []
    left = HOSTILE_ORIGINS
    for i in range(KNOWN_PAGES):
        urls.append(f"http://known.test:{known.port}/p/{i}")
        if i % 7 == 3 and left:
            left -= 1
            urls.append(f"http://h{left}.test:{hostile.port}/page")
    assert not left
    arrivals = Arrivals()
    with loopback_names():
        result = await run_crawl(
            list(urls),
            {**TRAIN, "REP_FETCH_TIMEOUT": FETCH_TIMEOUT, **(settings or {})},
            before=arrivals.connect,
        )
    nothing_lost(result, urls)
    assert len(known.page_hits("/p/")) == KNOWN_PAGES
    assert len(arrivals.times["known.test"]) == KNOWN_PAGES
    return result, arrivals, urls


# -- waiting for tdmrep.json costs other origins nothing -----------------------------------------


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_hanging_tdmrep_json_files_do_not_stall_a_known_origin(
    site: ScriptedServer, site2: ScriptedServer
) -> None:
    """40 tdmrep.json that never answer: their origins' pages wait for them out of
    CONCURRENT_REQUESTS, so the known origin's pages keep flowing (before: each of
    16 places held by such a page for REP_FETCH_TIMEOUT, gaps of 4-5 s); the pages
    waiting go on once the file's time is up, annotated without it."""
    never = threading.Event()
    site2.script(TDMREP, json_reply(RESERVED, wait_for=never, wait_timeout=30))
    try:
        result, arrivals, _ = await known_origin_beside_hostile_ones(site, site2)
    finally:
        never.set()
    gap = arrivals.largest_gap("known.test")
    assert gap < KNOWN_GAP, gap
    hostile = [t for host, times in arrivals.times.items() if host != "known.test" for t in times]
    assert len(hostile) == HOSTILE_ORIGINS
    # each waited at most REP_FETCH_TIMEOUT after its file was asked for, not for
    # the file (30 s); slack: a machine running two suites
    assert arrivals.longest_wait(site2) < FETCH_TIMEOUT + WAIT_SLACK
    stats = result.stats
    assert stats["rep/usage/tdmrep/waited"] >= HOSTILE_ORIGINS
    assert stats["rep/usage/train-ai/unknown"] == KNOWN_PAGES + HOSTILE_ORIGINS


def redirect_chain(hops: int, delay: float) -> dict[str, Reply]:
    """tdmrep.json redirected ``hops`` times, each answer ``delay`` seconds late,
    to a file reserving everything."""
    replies = {TDMREP: Reply(status=302, headers={"Location": "/hop/1"}, delay=delay)}
    for hop in range(1, hops):
        replies[f"/hop/{hop}"] = Reply(
            status=302, headers={"Location": f"/hop/{hop + 1}"}, delay=delay
        )
    replies[f"/hop/{hops}"] = json_reply(RESERVED, delay=delay)
    return replies


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_slow_tdmrep_json_redirect_hops_do_not_stall_a_known_origin(
    site: ScriptedServer, site2: ScriptedServer
) -> None:
    """Each of 40 tdmrep.json goes through 5 redirects of 1.5 s each (9 s in all,
    every hop within REP_FETCH_TIMEOUT): the known origin is not held (before:
    a gap of the whole chain); their pages wait REP_FETCH_TIMEOUT at most and
    are annotated without the file, counted. (A page's wait and its file's
    whole-chain budget end at the same moment: which the event loop sees first
    decides whether the page counts as ``wait_expired``, or the file's error
    reaches it.)"""
    for path, reply in redirect_chain(5, 1.5).items():
        site2.script(path, reply)
    result, arrivals, _ = await known_origin_beside_hostile_ones(site, site2)
    gap = arrivals.largest_gap("known.test")
    assert gap < KNOWN_GAP, gap
    assert arrivals.longest_wait(site2) < FETCH_TIMEOUT + WAIT_SLACK  # not the chain's 9 s
    stats = result.stats
    assert stats["rep/usage/tdmrep/waited"] >= HOSTILE_ORIGINS
    assert stats["rep/usage/tdmrep/outcome/error"] == HOSTILE_ORIGINS  # out of time
    assert stats.get("rep/usage/tdmrep/wait_expired", 0) >= 1
    # annotated without the file (which reserves everything once it comes)
    assert stats["rep/usage/train-ai/unknown"] == KNOWN_PAGES + HOSTILE_ORIGINS


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_without_rep_max_waiting_tdmrep_waiters_hold_places_for_the_fetch_timeout(
    site: ScriptedServer, site2: ScriptedServer
) -> None:
    """REP_MAX_WAITING = 0 asks for Scrapy's way of waiting, inside
    CONCURRENT_REQUESTS: the hanging files' pages then hold the known origin
    back, but for REP_FETCH_TIMEOUT at most each time, and nothing is lost."""
    never = threading.Event()
    site2.script(TDMREP, json_reply(RESERVED, wait_for=never, wait_timeout=30))
    try:
        result, arrivals, _ = await known_origin_beside_hostile_ones(
            site, site2, {"REP_MAX_WAITING": 0}
        )
    finally:
        never.set()
    gap = arrivals.largest_gap("known.test")
    assert 2.0 < gap < 3 * FETCH_TIMEOUT + 3, gap
    assert result.stats["rep/usage/tdmrep/waited"] >= HOSTILE_ORIGINS


# -- tdmrep.json answers do not pause the site ----------------------------------------------------


def site_of_20_pages(site: ScriptedServer) -> tuple[list[str], Callable[[Response], list[Request]]]:
    """/p/0, whose response (after its tdmrep.json answered) leads to 19 more."""
    site.robots(RULES)
    more = [site.url(f"/p/{i}") for i in range(1, 20)]

    def follow(response: Response) -> list[Request]:
        if response.url.endswith("/p/0"):
            return [Request(url, dont_filter=True) for url in more]
        return []

    return [site.url("/p/0"), *more], follow


@pytest_twisted.ensureDeferred
async def test_a_503_with_retry_after_on_tdmrep_json_pauses_nothing(
    site: ScriptedServer,
) -> None:
    """tdmrep.json answers 503 with Retry-After: 99999: the file counts as not
    there, asked again when the answer says (within REP_RETRY_MAX), not after
    REP_RETRY_MIN; the site's pages go on at their pace (before: the whole site
    paused for REP_SLOWDOWN_MAX_DELAY)."""
    site.script(TDMREP, Reply(status=503, headers={"Retry-After": "99999"}))
    urls, follow = site_of_20_pages(site)
    arrivals = Arrivals()
    result = await run_crawl(
        [urls[0]],
        # pages 0.1 s apart: the crawl outlasts REP_RETRY_MIN
        {**TRAIN, "REP_SLOWDOWN_MAX_DELAY": 30, "REP_RETRY_MIN": 0.5, "DOWNLOAD_DELAY": 0.1},
        follow=follow,
        before=arrivals.connect,
    )
    nothing_lost(result, urls)
    times = arrivals.times["127.0.0.1"]
    assert len(times) == 20
    assert 0.5 < max(times) - min(times) < 10, max(times) - min(times)
    stats = result.stats
    assert stats["rep/usage/tdmrep/outcome/error"] == 1
    assert stats["rep/slowdown/well_known_ignored"] == 1
    assert "rep/slowdown/pauses" not in stats
    assert site.hits(TDMREP) == 1


@pytest_twisted.ensureDeferred
async def test_a_503_on_a_page_pauses_the_site_for_what_the_page_asked(
    site: ScriptedServer,
) -> None:
    """The decision is tdmrep.json's alone: a page's 503 (Retry-After: 2) pauses
    the site 2 s, and the file's Retry-After: 99999, answered meanwhile, does not
    lengthen that pause (before: to REP_SLOWDOWN_MAX_DELAY)."""
    site.script(TDMREP, Reply(status=503, headers={"Retry-After": "99999"}))
    site.script("/p/0", [Reply(status=503, headers={"Retry-After": "2"}), Reply()])
    urls, follow = site_of_20_pages(site)
    arrivals = Arrivals()
    started = time.time()
    result = await run_crawl(
        [urls[0]],
        {**TRAIN, "REP_SLOWDOWN_MAX_DELAY": 30, "RETRY_ENABLED": True, "RETRY_TIMES": 1},
        follow=follow,
        before=arrivals.connect,
    )
    nothing_lost(result, urls)
    last = max(arrivals.times["127.0.0.1"]) - started
    assert 1.9 < last < 12, last
    stats = result.stats
    assert stats["rep/slowdown/pauses"] == 1
    assert stats["rep/slowdown/well_known_ignored"] == 1
    assert stats["rep/slowdown/retry_after/honoured"] == 1
