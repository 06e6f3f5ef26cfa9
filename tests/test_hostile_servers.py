"""What a hostile or broken server can make a robots.txt fetch cost: bounded.

Each test runs a real crawl against local servers sending exactly that:
compression bombs and header floods (crawled in a process of their own,
tests/_measured_crawl.py, whose peak memory is measured), a 10 GiB
Content-Length, robots.txt files that never answer next to a site whose rules
are known, 429/503 answers with Retry-After, and garbage headers.
"""

from __future__ import annotations

import json
import logging
import random
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlparse

import pytest
import pytest_twisted
from crawls import CrawlResult, loopback_names, run_crawl, run_reporting
from scrapy import Request, signals
from scrapy.crawler import Crawler
from servers import PAGE, Flood, Gate, Pause, Raw, Reply, ScriptedServer

from scrapy_rep import ForbiddenByRobots, RobotsTxtUnavailable
from scrapy_rep._download import TIMEOUT
from scrapy_rep._inflate import accept_encoding

RULES = b"User-agent: *\nDisallow: /private\n"
TIMEOUT_NAME = f"{TIMEOUT.__module__}.{TIMEOUT.__qualname__}"
GIB = 1 << 30
MEASURED_CRAWL = Path(__file__).with_name("_measured_crawl.py")
PEAK_MB = 250  # what a crawl meeting these servers may take at most


def measured_crawl(urls: list[str], **settings: Any) -> dict[str, Any]:
    """Crawl ``urls`` in a process of its own: what happened, and its peak memory."""
    job = json.dumps({"urls": urls, "settings": {"REP_FETCH_RETRIES": 0, **settings}})
    report, _ = run_reporting(str(MEASURED_CRAWL), job, timeout=120)
    return report


# -- compression bombs ---------------------------------------------------------------------------


PIECE = b"#" * (1 << 20)


def _padded_stream(
    compress: Callable[[bytes], bytes], flush: Callable[[], bytes], finish: Callable[[], bytes]
) -> bytes:
    """RULES, then a comment of 1 GiB (PIECE after PIECE), compressed with a flush
    to a byte boundary after each piece. Once a piece comes out as the one before
    it, the window holds nothing but "#" and every later piece would come out
    alike: the rest is that output repeated, built in milliseconds where
    compressing the whole GiB takes seconds of the suite's CPU."""
    count = GIB // len(PIECE)
    out = [compress(RULES) + flush()]
    previous = b""
    for done in range(count):
        chunk = compress(PIECE) + flush()
        if chunk == previous:
            out.append(chunk * (count - done))
            break
        out.append(chunk)
        previous = chunk
    return b"".join(out) + finish()


