"""An unreachable origin's backoff outlives its rules in a broad crawl (REP_BACKOFF_MAX_ORIGINS).

Three times as many origins as the rules cache holds (``http://uN.test:PORT``,
all resolved to one local server) whose robots.txt answers 503, crawled with a
rules cache of 10 origins (REP_CACHE_MAX_ORIGINS) in rounds: each round starts
when the crawl is idle, so by then two origins in three left the cache. Their
retry time and failure count stay in the compact backoff table, so none is
asked again before its backoff is over, and each outage is announced by one
WARNING, also when the origin is asked again after the backoff (the test
moves scrapy-rep's clock 600 s forward: rep_clock). One crawl of three rounds checks both.
The table itself keeps its bound and its 14 bytes an origin (tracemalloc).
"""

from __future__ import annotations

import logging
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
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

CACHE = 10
ORIGINS = 3 * CACHE
"""Evicted origins outnumber those in the cache two to one: a backoff kept only
for the cache and as many again (the bug this guards) leaves some unkept."""


class Rounds(Spider):
    """Requests ``rounds[0]``; each later round once the crawl is idle, after
    moving scrapy-rep's clock forward by its ``pauses`` entry (seconds), and
    after ``ended(n)`` noted what round ``n`` did."""

    name = "rounds"

    def __init__(
        self,
        rounds: list[list[str]],
        pauses: list[float],
        failures: list[list[Failure]],
        ended: Callable[[int], None],
    ) -> None:
        super().__init__()
        self.rounds = rounds
        self.pauses = pauses
        self.failures = failures
        self.ended = ended
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
        self.failures[self.next_round - 1].append(failure)

    def idle(self) -> None:
        if self.pending:
            raise DontCloseSpider
        self.ended(self.next_round - 1)
        if self.next_round >= len(self.rounds):
            return
        from twisted.internet import reactor

        urls = self.rounds[self.next_round]
        _clock.advance(self.pauses[self.next_round - 1])
        self.next_round += 1
        self.pending = True
        reactor.callLater(0, self.crawl, urls)  # type: ignore[attr-defined]
        raise DontCloseSpider

    def crawl(self, urls: list[str]) -> None:
        self.pending = False
        engine = self.crawler.engine
        assert engine is not None
        for url in urls:
            engine.crawl(self.request(url))


@dataclass
class Round:
    """What one round did: its requests' failures, the robots.txt requests
    the server got by host name, the stats and the unreachable WARNINGs by
    origin (each counted from the crawl's start to the round's end)."""

    failures: list[Failure] = field(default_factory=list)
    robots_asked: Counter[str] = field(default_factory=Counter)
    stats: dict[str, Any] = field(default_factory=dict)
    warned: Counter[str] = field(default_factory=Counter)


async def crawl_in_rounds(
    site: ScriptedServer,
    pauses: list[float],
    settings: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> list[Round]:
    """A round of ``ORIGINS`` origins' pages, then one more after each pause."""
    urls = [
        [f"http://u{i}.test:{site.port}/page{n}" for i in range(ORIGINS)]
        for n in range(len(pauses) + 1)
    ]
    rounds = [Round() for _ in urls]
    crawler = get_crawler(
        Rounds,
        {
            **BASE_SETTINGS,
            "REP_CACHE_MAX_ORIGINS": CACHE,
            "CONCURRENT_REQUESTS": 16,  # Scrapy 2.14 sleeps 0.2 s on each dropped page
            "LOG_LEVEL": "INFO",
            **PATIENT,
            **settings,
        },
    )

    def ended(number: int) -> None:
        assert crawler.stats is not None
        done = rounds[number]
        done.robots_asked = robots_requests(site)
        done.stats = dict(crawler.stats.get_stats())
        done.warned = unreachable_warnings(caplog)

    with caplog.at_level(logging.INFO), loopback_names():
        await deferred_from_coro(
            crawler.crawl_async(
                rounds=urls,
                pauses=pauses,
                failures=[done.failures for done in rounds],
                ended=ended,
            )
        )
    return rounds


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


BACKOFF = 600.0  # REP_RETRY_MIN and REP_RETRY_MAX


@pytest_twisted.ensureDeferred
async def test_an_evicted_unreachable_origin_waits_out_its_backoff_and_is_announced_once(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture, rep_clock: ModuleType
) -> None:
    """Three rounds over 30 unreachable origins (robots.txt 503, a backoff
    of REP_RETRY_MIN = REP_RETRY_MAX = 600 s) with a rules cache of 10.

    Round 2 comes at once, well within the backoff: no robots.txt is asked
    for again, each origin's second page is dropped from the remembered
    backoff. (Before: only the 10 in the cache and 10 more were remembered:
    10 origins were asked again at once, and warned about twice.)

    Round 3 comes after the backoff (601 s of scrapy-rep's clock, moved
    forward by the test): every robots.txt is asked again, once, and fails
    again; that is the same outage, so no second WARNING (before: the
    evicted origins were announced again, their failure count lost with
    their rules)."""
    site.script("/robots.txt", Reply(status=503))
    settings = {"REP_RETRY_MIN": BACKOFF, "REP_RETRY_MAX": BACKOFF}
    first, within, after = await crawl_in_rounds(site, [0.0, BACKOFF + 1], settings, caplog)
    for done in (first, within, after):
        assert len(done.failures) == ORIGINS  # none vanished
        assert {type(failure.value) for failure in done.failures} == {RobotsTxtUnavailable}
    # within the backoff
    assert len(first.robots_asked) == ORIGINS
    assert within.robots_asked == first.robots_asked
    again = sorted(host for host, count in within.robots_asked.items() if count > 1)
    assert not again, f"{len(again)} origins asked again before their backoff: {again[:5]}..."
    assert within.stats["rep/robotstxt/outcome/unreachable"] == ORIGINS
    assert len(within.warned) == ORIGINS
    assert set(within.warned.values()) == {1}
    # after it
    assert len(after.robots_asked) == ORIGINS
    assert set(after.robots_asked.values()) == {2}
    assert after.stats["rep/robotstxt/outcome/unreachable"] == 2 * ORIGINS
    assert len(after.warned) == ORIGINS
    assert set(after.warned.values()) == {1}, Counter(after.warned.values())


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
