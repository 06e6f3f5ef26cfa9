"""The crawl's one context: whichever scrapy-rep component Scrapy builds first
builds the crawl's robots service, and every other one gets the same; a
crawl that does not obey robots.txt says why."""

from __future__ import annotations

import logging

import pytest
import pytest_twisted
from crawls import run_crawl
from servers import ScriptedServer

from scrapy_rep._robots import robots_off, robots_service

ROBOTS = "User-agent: *\nDisallow: /private/\nContent-Usage: train-ai=n\n"


@pytest_twisted.ensureDeferred
async def test_the_usage_middleware_built_first_shares_the_robots_service(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The usage middleware placed before the robots middleware is built first,
    so it builds the crawl's robots service: the robots middleware gets that
    one, robots.txt is fetched once, and the rules it read reach both."""
    site.robots(ROBOTS)
    settings = {
        "REP_PURPOSES": ["train-ai"],
        "DOWNLOADER_MIDDLEWARES": {
            "scrapy_rep.UsageMiddleware": 50,
            "scrapy_rep.RobotsTxtMiddleware": 100,
            "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
        },
    }
    with caplog.at_level(logging.INFO, logger="scrapy_rep"):
        result = await run_crawl([site.url("/a"), site.url("/private/b")], settings)
    assert site.hits("/robots.txt") == 1
    assert site.hits("/private/b") == 0
    started = [r for r in caplog.records if r.getMessage().startswith("Obeying robots.txt")]
    assert len(started) == 1
    crawler = result.crawler
    service = robots_service(crawler)
    assert service is not None
    assert service.stats is crawler.stats
    assert result.responses[site.url("/a")].meta["rep_usage"] == {"train-ai": False}


@pytest_twisted.ensureDeferred
async def test_a_crawl_that_does_not_obey_robots_txt_says_why(
    site: ScriptedServer,
) -> None:
    """ROBOTSTXT_OBEY = False: the frontier queue runs without a robots
    service, and every component that asks for it is told why."""
    site.robots("User-agent: *\nDisallow: /\n")
    result = await run_crawl([site.url("/a")], {"ROBOTSTXT_OBEY": False})
    assert sorted(site.pages()) == ["/a"]
    assert site.hits("/robots.txt") == 0
    crawler = result.crawler
    assert robots_service(crawler) is None
    assert robots_off(crawler) == "ROBOTSTXT_OBEY is False"
