"""Every download scrapy-rep makes on its own gets the same bounds, each hop and each policy file.

A header flood on a robots.txt redirect hop or on a tdmrep.json (crawled in a
process of its own, tests/_measured_crawl.py, whose peak memory is measured),
a robots.txt whose ``Content-Encoding`` names no compression, and redirect
hops that answer late or hang against ``REP_FETCH_TIMEOUT`` (on scrapy-rep's
clock, which the test moves), each against real local servers.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import pytest_twisted
from clock_steps import settle, until
from crawls import run_crawl, run_reporting
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import Response
from servers import Flood, Gate, Raw, Reply, ScriptedServer
from twisted.internet.defer import ensureDeferred

from scrapy_rep import ForbiddenByRobots, RobotsTxtUnavailable, _clock
from scrapy_rep._download import TIMEOUT

RULES = b"User-agent: *\nDisallow: /private\n"
MEASURED_CRAWL = Path(__file__).with_name("_measured_crawl.py")
PEAK_MB = 250  # what a crawl meeting these servers may take at most
FLOOD_SECONDS = 20


FLOOD_BOUND = 32 * 2**20
"""The most a flood cut short at 64 KiB gets written: what the kernel buffers on
loopback (a few MB each way). A client reading for the whole fetch timeout took
some 400 MB."""


_HEADER_FLOOD = Reply(
    raw=Raw(
        b"HTTP/1.1 200 OK\r\n",
        Flood((b"X-Flood: " + b"a" * 4000 + b"\r\n") * 64, FLOOD_SECONDS),
    )
)
"""A status line, then header lines for as long as the client listens
(FLOOD_SECONDS at most); ``written`` says how many bytes got into the connection."""


def _measured_crawl(urls: list[str], reactor: str, **settings: Any) -> dict[str, Any]:
    """Crawl ``urls`` in a process of its own (on the reactor pytest runs with):
    what happened, and its peak memory."""
    if reactor == "default":  # Twisted's own reactor, as --reactor=default asks
        settings["TWISTED_REACTOR"] = "twisted.internet.epollreactor.EPollReactor"
    job = json.dumps({"urls": urls, "settings": {"REP_FETCH_RETRIES": 0, **settings}})
    report, _ = run_reporting(str(MEASURED_CRAWL), job, timeout=120)
    return report


# -- header floods -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("where", ["robots-redirect-hop", "tdmrep-json"])
def test_a_header_flood_is_cut_short_on_every_download_of_ours(
    site: ScriptedServer, site2: ScriptedServer, where: str, pytestconfig: pytest.Config
) -> None:
    """A server streaming header lines on the hop a robots.txt redirects to, or
    on its /.well-known/tdmrep.json (REP_PURPOSES naming TDMRep's purpose): the
    answer is given up at 64 KiB of headers, not read for the whole fetch
    timeout (before: ~400 MB for one such origin), and the other origin is
    crawled as usual."""
    settings: dict[str, Any] = {"REP_FETCH_TIMEOUT": 15}
    if where == "robots-redirect-hop":
        site.script("/robots.txt", Reply(status=301, headers={"Location": "/moved/robots"}))
        flooded_path = "/moved/robots"
    else:
        site.robots(RULES)
        flooded_path = "/.well-known/tdmrep.json"
        settings["REP_PURPOSES"] = ["train-ai"]
    site.script(flooded_path, _HEADER_FLOOD)
    site2.robots(RULES)
    report = _measured_crawl(
        [site.url("/a"), site2.url("/a")], pytestconfig.getoption("reactor"), **settings
    )

    assert report["peak_mb"] < PEAK_MB, report
    deadline = time.monotonic() + 5  # the server's thread sees the hang-up after the crawl ends
    while not site.written(flooded_path) and time.monotonic() < deadline:
        time.sleep(0.01)
    [flooded] = site.written(flooded_path)
    assert flooded < FLOOD_BOUND, f"{flooded:,} bytes read: not cut short"
    assert report["seen"][site2.url("/a")] == "HTTP 200"
    stats = report["stats"]
    if where == "robots-redirect-hop":
        assert site.hits("/moved/robots") == 1
        assert report["seen"][site.url("/a")] == RobotsTxtUnavailable.__name__
        assert stats["rep/robotstxt/outcome/unreachable"] == 1
    else:
        assert site.hits("/.well-known/tdmrep.json") == 1
        assert report["seen"][site.url("/a")] == "HTTP 200"  # no rules: nothing reserved
        assert stats["rep/usage/tdmrep/outcome/error"] == 1


BIG_HEADERS = [("X-Big", "a" * 4000)] * 20  # 80 KB of headers, past the 64 KiB bound


@pytest_twisted.ensureDeferred
async def test_the_header_bound_holds_for_our_downloads_and_leaves_pages_alone(
    site: ScriptedServer, site2: ScriptedServer
) -> None:
    """80 KB of headers on the hop a robots.txt redirects to: given up (the
    origin is unreachable); the same headers on a page of the crawl: downloaded
    as Scrapy would (the bound is for scrapy-rep's own requests only)."""
    site.script("/robots.txt", Reply(status=301, headers={"Location": "/moved/robots"}))
    site.script("/moved/robots", Reply(body=RULES, headers=BIG_HEADERS))
    site2.robots(RULES)
    site2.script("/big", Reply(body=b"<html></html>", headers=BIG_HEADERS))
    result = await run_crawl([site.url("/a"), site2.url("/big")])
    assert site.hits("/moved/robots") == 1
    assert result.failed_with(site.url("/a")) is RobotsTxtUnavailable
    assert result.stats["rep/robotstxt/outcome/unreachable"] == 1
    assert result.responses[site2.url("/big")].status == 200


@pytest.mark.slow
@pytest.mark.parametrize(("limit", "outcome"), [(4096, "unreachable"), (0, "parsed")])
def test_rep_headers_max_is_the_bound_and_0_leaves_twisted_unpatched(
    site: ScriptedServer, limit: int, outcome: str, pytestconfig: pytest.Config
) -> None:
    """8 KB of headers on robots.txt: past REP_HEADERS_MAX = 4096 the answer is
    given up (the origin is unreachable); with 0 nothing is bounded, and
    Twisted's parser, which the bound patches for the whole process, is left
    as it is (each crawl in a process of its own)."""
    site.script("/robots.txt", Reply(body=RULES, headers=[("X-Big", "a" * 4000)] * 2))
    report = _measured_crawl(
        [site.url("/a")], pytestconfig.getoption("reactor"), REP_HEADERS_MAX=limit
    )
    assert report["patched"] is (limit > 0)
    assert report["stats"][f"rep/robotstxt/outcome/{outcome}"] == 1


# -- content codings that transform nothing ------------------------------------------------------


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        ("utf-8", RULES),
        ("none", RULES),
        ("binary", RULES),
        ("text/plain", RULES),
        ("UTF-8, identity", RULES),
        ("gzip, none", gzip.compress(RULES, mtime=0)),  # gzip'd, then labelled
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_coding_name_that_compresses_nothing_leaves_the_rules_readable(
    site: ScriptedServer, coding: str, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """``Content-Encoding: utf-8`` (or none, binary, text/plain) names no
    compression: the body is read as it came and its Disallow rules obeyed, as
    Scrapy's own middleware does (before: read as an empty file, everything
    allowed). A real coding around or under such a label is still decoded."""
    site.script(
        "/robots.txt",
        Reply(body=body, headers={"Content-Type": "text/plain", "Content-Encoding": coding}),
    )
    with caplog.at_level(logging.INFO, logger="scrapy_rep.decompression"):
        result = await run_crawl([site.url("/a"), site.url("/private/a")])
    assert site.hits("/a") == 1
    assert site.hits("/private/a") == 0
    assert result.failed_with(site.url("/private/a")) is ForbiddenByRobots
    assert result.stats["rep/robotstxt/outcome/parsed"] == 1
    assert "rep/robotstxt/undecodable" not in result.stats
    said = [r.getMessage() for r in caplog.records if r.name == "scrapy_rep.decompression"]
    assert len(said) == 1, said  # one INFO line names what was ignored
    assert "transform nothing" in said[0], said


# -- REP_FETCH_TIMEOUT over redirect hops ----------------------------------------------------------

FETCH_TIMEOUT = 60.0
"""REP_FETCH_TIMEOUT of the hop tests: it passes only as the test moves
scrapy-rep's clock (``rep_clock``), never on its own in real time."""
FIRST_ANSWER = 40.0
"""Seconds of the clock after which the first hop answers: a redirect to a hop
that hangs. Under REP_FETCH_TIMEOUT, as the next hop's time would be, were
each hop given its own."""


def _hanging_second_hop(site: ScriptedServer, first: str, final: Reply) -> tuple[Gate, Gate]:
    """``first`` redirects to /hop1 once the first event is set, /hop1 to /hop2
    once the second is (never, in the test), /hop2 answers ``final``: the
    events."""
    answer, never = Gate(), Gate()
    waits = {"wait_timeout": 2 * FETCH_TIMEOUT}
    site.script(first, Reply(status=301, headers={"Location": "/hop1"}, wait_for=answer, **waits))
    site.script("/hop1", Reply(status=301, headers={"Location": "/hop2"}, wait_for=never, **waits))
    site.script("/hop2", final)
    return answer, never


async def _over_the_hops(
    site: ScriptedServer,
    first: str,
    clock: ModuleType,
    starts: list[float],
    answer: Gate,
    ended: Callable[[], bool],
) -> None:
    """Moves the clock over the fetch of ``first``: to FIRST_ANSWER of it (still
    under way), where the first hop answers; once /hop1 is asked for, to 1 s
    before REP_FETCH_TIMEOUT from the fetch's start (still under way), then
    past it by 1 s. ``starts``: the fetch_starts fixture (conftest.py), the
    newest being this fetch's. ``ended()``: whether the fetch has ended."""
    await until(lambda: site.hits(first))
    start = starts[-1]
    clock.advance(max(start + FIRST_ANSWER - clock.now(), 0.0))
    await settle()
    assert not ended(), f"ended within {FIRST_ANSWER:g} s of the clock"
    answer.set()
    await until(lambda: site.hits("/hop1"))
    clock.advance(max(start + FETCH_TIMEOUT - 1 - clock.now(), 0.0))  # 1 s before
    await settle()
    assert not ended(), "ended before REP_FETCH_TIMEOUT"
    clock.advance(2)  # 1 s after


def _noting(arrived: list[float]) -> Callable[[Response], list[Request]]:
    """A ``follow`` for run_crawl that notes when each response reached the
    spider (scrapy-rep's clock)."""

    def note(response: Response) -> list[Request]:
        arrived.append(_clock.now())
        return []

    return note


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_rep_fetch_timeout_bounds_a_robots_txt_fetch_hops_included(
    site: ScriptedServer, rep_clock: ModuleType, fetch_starts: list[float]
) -> None:
    """REP_FETCH_TIMEOUT (60 s) bounds the whole fetch, not each hop: the first
    hop answers after 40 s of the clock, a redirect to a hop that hangs; the
    fetch is still under way 1 s before 60 s from its start and has ended 1 s
    after, as a timeout (unreachable), the origin's page dropped, the third hop
    never asked for (with a budget per hop, the second would have had until
    100 s)."""
    answer, never = _hanging_second_hop(
        site, "/robots.txt", Reply(body=b"User-agent: *\nAllow: /\n")
    )
    crawlers: list[Crawler] = []

    def ended() -> bool:
        stats = crawlers[0].stats
        assert stats is not None
        return stats.get_value("rep/robotstxt/outcome/unreachable") is not None

    crawl = ensureDeferred(
        run_crawl([site.url("/a")], {"REP_FETCH_TIMEOUT": FETCH_TIMEOUT}, before=crawlers.append)
    )
    try:
        await _over_the_hops(site, "/robots.txt", rep_clock, fetch_starts, answer, ended)
        await until(lambda: crawl.called, within=FETCH_TIMEOUT / 4)
    finally:
        answer.set()
        never.set()
    result = await crawl

    assert result.failed_with(site.url("/a")) is RobotsTxtUnavailable
    assert result.stats["rep/robotstxt/outcome/unreachable"] == 1
    name = f"{TIMEOUT.__module__}.{TIMEOUT.__qualname__}"
    assert result.stats[f"rep/robotstxt/exception_count/{name}"] == 1
    assert site.hits("/a") == 0
    assert site.hits("/robots.txt") == site.hits("/hop1") == 1
    assert site.hits("/hop2") == 0  # the third hop is never asked for


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_rep_fetch_timeout_bounds_a_tdmrep_json_fetch_hops_included(
    site: ScriptedServer, rep_clock: ModuleType, fetch_starts: list[float]
) -> None:
    """The same hops behind /.well-known/tdmrep.json: the page that waits for it
    has not reached the spider 1 s of the clock before REP_FETCH_TIMEOUT from
    the fetch's start, and reaches it after, with no TDMRep rules (a fetch
    error), the third hop never asked for."""
    site.robots(b"User-agent: *\nAllow: /\n")
    answer, never = _hanging_second_hop(
        site,
        "/.well-known/tdmrep.json",
        Reply(body=b"[]", headers={"Content-Type": "application/json"}),
    )
    arrived: list[float] = []
    crawl = ensureDeferred(
        run_crawl(
            [site.url("/a")],
            {"REP_FETCH_TIMEOUT": FETCH_TIMEOUT, "REP_PURPOSES": ["train-ai"]},
            follow=_noting(arrived),
        )
    )
    try:
        await _over_the_hops(
            site,
            "/.well-known/tdmrep.json",
            rep_clock,
            fetch_starts,
            answer,
            lambda: bool(arrived),
        )
        await until(lambda: crawl.called, within=FETCH_TIMEOUT / 4)
    finally:
        answer.set()
        never.set()
    result = await crawl

    assert site.url("/a") in result.responses
    assert len(arrived) == 1
    assert result.stats["rep/usage/tdmrep/outcome/error"] == 1
    assert site.hits("/hop1") == 1
    assert site.hits("/hop2") == 0


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_rep_fetch_retries_count_for_the_whole_fetch_hops_included(
    site: ScriptedServer,
) -> None:
    """REP_FETCH_RETRIES = 1 and two hops that each answer 503 first: the
    first hop is asked again, the second is not (the fetch's one retry is
    spent), so the fetch ends unreachable instead of waiting before every hop."""
    slow_down = Reply(status=503, headers={"Retry-After": "1"})
    site.script("/robots.txt", [slow_down, Reply(status=301, headers={"Location": "/hop1"})])
    site.script("/hop1", [slow_down, Reply(body=RULES, headers={"Content-Type": "text/plain"})])
    result = await run_crawl([site.url("/a")], {"REP_FETCH_RETRIES": 1})
    assert site.hits("/robots.txt") == 2
    assert site.hits("/hop1") == 1
    assert result.stats["rep/robotstxt/retry_count"] == 1
    assert result.failed_with(site.url("/a")) is RobotsTxtUnavailable
