"""Behaviours of Scrapy's own RobotsTxtMiddleware that its users rely on, kept by ours.

Each test runs a real crawl against a local server: a request's own
User-Agent header, the request carried by Scrapy's ``robots_parsed`` signal,
a robots.txt request refused by another downloader middleware (an offline
HTTP cache replay), and the warnings for settings that would silently do
nothing (``ROBOTSTXT_PARSER``, misspelt ``REP_*`` names).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from crawls import run_crawl
from scrapy import Request, signals
from scrapy.crawler import Crawler
from servers import ScriptedServer, gaps

from scrapy_rep import ForbiddenByRobots

OTHERBOT = "User-agent: OtherBot\nDisallow: /private\n"


# -- the request's own User-Agent header ----------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_request_user_agent_header_is_the_agent_obeyed(site: ScriptedServer) -> None:
    """As in Scrapy: without ROBOTSTXT_USER_AGENT, a User-Agent header the spider
    set on a request is the agent its robots.txt group is chosen for."""
    site.robots(OTHERBOT)
    as_otherbot = Request(site.url("/private/a"), headers={"User-Agent": "OtherBot/1.0"})
    result = await run_crawl([as_otherbot, site.url("/private/b")])
    assert site.hits("/private/a") == 0
    assert result.failed_with(site.url("/private/a")) is ForbiddenByRobots
    assert site.hits("/private/b") == 1  # USER_AGENT (ExampleBot): no group, allowed


@pytest_twisted.ensureDeferred
async def test_robotstxt_user_agent_wins_over_the_request_header(site: ScriptedServer) -> None:
    """ROBOTSTXT_USER_AGENT names the crawler for every request, whatever its header."""
    site.robots(OTHERBOT)
    as_otherbot = Request(site.url("/private/a"), headers={"User-Agent": "OtherBot/1.0"})
    await run_crawl([as_otherbot], {"ROBOTSTXT_USER_AGENT": "ExampleBot"})
    assert site.hits("/private/a") == 1


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_the_header_agent_gets_its_own_crawl_delay(site: ScriptedServer) -> None:
    """The delay comes from the same group as the verdict."""
    site.robots("User-agent: OtherBot\nCrawl-delay: 0.6\n\nUser-agent: *\nDisallow:\n")
    urls = [Request(site.url(f"/p{i}"), headers={"User-Agent": "OtherBot/1.0"}) for i in range(3)]
    result = await run_crawl(urls)
    spacing = gaps(site.page_hits("/p"))
    assert len(spacing) == 2 and min(spacing) >= 0.55, spacing
    assert result.stats.get("rep/forbidden") is None


# -- robots_parsed ------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_scrapy_robots_parsed_carries_the_request_that_triggered_the_fetch(
    site: ScriptedServer,
) -> None:
    robots_parsed = getattr(signals, "robots_parsed", None)
    if robots_parsed is None:
        pytest.skip("Scrapy's robots_parsed signal exists since Scrapy 2.18")
    site.robots("User-agent: *\nDisallow: /private\n")
    seen: list[tuple[str, bool]] = []

    def listen(crawler: Crawler) -> None:
        def parsed(robotparser: Any, request: Request) -> None:
            seen.append((request.url, robotparser.allowed(site.url("/private/x"), "ExampleBot")))

        crawler.signals.connect(parsed, signal=robots_parsed, weak=False)

    await run_crawl([site.url("/a")], before=listen)
    assert seen == [(site.url("/a"), False)]


# -- a robots.txt request refused locally ---------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_offline_cache_replay_without_robots_txt_crawls_on(
    site: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """HttpCacheMiddleware with HTTPCACHE_IGNORE_MISSING refuses the robots.txt
    request (IgnoreRequest): no server said anything, so as in Scrapy the pages
    are replayed (RFC 9309 §2.3.1.4 is about server and network errors)."""
    cache = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_DIR": str(tmp_path / "cache")}
    urls = [site.url("/a"), site.url("/b")]
    await run_crawl(urls, {**cache, "ROBOTSTXT_OBEY": False})  # record pages only
    assert site.hits("/robots.txt") == 0
    site.close()  # offline from now on

    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        result = await run_crawl(urls, {**cache, "HTTPCACHE_IGNORE_MISSING": True})
    assert sorted(result.responses) == sorted(urls)
    assert result.stats["rep/robotstxt/outcome/refused_locally"] == 1
    assert "rep/robotstxt/outcome/unreachable" not in result.stats
    warnings = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(warnings) == 1 and site.origin in warnings[0], warnings


# -- settings that would do nothing -------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_robotstxt_parser_not_used_is_said_once(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    site.robots("User-agent: *\nDisallow: /private\n")
    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        await run_crawl(
            [site.url("/private/a")], {"ROBOTSTXT_PARSER": "scrapy.robotstxt.PythonRobotParser"}
        )
    said = [r.getMessage() for r in caplog.records if "ROBOTSTXT_PARSER" in r.getMessage()]
    assert len(said) == 1 and "PythonRobotParser" in said[0] and "not used" in said[0]
    assert site.hits("/private/a") == 0  # our parser decided


@pytest_twisted.ensureDeferred
async def test_our_parser_setting_is_not_warned_about(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    site.robots("User-agent: *\nDisallow: /private\n")
    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        await run_crawl([site.url("/a")], {"ROBOTSTXT_PARSER": "scrapy_rep.RobotParser"})
    assert not [r for r in caplog.records if "ROBOTSTXT_PARSER" in r.getMessage()]


@pytest_twisted.ensureDeferred
async def test_a_misspelt_setting_names_the_closest_known_one(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        await run_crawl([site.url("/a")], {"REP_UNREACHEABLE": "allow"})
    said = [r.getMessage() for r in caplog.records if "REP_UNREACHEABLE" in r.getMessage()]
    assert said == ["scrapy-rep: unknown setting REP_UNREACHEABLE is ignored; "
                    "did you mean REP_UNREACHABLE?"]  # fmt: skip
