"""scrapy_rep.RobotParser: scrapy-rep's rules inside Scrapy's own RobotsTxtMiddleware
(ROBOTSTXT_PARSER), in real crawls; Scrapy's own parser tests are in
test_robotparser_scrapy_suite.py."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from crawls import run_crawl
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.test import get_crawler
from servers import ScriptedServer

from scrapy_rep.robotparser import RobotParser

PARSER = "scrapy_rep.robotparser.RobotParser"
# Scrapy's own middleware with our parser, no scrapy-rep middleware. One request
# at a time: Scrapy 2.14-2.19's middleware hands the parser to the first request
# waiting for a robots.txt only, and lets the others through unchecked.
SCRAPY_WITH_OUR_PARSER = {"ADDONS": {}, "ROBOTSTXT_PARSER": PARSER, "CONCURRENT_REQUESTS": 1}


def parse(body: bytes | str) -> RobotParser:
    return RobotParser.from_crawler(None, body.encode() if isinstance(body, str) else body)


@pytest_twisted.ensureDeferred
async def test_scrapys_middleware_obeys_our_rules(site: ScriptedServer) -> None:
    site.robots("User-agent: *\nDisallow: /private\nAllow: /private/open\nDisallow: /*?sort=\n")
    urls = [site.url(p) for p in ("/a", "/private/a", "/private/open", "/list?sort=up")]
    result = await run_crawl(urls, SCRAPY_WITH_OUR_PARSER)
    assert site.hits("/a") == site.hits("/private/open") == 1
    assert site.hits("/private/a") == site.hits("/list") == 0
    assert result.stats["robotstxt/forbidden"] == 2
    assert result.failed_with(site.url("/private/a")) is IgnoreRequest


@pytest_twisted.ensureDeferred
async def test_a_requests_own_user_agent_header_picks_its_group(site: ScriptedServer) -> None:
    """Scrapy's middleware passes the request's User-Agent header when
    ROBOTSTXT_USER_AGENT is unset; the parser matches its product token."""
    site.robots("User-agent: OtherBot\nDisallow: /private\n\nUser-agent: *\nDisallow: /other\n")
    other = {"User-Agent": "Mozilla/5.0 (compatible; OtherBot/1.0; +http://other.test/)"}
    urls: list[str | Request] = [
        Request(site.url("/private/a"), headers=other),
        Request(site.url("/other/a"), headers=other),
        site.url("/private/b"),  # USER_AGENT: ExampleBot -> the * group
        site.url("/other/b"),
    ]
    await run_crawl(urls, SCRAPY_WITH_OUR_PARSER)
    assert (site.hits("/private/a"), site.hits("/other/a")) == (0, 1)
    assert (site.hits("/private/b"), site.hits("/other/b")) == (1, 0)


@pytest_twisted.ensureDeferred
async def test_robots_parsed_hands_handlers_our_parser(site: ScriptedServer) -> None:
    if not hasattr(signals, "robots_parsed"):
        pytest.skip("Scrapy < 2.18 has no robots_parsed signal")
    site.robots("User-agent: ExampleBot\nDisallow: /private\nCrawl-delay: 2.5\n")
    seen: list[Any] = []

    def listen(crawler: Crawler) -> None:
        def parsed(robotparser: Any, request: Request) -> None:
            seen.append((type(robotparser), request.url, robotparser.crawl_delay("ExampleBot")))

        crawler.signals.connect(parsed, signal=signals.robots_parsed, weak=False)

    await run_crawl([site.url("/a")], SCRAPY_WITH_OUR_PARSER, before=listen)
    assert seen == [(RobotParser, site.url("/a"), 2.5)]


def test_user_agents_are_reduced_to_their_product_token() -> None:
    rp = parse("User-agent: ExampleBot\nDisallow: /x\nCrawl-delay: 3\n\nUser-agent: *\nAllow: /\n")
    for agent in (
        "ExampleBot",
        "examplebot",
        b"ExampleBot/1.0 (+http://example.com/bot)",
        "Mozilla/5.0 (compatible; ExampleBot/2.1; +http://example.com/bot)",
    ):
        assert not rp.allowed("https://example.com/x", agent), agent
        assert rp.crawl_delay(agent) == 3.0, agent
    # a browser's string names no crawler: the * group
    for agent in ("Mozilla/5.0 (X11; Linux x86_64) ExampleBot", "", b"\xff\xfe"):
        assert rp.allowed("https://example.com/x", agent), agent
        assert rp.crawl_delay(agent) is None, agent


def test_urls_as_bytes_are_read_byte_for_byte() -> None:
    rp = parse(b"User-agent: *\nDisallow: /caf%C3%A9\nDisallow: /na%EFve\n")
    assert not rp.allowed("https://example.com/café", "*")
    assert not rp.allowed("https://example.com/café".encode(), "*")
    assert not rp.allowed(b"https://example.com/caf%C3%A9/menu", "*")
    assert not rp.allowed(b"https://example.com/na\xefve", "*")  # Latin-1 bytes
    assert rp.allowed(b"https://example.com/cafe", "*")


def test_rep_max_size_of_the_crawler_bounds_what_is_read() -> None:
    body = b"User-agent: *\nDisallow: /a\n" + b"#" * 2_000 + b"\nDisallow: /b\n"
    crawler = get_crawler(settings_dict={"REP_MAX_SIZE": 1_000})
    rp = RobotParser.from_crawler(crawler, body)
    assert not rp.allowed("https://example.com/a", "*")
    assert rp.allowed("https://example.com/b", "*")
    assert rp.robots.truncated


text_or_bytes = st.one_of(st.text(max_size=60), st.binary(max_size=60))


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=300), url=text_or_bytes, agent=text_or_bytes)
def test_never_raises(body: bytes, url: str | bytes, agent: str | bytes) -> None:
    rp = parse(body)
    assert isinstance(rp.allowed(url, agent), bool)
    delay = rp.crawl_delay(agent)
    assert delay is None or isinstance(delay, float)
