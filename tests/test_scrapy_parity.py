"""Behaviour of Scrapy's own RobotsTxtMiddleware that its users rely on (issue 9),
run in real crawls with Scrapy's middleware ("scrapy") and with scrapy-rep's
("rep"), side by side: both must pass. (tests/test_scrapy_behaviours.py has
what scrapy-rep adds on top: its outcome, stat and log line for each case.)

One request per crawl where Scrapy's middleware runs: Scrapy 2.14-2.19 hands
the parser only to the first request waiting for a robots.txt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from crawls import run_crawl
from scrapy import Request
from scrapy.crawler import Crawler
from servers import ScriptedServer

from scrapy_rep import _compat

SCRAPY = {"ADDONS": {}}  # BASE_SETTINGS run scrapy-rep through its add-on
OTHER_BOT = {"User-Agent": "OtherBot/1.0 (+http://other.test/bot)"}


MIDDLEWARES = [
    pytest.param(SCRAPY, id="scrapy"),
    pytest.param({}, id="rep"),
]


@pytest.mark.parametrize("middleware", MIDDLEWARES)
@pytest_twisted.ensureDeferred
async def test_the_requests_user_agent_header_picks_the_group(
    site: ScriptedServer, middleware: dict[str, Any]
) -> None:
    """ROBOTSTXT_USER_AGENT unset: the header the spider set, not USER_AGENT."""
    site.robots("User-agent: OtherBot\nDisallow: /private\n")
    await run_crawl([Request(site.url("/private/a"), headers=OTHER_BOT)], middleware)
    assert site.hits("/private/a") == 0


@pytest.mark.parametrize(
    "middleware", [pytest.param(SCRAPY, id="scrapy"), pytest.param({}, id="rep")]
)
@pytest_twisted.ensureDeferred
async def test_robotstxt_user_agent_wins_over_the_header(
    site: ScriptedServer, middleware: dict[str, Any]
) -> None:
    site.robots("User-agent: OtherBot\nDisallow: /private\n")
    settings = {**middleware, "ROBOTSTXT_USER_AGENT": "ExampleBot"}
    await run_crawl([Request(site.url("/private/a"), headers=OTHER_BOT)], settings)
    assert site.hits("/private/a") == 1


@pytest.mark.parametrize(
    "middleware",
    [
        pytest.param(SCRAPY, id="scrapy"),
        pytest.param({}, id="rep"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_robots_parsed_carries_the_request_that_triggered_the_download(
    site: ScriptedServer, middleware: dict[str, Any]
) -> None:
    if _compat.ROBOTS_PARSED is None:
        pytest.skip(f"Scrapy {_compat.SCRAPY_VERSION} has no robots_parsed signal (2.18)")
    site.robots("User-agent: *\nDisallow: /private\n")
    seen: list[str] = []

    def listen(crawler: Crawler) -> None:
        crawler.signals.connect(
            lambda robotparser, request: seen.append(request.url),
            signal=_compat.ROBOTS_PARSED,
            weak=False,
        )

    await run_crawl([site.url("/page")], middleware, before=listen)
    assert seen == [site.url("/page")]


@pytest.mark.parametrize(
    "middleware",
    [
        pytest.param(SCRAPY, id="scrapy"),
        pytest.param({}, id="rep"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_replaying_an_http_cache_without_robots_txt(
    site: ScriptedServer, tmp_path: Path, middleware: dict[str, Any]
) -> None:
    """HTTPCACHE_IGNORE_MISSING refuses the robots.txt request the cache lacks
    (IgnoreRequest from HttpCacheMiddleware): Scrapy crawls the cached pages."""
    site.robots("User-agent: *\nDisallow: /private\n")
    pages = [site.url("/a"), site.url("/b")]
    cache = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_DIR": str(tmp_path)}
    await run_crawl(list(pages), {**middleware, **cache, "ROBOTSTXT_OBEY": False})
    assert site.hits("/robots.txt") == 0
    assert site.hits() == 2

    replay = {**middleware, **cache, "HTTPCACHE_IGNORE_MISSING": True, "CONCURRENT_REQUESTS": 1}
    result = await run_crawl(list(pages), replay)
    assert sorted(result.responses) == pages
    assert site.hits() == 2  # all from the cache
    assert result.stats["httpcache/ignore"] == 1  # the robots.txt request
