"""An unreachable origin's backoff outlives its rules in a broad crawl (REP_BACKOFF_MAX_ORIGINS).

A thousand origins (``http://uN.test:PORT``, all resolved to one local server)
whose robots.txt answers 503, crawled with a rules cache of 100 origins
(REP_CACHE_MAX_ORIGINS) in rounds: each round starts when the crawl is idle,
so by then the origin's rules left the cache long ago. Its retry time and
failure count stay in the compact backoff table, so it is not asked again
before its backoff is over, and its outage is announced by one WARNING.
The table itself keeps its bound and its 14 bytes an origin (tracemalloc).
"""

from __future__ import annotations

import logging
import time
import tracemalloc
from collections import Counter
from types import ModuleType
from typing import Any

import pytest
import pytest_twisted
from crawls import BASE_SETTINGS, PATIENT, loopback_names
from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from servers import Reply, ScriptedServer
from twisted.python.failure import Failure

from scrapy_rep import RobotsTxtUnavailable, _clock
from scrapy_rep._backoff_table import BYTES_PER_ORIGIN, BackoffTable
from scrapy_rep.config import Config
from scrapy_rep.exceptions import InvalidSetting

ORIGINS = 1_000
CACHE = 100


class Rounds(Spider):
    """Requests ``rounds[0]``; each later round once the crawl is idle, after
    moving scrapy-rep's clock ``pause`` seconds forward."""

    name = "rounds"

    def __init__(self, rounds: list[list[str]], pause: float, failures: list[Failure]) -> None:
        super().__init__()
        self.rounds = rounds
        self.pause = pause
        self.failures = failures
        self.next_round = 1
        self.pending = False

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Rounds:
        spider: Rounds = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.idle, signal=signals.spider_idle)
        return spider

    async def start(self) -> Any:
        for url in self.rounds[0]:
            yield self.request(url)

    def request(self, url: str) -> Request:
        return Request(url, callback=self.parse, errback=self.failed, dont_filter=True)

    def parse(self, response: Any) -> None:
        raise AssertionError(f"a page of an unreachable origin was crawled: {response}")

    def failed(self, failure: Failure) -> None:
        self.failures.append(failure)

    def idle(self) -> None:
        if self.pending:
            raise DontCloseSpider
        if self.next_round >= len(self.rounds):
            return
        from twisted.internet import reactor

        urls = self.rounds[self.next_round]
        self.next_round += 1
        self.pending = True
        _clock.advance(self.pause)
        reactor.callLater(0, self.crawl, urls)  # type: ignore[attr-defined]
        raise DontCloseSpider

    def crawl(self, urls: list[str]) -> None:
        self.pending = False
        engine = self.crawler.engine
        assert engine is not None
        for url in urls:
            engine.crawl(self.request(url))


async def crawl_in_rounds(
    site: ScriptedServer, rounds: int, pause: float, settings: dict[str, Any]
) -> tuple[list[Failure], dict[str, Any]]:
    urls = [
        [f"http://u{i}.test:{site.port}/page{n}" for i in range(ORIGINS)] for n in range(rounds)
    ]
    failures: list[Failure] = []
    crawler = get_crawler(
        Rounds,
        {
            **BASE_SETTINGS,
            "REP_CACHE_MAX_ORIGINS": CACHE,
            "CONCURRENT_REQUESTS": 64,
            "LOG_LEVEL": "INFO",
            **PATIENT,
            **settings,
        },
    )
    with loopback_names():
        await deferred_from_coro(crawler.crawl_async(rounds=urls, pause=pause, failures=failures))
    assert crawler.stats is not None
    return failures, crawler.stats.get_stats()


def robots_requests(site: ScriptedServer) -> Counter[str]:
    """How many times each origin's robots.txt was asked for, by host name."""
    return Counter(
        hit.headers.get("Host", "?").split(":")[0]
        for hit in site.log()
        if hit.path == "/robots.txt"
    )


def unreachable_warnings(caplog: pytest.LogCaptureFixture) -> Counter[str]:
    """The WARNINGs saying an origin is unreachable, by origin."""
    found: Counter[str] = Counter()
    for record in caplog.records:
        message = record.getMessage()
        if record.levelno == logging.WARNING and "unreachable" in message:
            found[message.split()[2]] += 1  # "robots.txt of http://uN.test:PORT unreachable"
    return found


