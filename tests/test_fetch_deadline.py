"""REP_FETCH_TIMEOUT on scrapy-rep's clock (scrapy_rep/_slots/deadline.py): a
robots.txt that never answers ends when the fetch's time has passed on the
clock, the way Scrapy's own download timeout ends it, in one real crawl."""

from __future__ import annotations

from types import ModuleType

import pytest_twisted
from clock_steps import settle, until
from crawls import run_crawl
from scrapy.crawler import Crawler
from servers import PAGE, Gate, Reply, ScriptedServer
from twisted.internet.defer import ensureDeferred

from scrapy_rep import RobotsTxtUnavailable
from scrapy_rep._download import TIMEOUT

FETCH_TIMEOUT = 60.0  # far past any stall of a loaded machine: only the clock ends it


@pytest_twisted.ensureDeferred
async def test_a_hanging_robots_txt_ends_at_rep_fetch_timeout_on_the_clock(
    site: ScriptedServer, rep_clock: ModuleType, fetch_starts: list[float]
) -> None:
    """1 s of the clock before REP_FETCH_TIMEOUT the fetch is still waiting; 1 s
    after it, it has ended as Scrapy's download timeout ends one (its exception
    counted by Scrapy's downloader stats and by scrapy-rep's, its message, no
    retry), the origin is unreachable and its page dropped, all in a moment of
    real time. Without the clock's deadline the crawl would wait 60 real s."""
    never = Gate()
    site.script("/robots.txt", Reply(wait_for=never, wait_timeout=2 * FETCH_TIMEOUT))
    site.script("/page", Reply(body=PAGE))
    crawlers: list[Crawler] = []
    crawl = ensureDeferred(
        run_crawl(
            [site.url("/page")],
            {"REP_FETCH_TIMEOUT": FETCH_TIMEOUT},
            before=crawlers.append,
        )
    )
    try:
        await until(lambda: site.hits("/robots.txt"))
        [start] = fetch_starts
        rep_clock.advance(max(start + FETCH_TIMEOUT - 1 - rep_clock.now(), 0.0))  # 1 s before
        await settle()
        stats = crawlers[0].stats
        assert stats is not None
        assert stats.get_value("rep/robotstxt/outcome/unreachable") is None, "ended early"
        rep_clock.advance(2)  # 1 s after
        await until(lambda: crawl.called, within=FETCH_TIMEOUT / 4)
    finally:
        never.set()
    result = await crawl
    name = f"{TIMEOUT.__module__}.{TIMEOUT.__qualname__}"
    counted = result.stats
    assert counted["rep/robotstxt/outcome/unreachable"] == 1
    assert counted[f"downloader/exception_type_count/{name}"] == 1  # Scrapy's own path
    assert counted[f"rep/robotstxt/exception_count/{name}"] == 1
    assert counted.get("rep/robotstxt/retry_count", 0) == 0  # a timeout is not asked again
    assert site.hits("/robots.txt") == 1
    assert site.hits("/page") == 0
    failure = result.failures[site.url("/page")]
    assert isinstance(failure.value, RobotsTxtUnavailable), failure
    assert "took longer than" in str(failure.value), failure.value
