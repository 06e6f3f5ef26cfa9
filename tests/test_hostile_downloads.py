"""Every download scrapy-rep makes on its own gets the same bounds, each hop and each policy file.

A header flood on a robots.txt redirect hop or on a tdmrep.json (crawled in a
process of its own, tests/_measured_crawl.py, whose peak memory is measured),
a robots.txt whose ``Content-Encoding`` names no compression, and redirect
chains of slow answers against ``REP_FETCH_TIMEOUT``, each against real local
servers.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any, BinaryIO

import pytest
import pytest_twisted
from crawls import run_crawl, run_reporting
from scrapy import Request
from scrapy.http import Response
from servers import Reply, ScriptedServer

from scrapy_rep import ForbiddenByRobots, RobotsTxtUnavailable

RULES = b"User-agent: *\nDisallow: /private\n"
MEASURED_CRAWL = Path(__file__).with_name("_measured_crawl.py")
PEAK_MB = 250  # what a crawl meeting these servers may take at most
FLOOD_SECONDS = 20


FLOODED: list[int] = []
"""Bytes of header lines each flood got into the connection before the client
hung up (or FLOOD_SECONDS passed)."""
FLOOD_BOUND = 32 * 2**20
"""The most a flood cut short at 64 KiB gets written: what the kernel buffers on
loopback (a few MB each way). A client reading for the whole fetch timeout took
some 400 MB."""


def _header_flood(out: BinaryIO) -> None:
    """A status line, then header lines for as long as the client listens (20 s at most)."""
    out.write(b"HTTP/1.1 200 OK\r\n")
    block = (b"X-Flood: " + b"a" * 4000 + b"\r\n") * 64
    written = 0
    deadline = time.monotonic() + FLOOD_SECONDS
    try:
        while time.monotonic() < deadline:
            out.write(block)
            written += len(block)
        out.flush()
    finally:
        FLOODED.append(written)


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
        site.script("/moved/robots", Reply(stream=_header_flood))
    else:
        site.robots(RULES)
        site.script("/.well-known/tdmrep.json", Reply(stream=_header_flood))
        settings["REP_PURPOSES"] = ["train-ai"]
    site2.robots(RULES)
    FLOODED.clear()
    report = _measured_crawl(
        [site.url("/a"), site2.url("/a")], pytestconfig.getoption("reactor"), **settings
    )

    assert report["peak_mb"] < PEAK_MB, report
    deadline = time.monotonic() + 5  # the server's thread sees the hang-up after the crawl ends
    while not FLOODED and time.monotonic() < deadline:
        time.sleep(0.01)
    [flooded] = FLOODED
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

HOP_DELAY = 2.5  # each answer, under REP_FETCH_TIMEOUT, but six of them are not
FETCH_TIMEOUT = 3.0
SLACK = 4.5  # a loaded machine; the old per-hop timeout took 6 x 2.5 s = 15 s


def _slow_chain(site: ScriptedServer, first: str, final: Reply) -> list[str]:
    """``first`` and 5 hops after it, each answering after HOP_DELAY: 5 redirects,
    then ``final``."""
    paths = [first] + [f"/hop{i}" for i in range(1, 6)]
    for path, target in pairwise(paths):
        site.script(path, Reply(status=301, headers={"Location": target}, delay=HOP_DELAY))
    final.delay = HOP_DELAY
    site.script(paths[-1], final)
    return paths


def _noting(arrived: list[float]) -> Callable[[Response], list[Request]]:
    """A ``follow`` for run_crawl that notes when each response reached the spider."""

    def note(response: Response) -> list[Request]:
        arrived.append(time.monotonic())
        return []

    return note


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_rep_fetch_timeout_bounds_a_robots_txt_fetch_hops_included(
    site: ScriptedServer,
) -> None:
    """5 redirect hops of 2.5 s each, every one under REP_FETCH_TIMEOUT (3 s):
    the fetch ends at 3 s as a timeout (unreachable), the origin's page is
    held that long and no longer (before: 15 s, each hop had its own 3 s)."""
    paths = _slow_chain(site, "/robots.txt", Reply(body=b"User-agent: *\nAllow: /\n"))
    arrived: list[float] = []
    started = time.monotonic()
    result = await run_crawl(
        [site.url("/a")], {"REP_FETCH_TIMEOUT": FETCH_TIMEOUT}, follow=_noting(arrived)
    )
    waited = max([*arrived, *result.failed_at.values()]) - started  # dropped or downloaded

    assert waited < FETCH_TIMEOUT + SLACK, waited
    assert result.failed_with(site.url("/a")) is RobotsTxtUnavailable
    assert result.stats["rep/robotstxt/outcome/unreachable"] == 1
    assert site.hits("/a") == 0
    assert sum(site.hits(path) for path in paths) <= 2  # the third hop is never asked for


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_rep_fetch_timeout_bounds_a_tdmrep_json_fetch_hops_included(
    site: ScriptedServer,
) -> None:
    """The same chain behind /.well-known/tdmrep.json: the page that waits for
    it reaches the spider about REP_FETCH_TIMEOUT after the crawl starts, with
    no TDMRep rules (a fetch error), not after all six slow answers."""
    site.robots(b"User-agent: *\nAllow: /\n")
    paths = _slow_chain(
        site,
        "/.well-known/tdmrep.json",
        Reply(body=b"[]", headers={"Content-Type": "application/json"}),
    )
    arrived: list[float] = []
    started = time.monotonic()
    result = await run_crawl(
        [site.url("/a")],
        {"REP_FETCH_TIMEOUT": FETCH_TIMEOUT, "REP_PURPOSES": ["train-ai"]},
        follow=_noting(arrived),
    )

    assert site.url("/a") in result.responses
    assert arrived[0] - started < FETCH_TIMEOUT + SLACK, arrived[0] - started
    assert result.stats["rep/usage/tdmrep/outcome/error"] == 1
    assert sum(site.hits(path) for path in paths) <= 2


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