@pytest.mark.slow  # a thousand origins, crawled twice
@pytest_twisted.ensureDeferred
async def test_an_evicted_unreachable_origin_is_not_asked_again_before_its_backoff(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Two rounds over 1,000 unreachable origins, well within their backoff
    (REP_RETRY_MIN = 600 s): each robots.txt is asked for once, each origin's
    second page is dropped from the remembered backoff, one WARNING each.
    (Before: only the 100 in the cache and 100 more were remembered: 800
    origins were asked again at once, and warned about twice.)"""
    site.script("/robots.txt", Reply(status=503))
    with caplog.at_level(logging.INFO):
        failures, stats = await crawl_in_rounds(site, 2, 0.0, {"REP_RETRY_MIN": 600})
    asked = robots_requests(site)
    assert len(asked) == ORIGINS
    again = sorted(host for host, count in asked.items() if count > 1)
    assert not again, f"{len(again)} origins asked again before their backoff: {again[:5]}..."
    assert len(failures) == 2 * ORIGINS  # none vanished
    assert {type(failure.value) for failure in failures} == {RobotsTxtUnavailable}
    assert stats["rep/robotstxt/outcome/unreachable"] == ORIGINS
    warned = unreachable_warnings(caplog)
    assert len(warned) == ORIGINS
    assert set(warned.values()) == {1}


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_an_outage_is_announced_once_though_its_origin_left_the_cache(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture, rep_clock: ModuleType
) -> None:
    """The second round comes after the backoff (600 s of scrapy-rep's clock,
    moved forward by the test): every robots.txt is asked again, once, and fails
    again; that is the same outage, so no second WARNING (before: 800 origins
    were announced again, their failure count lost with their rules)."""
    site.script("/robots.txt", Reply(status=503))
    settings = {"REP_RETRY_MIN": 600, "REP_RETRY_MAX": 600}
    with caplog.at_level(logging.INFO):
        failures, stats = await crawl_in_rounds(site, 2, 601, settings)
    asked = robots_requests(site)
    assert len(asked) == ORIGINS
    assert set(asked.values()) == {2}
    assert len(failures) == 2 * ORIGINS
    assert stats["rep/robotstxt/outcome/unreachable"] == 2 * ORIGINS
    warned = unreachable_warnings(caplog)
    assert len(warned) == ORIGINS
    assert set(warned.values()) == {1}, Counter(warned.values())


def test_the_table_holds_its_bound_in_14_bytes_an_origin() -> None:
    """10,000 origins into a table of 5,000: it holds 5,000 at most, in
    14 bytes each (what tracemalloc sees it allocate), and those whose
    backoff ends last are the ones kept, each with its retry time (to a
    tenth of a second, never earlier), failure count and kind of failure."""
    now = time.time()
    origins = [("https", f"site{i}.example", 443) for i in range(10_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        table = BackoffTable(5_000)
        for i, origin in enumerate(origins):
            table.remember(origin, now + i, i % 7 + 1, f"DNSLookupError: no {origin[1]}")
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(table) <= table.bound == 5_000
    assert held < 5_000 * BYTES_PER_ORIGIN + 16_384, held  # (+ the objects around)
    latest = range(8_000, 10_000)
    recalled = {i: table.pop(origins[i]) for i in latest}
    kept = {i: backoff for i, backoff in recalled.items() if backoff is not None}
    assert len(kept) == len(latest)
    for i, backoff in kept.items():
        assert now + i <= backoff.retry_at < now + i + 0.11
        assert backoff.failures == i % 7 + 1
        assert backoff.reason == "DNSLookupError"
    assert table.pop(origins[8_000]) is None  # popped: back in the cache


def test_rep_backoff_max_origins_is_validated() -> None:
    assert Config.from_settings({}).backoff_max_origins == 1_000_000
    assert Config.from_settings({"REP_BACKOFF_MAX_ORIGINS": 0}).backoff_max_origins == 0
    with pytest.raises(InvalidSetting, match="REP_BACKOFF_MAX_ORIGINS"):
        Config.from_settings({"REP_BACKOFF_MAX_ORIGINS": -1})
    table = BackoffTable(0)
    table.remember(("http", "a.example", 80), time.time() + 60, 1, "HTTP 503")
    assert len(table) == 0
