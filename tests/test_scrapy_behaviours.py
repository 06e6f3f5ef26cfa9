"""What scrapy-rep adds to the Scrapy behaviours its users rely on
(tests/test_scrapy_parity.py runs those side by side with Scrapy's middleware).

Each test runs a real crawl against a local server: the delay of a request's
own User-Agent, the outcome, stat and log line of a robots.txt request refused
by another downloader middleware (an offline HTTP cache replay), and the
warnings for settings that would silently do nothing (``ROBOTSTXT_PARSER``,
misspelt ``REP_*`` names).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import pytest_twisted
from crawls import run_crawl
from scrapy import Request
from servers import ScriptedServer, gaps

from scrapy_rep import ForbiddenByRobots

OTHERBOT = "User-agent: OtherBot\nDisallow: /private\n"


# -- the request's own User-Agent header ----------------------------------------------------------


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_the_header_agent_gets_its_own_crawl_delay(site: ScriptedServer) -> None:
    """The delay comes from the same group as the verdict."""
    site.robots("User-agent: OtherBot\nCrawl-delay: 0.6\n\nUser-agent: *\nDisallow:\n")
    urls = [Request(site.url(f"/p{i}"), headers={"User-Agent": "OtherBot/1.0"}) for i in range(3)]
    result = await run_crawl(urls)
    spacing = gaps(site.page_hits("/p"))
    assert len(spacing) == 2, spacing
    assert min(spacing) >= 0.55, spacing
    assert result.stats.get("rep/forbidden") is None


# -- robots_parsed ------------------------------------------------------------------------------


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
    assert len(warnings) == 1, warnings
    assert site.origin in warnings[0], warnings


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
    assert len(said) == 1
    assert "PythonRobotParser" in said[0]
    assert "not used" in said[0]
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
    assert said == ["Unknown setting REP_UNREACHEABLE is ignored; "
                    "did you mean REP_UNREACHABLE?"]  # fmt: skip


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_a_delay_belongs_to_the_agents_written_above_it(site: ScriptedServer) -> None:
    """Google merges the two user-agent lines into one group for Allow/Disallow
    (no rule between them), but slurp's 60 s are not ExampleBot's: it gets the
    0.5 s written under 'User-agent: *'."""
    site.robots(
        "User-agent: slurp\nCrawl-delay: 60\nUser-agent: *\nCrawl-delay: 0.5\nDisallow: /private\n"
    )
    urls = [site.url(f"/p{i}") for i in range(3)] + [site.url("/private/a")]
    result = await run_crawl(urls)
    spacing = gaps(site.page_hits("/p"))
    assert len(spacing) == 2, spacing
    assert min(spacing) >= 0.45, spacing
    assert max(spacing) < 5, spacing
    assert result.failed_with(site.url("/private/a")) is ForbiddenByRobots  # merged group