def _deflated_bomb() -> bytes:
    """The padded text as a raw deflate stream."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return _padded_stream(
        compressor.compress, lambda: compressor.flush(zlib.Z_SYNC_FLUSH), compressor.flush
    )


def _gzipped_bomb() -> bytes:
    """The padded text as a gzip file: the raw deflate stream in gzip's frame."""
    crc = zlib.crc32(RULES)
    for _ in range(GIB // len(PIECE)):
        crc = zlib.crc32(PIECE, crc)
    frame = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # gzip, deflate, no name, mtime 0
    return frame + _deflated_bomb() + struct.pack("<II", crc, (len(RULES) + GIB) % (1 << 32))


def _zlib_stream(pieces: Any, wbits: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return b"".join(map(compressor.compress, pieces)) + compressor.flush()


def _gzip(data: bytes) -> bytes:
    return _zlib_stream([data], 31)


def _bombs() -> dict[str, tuple[str, bytes]]:
    """name -> (Content-Encoding, body): 1 GiB of robots.txt each, small on the wire."""
    gzipped = _gzipped_bomb()  # ~1 MB: the download stops at 500 KiB of it
    bombs = {
        "gzip": ("gzip", gzipped),
        "gzip-in-gzip": ("gzip, gzip", _gzip(gzipped)),
        "deflate-in-deflate": ("deflate, deflate", zlib.compress(_deflated_bomb(), 9)),
    }
    try:
        import brotli

        compressor = brotli.Compressor(quality=5)
        br = _padded_stream(compressor.process, compressor.flush, compressor.finish)
        bombs["br"] = ("br", br)
        bombs["br-in-gzip"] = ("br, gzip", _gzip(br))
    except ImportError:  # Scrapy 2.14 installs no brotli: the br bomb stays gzip'd
        bombs["br-unreadable"] = ("br", _gzip(gzipped))
    try:
        from backports import zstd
    except ImportError:
        pass
    else:
        zstd_compressor = zstd.ZstdCompressor(level=3)
        flush_block = zstd.ZstdCompressor.FLUSH_BLOCK
        zstd_body = _padded_stream(
            zstd_compressor.compress,
            lambda: zstd_compressor.flush(flush_block),
            zstd_compressor.flush,
        )
        bombs["zstd"] = ("zstd", zstd_body)
    return bombs


@pytest.mark.slow
@pytest.mark.reactor_free  # crawls in a process of its own, on Scrapy's default reactor
def test_compression_bombs_inflate_to_rep_max_size_at_most(
    make_site: Callable[[], ScriptedServer],
) -> None:
    """Every bomb at once, each on its own origin: the crawl stays small, the
    rules at the start of each file are obeyed, the rest is cut (RFC 9309 §2.5)."""
    bombs = _bombs()
    sites: dict[str, ScriptedServer] = {}
    for name, (coding, body) in bombs.items():
        site = sites[name] = make_site()
        site.script(
            "/robots.txt",
            Reply(body=body, headers={"Content-Type": "text/plain", "Content-Encoding": coding}),
        )
    assert max(len(body) for _, body in bombs.values()) < 1_100_000  # small on the wire
    urls = [site.url(path) for site in sites.values() for path in ("/a", "/private/a")]
    report = measured_crawl(urls)

    assert report["peak_mb"] < PEAK_MB, report
    assert not report["errors"], report["errors"]
    decodable = accept_encoding().decode()
    for name, (coding, _) in bombs.items():
        site, seen = sites[name], report["seen"]
        assert seen[site.url("/a")] == "HTTP 200", name
        readable = all(c.strip() in decodable for c in coding.split(","))
        if readable:  # the rules were read, the padding cut
            assert seen[site.url("/private/a")] == ForbiddenByRobots.__name__, name
            assert site.hits("/private/a") == 0, name
    decoded = sum(all(c.strip() in decodable for c in c_.split(",")) for c_, _ in bombs.values())
    assert report["stats"]["rep/robotstxt/truncated"] == decoded
    assert report["stats"].get("rep/robotstxt/undecodable", 0) == len(bombs) - decoded


_NOISE = b"#" + random.Random(9309).randbytes(8000).hex().encode()  # gzip cannot shrink it


@pytest.mark.parametrize(
    ("coding", "body", "rules_read"),
    [
        pytest.param("gzip", b"\x1f\x8bnot gzip at all", False, id="garbage-gzip"),
        pytest.param("gzip", _gzip(RULES + _NOISE)[:-200], True, id="cut-short-gzip"),
        pytest.param("br", b"\xff" * 64, False, id="garbage-br"),
        pytest.param("compress", RULES, False, id="coding-not-decoded-here"),
        pytest.param("gzip, " * 9 + "gzip", RULES, False, id="ten-codings"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_robots_txt_that_cannot_be_decoded_reads_as_an_empty_file(
    site: ScriptedServer, coding: str, body: bytes, rules_read: bool, caplog: Any
) -> None:
    """Broken compressed data, a coding not decoded here or too many codings: what
    decoded before the damage is read (a cut-short gzip keeps its rules),
    otherwise the answer said nothing we can read, so nothing is forbidden."""
    site.script(
        "/robots.txt",
        Reply(body=body, headers={"Content-Type": "text/plain", "Content-Encoding": coding}),
    )
    with caplog.at_level(logging.INFO, logger="scrapy_rep.decompression"):
        result = await run_crawl([site.url("/a"), site.url("/private/a")])
    assert site.hits("/a") == 1
    assert site.hits("/private/a") == (0 if rules_read else 1)
    assert result.stats["rep/robotstxt/outcome/parsed"] == 1
    said = [r.getMessage() for r in caplog.records if "cannot be decoded" in r.getMessage()]
    assert len(said) == (0 if rules_read else 1), said
    assert result.stats.get("rep/robotstxt/undecodable", 0) == (0 if rules_read else 1)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# -- sizes and headers ---------------------------------------------------------------------------


_LYING_LENGTH = Reply(
    raw=Raw(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 10737418240\r\n\r\n",
        RULES + (b"#" * 1023 + b"\n") * 600,
        Pause(3),
    )
)
"""Announces 10 GiB, sends 600 KiB of robots.txt and then nothing."""


@pytest_twisted.ensureDeferred
async def test_a_10_gib_content_length_is_read_up_to_rep_max_size(site: ScriptedServer) -> None:
    """Not "unreachable" before a byte is read (Scrapy's DOWNLOAD_MAXSIZE): the
    first 500 KiB are parsed, as RFC 9309 §2.5 allows and Google does."""
    site.script("/robots.txt", _LYING_LENGTH)
    result = await run_crawl([site.url("/a"), site.url("/private/a")])
    assert site.hits("/a") == 1
    assert site.hits("/private/a") == 0
    assert result.failed_with(site.url("/private/a")) is ForbiddenByRobots
    assert result.stats["rep/robotstxt/outcome/parsed"] == 1
    assert result.stats["rep/robotstxt/truncated"] == 1


_HEADER_FLOOD = Reply(
    raw=Raw(b"HTTP/1.1 200 OK\r\n", Flood((b"X-Flood: " + b"a" * 4000 + b"\r\n") * 64, 20))
)
"""A status line, then header lines for as long as the client listens (20 s at most)."""


@pytest.mark.slow
def test_a_header_flood_is_cut_short(site: ScriptedServer, site2: ScriptedServer) -> None:
    """The flood's fetch ends as its headers pass REP_HEADERS_MAX, not at
    REP_FETCH_TIMEOUT: its failure is the cut connection, not a timeout (with
    ``REP_HEADERS_MAX = 0`` it is Scrapy's download timeout, at 15 s)."""
    site.script("/robots.txt", _HEADER_FLOOD)
    site2.robots(RULES)
    report = measured_crawl([site.url("/a"), site2.url("/a")], REP_FETCH_TIMEOUT=15)
    assert report["peak_mb"] < PEAK_MB, report
    stats = report["stats"]
    failures = [key.rsplit("/", 1)[1] for key in stats if "/robotstxt/exception_count/" in key]
    assert len(failures) == 1, stats
    assert "Timeout" not in failures[0], failures  # not the whole fetch timeout
    assert report["seen"][site.url("/a")] == RobotsTxtUnavailable.__name__
    assert report["seen"][site2.url("/a")] == "HTTP 200"
    assert stats["rep/robotstxt/outcome/unreachable"] == 1


# -- slow robots.txt files and known origins ----------------------------------------------------


KNOWN_PAGES = 300
HANGING_ORIGINS = 40
PLACES = 16  # CONCURRENT_REQUESTS
FETCH_TIMEOUT = 120.0
"""REP_FETCH_TIMEOUT of the hanging-origin tests: it passes only when the test
moves scrapy-rep's clock past it (``TimeUpWhenStuck``), never on its own in
real time; a place held for it would stop the known origin that long."""


@pytest.mark.slow
@pytest.mark.parametrize("frontier", [True, False], ids=["frontier", "scrapy_queue"])
@pytest_twisted.ensureDeferred
async def test_hanging_robots_txt_do_not_stall_a_known_origin(
    site: ScriptedServer,
    make_site: Callable[[], ScriptedServer],
    rep_clock: ModuleType,
    frontier: bool,
) -> None:
    """40 robots.txt that answer only once the known origin's 300 pages are
    asked for, their pages interleaved with those: robots.txt downloads hold
    no places of CONCURRENT_REQUESTS (nor do the requests waiting for them),
    so the known origin's pages are all sent without one fetch timeout (the
    clock is moved past REP_FETCH_TIMEOUT only when hanging origins' requests
    hold every place; with places held, it is, before the 300th page).
    With the frontier, pages wait there; with Scrapy's queue, outside
    CONCURRENT_REQUESTS (REP_MAX_WAITING)."""
    result, holds = await _known_origin_beside_hanging_ones(site, make_site, rep_clock, {})
    assert not [hold for hold in holds if hold[0] < KNOWN_PAGES], holds
    assert result.stats.get(f"downloader/exception_type_count/{TIMEOUT_NAME}", 0) == 0
    _all_known_pages_sent_and_hanging_origins_unreachable(site, result)


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_waiting_inside_concurrent_requests_costs_at_most_the_fetch_timeout(
    site: ScriptedServer, make_site: Callable[[], ScriptedServer], rep_clock: ModuleType
) -> None:
    """REP_MAX_WAITING = 0 with Scrapy's queue (the frontier keeps waiting
    pages in the scheduler, where they hold no place at all): requests waiting
    for robots.txt hold their places, as in Scrapy (that is what 0 asks for),
    so 40 hanging origins on 16 places hold the known origin back for their
    fetch timeout, once per 16 of them:
    every time the clock had to be moved past REP_FETCH_TIMEOUT while known
    pages were left, the 16 places were all held by pages waiting, and the
    robots.txt downloads themselves held none (before, they held places too:
    the known origin waited 99.8 s). Each of those fetches ended as Scrapy's
    download timeout ends one (the others are answered once the known pages
    are all asked for)."""
    result, holds = await _known_origin_beside_hanging_ones(
        site, make_site, rep_clock, {"REP_MAX_WAITING": 0, "REP_FRONTIER": False}
    )
    held_back = [hold for hold in holds if hold[0] < KNOWN_PAGES]
    assert held_back, holds
    assert all(waiting == PLACES for _, waiting in held_back), holds
    assert len(holds) <= -(-HANGING_ORIGINS // PLACES), holds
    timeouts = result.stats[f"downloader/exception_type_count/{TIMEOUT_NAME}"]
    assert timeouts == PLACES * len(held_back), holds
    _all_known_pages_sent_and_hanging_origins_unreachable(site, result)


class TimeUpWhenStuck:
    """Moves scrapy-rep's clock past REP_FETCH_TIMEOUT whenever only that can
    move the crawl: every place of CONCURRENT_REQUESTS (the downloader's active
    set) held by a hanging origin's request while known pages are left, once
    the robots.txt of each of those origins reached its server (a fetch still
    queued would not end). (Once the known pages are all asked for, the
    hanging servers answer: the crawl moves without the clock.)
    Notes, each time, how many known pages had been sent and how many hanging
    origins' pages held a place."""

    def __init__(self, clock: ModuleType, known: ScriptedServer) -> None:
        self._clock = clock
        self._known = known
        self._crawler: Crawler | None = None
        self.servers: dict[str, ScriptedServer] = {}  # host name -> hanging server
        self._moved_for: set[Request] = set()  # held a place at the last move
        self.holds: list[tuple[int, int]] = []  # (known pages sent, hanging pages held)

    def connect(self, crawler: Crawler) -> None:
        from twisted.internet import task

        self._crawler = crawler
        loop = task.LoopingCall(self._look)
        loop.start(0.05, now=False)
        crawler.signals.connect(loop.stop, signal=signals.engine_stopped)

    def _look(self) -> None:
        engine = self._crawler.engine if self._crawler is not None else None
        assert engine is not None
        active = set(engine.downloader.active)
        if not active or self._moved_for & active:
            return  # nothing held, or those held at the last move are still on their way
        hanging = {r for r in active if urlparse(r.url).hostname in self.servers}
        known_sent = len(self._known.page_hits("/p/"))
        if len(hanging) < PLACES or known_sent == KNOWN_PAGES:
            return
        hosts = {urlparse(r.url).hostname for r in hanging}
        if not all(self.servers[host].hits("/robots.txt") for host in hosts if host):
            return
        self.holds.append((known_sent, sum(r.url.endswith("/page") for r in hanging)))
        self._moved_for = hanging
        self._clock.advance(FETCH_TIMEOUT)


async def _known_origin_beside_hanging_ones(
    site: ScriptedServer,
    make_site: Callable[[], ScriptedServer],
    clock: ModuleType,
    settings: dict[str, Any],
) -> tuple[CrawlResult, list[tuple[int, int]]]:
    """300 pages of an origin whose robots.txt answers at once, interleaved with
    one page each of 40 origins (``h<n>.test``, each its own download slot, as
    on the web) whose robots.txt answers only once the known pages are all
    asked for: the crawl, and when the clock was moved (``TimeUpWhenStuck``)."""
    never = Gate(after=KNOWN_PAGES)  # set once the known origin's pages are all asked for
    stuck = TimeUpWhenStuck(clock, site)
    hanging = [make_site() for _ in range(HANGING_ORIGINS)]
    for server in hanging:
        server.script("/robots.txt", Reply(status=503, wait_for=never, wait_timeout=60))
    site.robots(RULES)
    for i in range(KNOWN_PAGES):
        site.script(f"/p/{i}", Reply(body=PAGE, opens=never))
    urls: list[str | Request] = []
    for i in range(KNOWN_PAGES):
        urls.append(f"http://known.test:{site.port}/p/{i}")
        if i % 7 == 3 and hanging:
            host = f"h{len(hanging)}.test"
            stuck.servers[host] = server = hanging.pop()
            urls.append(f"http://{host}:{server.port}/page")
    try:
        with loopback_names():
            result = await run_crawl(
                urls, {"REP_FETCH_TIMEOUT": FETCH_TIMEOUT, **settings}, before=stuck.connect
            )
    finally:
        never.set()
    return result, stuck.holds


def _all_known_pages_sent_and_hanging_origins_unreachable(
    site: ScriptedServer, result: CrawlResult
) -> None:
    assert len(site.page_hits("/p/")) == KNOWN_PAGES
    assert result.stats["rep/robotstxt/outcome/unreachable"] == HANGING_ORIGINS


# -- retries on the server's terms -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("status", [429, 503])
@pytest_twisted.ensureDeferred
async def test_retry_after_is_waited_for_and_every_attempt_counted(
    site: ScriptedServer, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A server saying "slow down" (Retry-After: 2) is asked again 2 s later,
    not 2 ms later; each attempt is counted; no ERROR for a normal condition."""
    site.script(
        "/robots.txt",
        [Reply(status=status, headers={"Retry-After": "2"}), Reply(body=RULES)],
    )
    with caplog.at_level(logging.DEBUG):
        result = await run_crawl([site.url("/a")], {"REP_FETCH_RETRIES": 1, "RETRY_ENABLED": True})
    tries = [hit.time for hit in site.log() if hit.path == "/robots.txt"]
    assert len(tries) == 2, tries
    assert tries[1] - tries[0] >= 1.95, tries
    assert result.stats["rep/robotstxt/request_count"] == 2
    assert result.stats["rep/robotstxt/retry_count"] == 1
    assert site.hits("/a") == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest_twisted.ensureDeferred
async def test_an_unreachable_robots_txt_logs_no_error(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Scrapy's RetryMiddleware no longer gives up on robots.txt with an ERROR
    line: our one WARNING per origin says it."""
    site.script("/robots.txt", Reply(status=503))
    with caplog.at_level(logging.DEBUG):
        result = await run_crawl([site.url("/a")], {"RETRY_ENABLED": True})
    assert result.failed_with(site.url("/a")) is RobotsTxtUnavailable
    assert site.hits("/robots.txt") == result.stats["rep/robotstxt/request_count"] == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "unreachable" in warnings[0].getMessage()


@pytest.mark.parametrize("value", ["\xb2", "-5", "1e3", "9" * 5000])
@pytest_twisted.ensureDeferred
async def test_a_garbage_retry_after_is_no_error(
    site: ScriptedServer, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A Retry-After byte 0xB2, a sign, an exponent, 5,000 digits: unreachable
    with the usual backoff (or capped), never an internal error."""
    site.script("/robots.txt", Reply(status=503, headers={"Retry-After": value}))
    with caplog.at_level(logging.DEBUG):
        result = await run_crawl([site.url("/a")])
    assert result.failed_with(site.url("/a")) is RobotsTxtUnavailable
    assert result.stats["rep/robotstxt/outcome/unreachable"] == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("obey_delay", [True, False])
@pytest_twisted.ensureDeferred
async def test_a_4301_digit_request_rate_is_no_error(
    site: ScriptedServer, obey_delay: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Past Python's int-string limit: an unusable rate, the rules still obeyed."""
    site.robots(b"User-agent: *\nRequest-rate: 1" + b"0" * 4300 + b"/1\nDisallow: /private\n")
    with caplog.at_level(logging.DEBUG):
        result = await run_crawl(
            [site.url("/a"), site.url("/private/a")], {"REP_OBEY_CRAWL_DELAY": obey_delay}
        )
    assert site.hits("/a") == 1
    assert site.hits("/private/a") == 0
    assert result.failed_with(site.url("/private/a")) is ForbiddenByRobots
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
