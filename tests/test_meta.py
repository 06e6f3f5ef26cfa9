"""MetaRobotsMiddleware in real crawls against a local HTTP server.

Every page links to a child page; whether the child was requested from the
server tells whether the page's links were followed.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import pytest_twisted
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import ScrapyDeprecationWarning
from scrapy.http import HtmlResponse, Response, TextResponse
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from servers import Reply, ScriptedServer

from scrapy_rep import MetaRobotsMiddleware


def page(
    body: bytes,
    content_type: str = "text/html; charset=utf-8",
    headers: list[tuple[str, str]] | None = None,
    status: int = 200,
) -> Reply:
    """A page reply; ``headers`` may repeat a name (two X-Robots-Tag lines)."""
    return Reply(status, body, [("Content-Type", content_type), *(headers or [])])


def html(head: str, child: str) -> bytes:
    return (
        f"<!DOCTYPE html><html><head><title>t</title>{head}</head>"
        f'<body><a href="{child}">next</a></body></html>'
    ).encode()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


class LinkSpider(Spider):
    """Yields an item per page (with what the middleware said) and follows every link."""

    name = "links"

    def __init__(
        self,
        urls: list[str],
        start_meta: dict[str, Any],
        child_meta: dict[str, Any],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.urls = urls
        self.start_meta = start_meta
        self.child_meta = child_meta
        self.noindex_seen: dict[str, Any] = {}
        self.response_types: dict[str, str] = {}

    async def start(self) -> AsyncIterator[Any]:
        for url in self.urls:
            yield Request(url, meta=dict(self.start_meta))

    def links(self, response: Response) -> list[str]:
        links: list[str] = []
        if isinstance(response, TextResponse):
            links += response.css("a::attr(href)").getall()
        if b"X-Next" in response.headers:  # how a PDF "links" in these tests
            links.append(response.headers[b"X-Next"].decode())
        return links

    def parse(self, response: Response) -> Iterator[Any]:
        self.noindex_seen[response.url] = response.meta.get("rep_noindex", "absent")
        self.response_types[response.url] = type(response).__name__
        yield {"url": response.url}
        for link in self.links(response):
            yield response.follow(link, meta=dict(self.child_meta))


class AsyncLinkSpider(LinkSpider):
    name = "async-links"

    async def parse(self, response: Response) -> AsyncIterator[Any]:  # type: ignore[override]
        for output in super().parse(response):
            yield output


class ListLinkSpider(LinkSpider):
    """A callback returning a list: it runs before any output is consumed."""

    name = "list-links"

    def parse(self, response: Response) -> list[Any]:  # type: ignore[override]
        return list(super().parse(response))


SETTINGS: dict[str, Any] = {
    "ROBOTSTXT_OBEY": True,
    "ROBOTSTXT_USER_AGENT": "ExampleBot",
    # this test is about page directives; keep robots.txt out of the crawl
    "DOWNLOADER_MIDDLEWARES": {"scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None},
    "SPIDER_MIDDLEWARES": {"scrapy_rep.MetaRobotsMiddleware": 950},
    "LOG_LEVEL": "DEBUG",
    # as in crawls.py: the suite's crawls at once would take ports 6023-6073,
    # and Scrapy 2.14 leaves a socket open for each one it finds taken
    "TELNETCONSOLE_ENABLED": False,
}


@dataclass
class Crawl:
    crawler: Crawler
    items: list[dict[str, Any]]

    @property
    def spider(self) -> LinkSpider:
        spider = self.crawler.spider
        assert isinstance(spider, LinkSpider)
        return spider

    def stat(self, key: str) -> Any:
        assert self.crawler.stats is not None
        return self.crawler.stats.get_value(key)

    @property
    def item_urls(self) -> set[str]:
        return {item["url"] for item in self.items}


async def crawl(
    server: ScriptedServer,
    paths: list[str],
    settings: dict[str, Any] | None = None,
    spider: type[LinkSpider] = LinkSpider,
    start_meta: dict[str, Any] | None = None,
    child_meta: dict[str, Any] | None = None,
) -> Crawl:
    crawler = get_crawler(spider, {**SETTINGS, **(settings or {})})
    items: list[dict[str, Any]] = []

    def collect(item: dict[str, Any]) -> None:
        items.append(item)

    # signal receivers are weak references: `collect` lives until the crawl ends
    crawler.signals.connect(collect, signal=signals.item_scraped)
    # a Deferred wrapping the coroutine: pytest-twisted's test coroutine awaits Deferreds
    await deferred_from_coro(
        crawler.crawl_async(
            urls=[server.url(p) for p in paths],
            start_meta=start_meta or {},
            child_meta=child_meta or {},
        )
    )
    return Crawl(crawler, items)


PAST = (datetime.now(timezone.utc) - timedelta(days=2)).strftime("%a, %d %b %Y %H:%M:%S GMT")
FUTURE = (datetime.now(timezone.utc) + timedelta(days=365)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Case:
    head: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    followed: bool = True
    noindex: bool = False


CASES: dict[str, Case] = {
    "plain": Case(),
    "meta-nofollow": Case('<meta name="robots" content="nofollow">', followed=False),
    "meta-none": Case('<meta name="robots" content="none">', followed=False, noindex=True),
    "meta-noindex": Case('<meta name="robots" content="noindex">', noindex=True),
    "meta-all": Case('<meta name="robots" content="all">'),
    "meta-own-bot": Case('<meta name="ExampleBot" content="nofollow">', followed=False),
    "meta-own-bot-upper": Case("<META NAME=EXAMPLEBOT CONTENT=NOFOLLOW>", followed=False),
    "meta-other-bot": Case('<meta name="otherbot" content="none">'),
    "header-nofollow": Case(headers=[("X-Robots-Tag", "nofollow")], followed=False),
    "header-per-bot": Case(
        headers=[("X-Robots-Tag", "examplebot: noindex, otherbot: nofollow")], noindex=True
    ),
    "header-other-bot": Case(headers=[("X-Robots-Tag", "otherbot: none")]),
    "header-two": Case(
        headers=[("X-Robots-Tag", "otherbot: noindex"), ("X-Robots-Tag", "EXAMPLEBOT: none")],
        followed=False,
        noindex=True,
    ),
    "unavailable-past": Case(
        f'<meta name="robots" content="unavailable_after: {PAST}">', noindex=True
    ),
    "unavailable-future": Case(f'<meta name="robots" content="unavailable_after: {FUTURE}">'),
    "header-unavailable-past": Case(
        headers=[("X-Robots-Tag", f"unavailable_after: {PAST}")], noindex=True
    ),
    "combined": Case(
        '<meta name="robots" content="noindex"><meta name="examplebot" content="nofollow">'
        '<meta name="otherbot" content="index, follow">',
        followed=False,
        noindex=True,
    ),
    "meta-and-header": Case(
        '<meta name="robots" content="noindex, follow">',
        headers=[("X-Robots-Tag", "nofollow")],
        followed=False,
        noindex=True,
    ),
    "body-meta-ignored": Case("", followed=True),  # see the page body below
    "broken-html": Case('<meta name="robots" content="nofollow"<title>x', followed=False),
}


def serve_cases(server: ScriptedServer) -> None:
    for name, case in CASES.items():
        body = html(case.head, f"/child/{name}")
        if name == "body-meta-ignored":
            body = body.replace(b"<body>", b'<body><meta name="robots" content="none">')
        server.script(f"/page/{name}", page(body, headers=case.headers))


@pytest.mark.parametrize("spider", [LinkSpider, AsyncLinkSpider, ListLinkSpider])
@pytest_twisted.ensureDeferred
async def test_each_form_of_directive(
    server: ScriptedServer, spider: type[LinkSpider], caplog: pytest.LogCaptureFixture
) -> None:
    serve_cases(server)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScrapyDeprecationWarning)
        result = await crawl(server, [f"/page/{name}" for name in CASES], spider=spider)

    not_followed = {name for name, case in CASES.items() if not case.followed}
    for name, case in CASES.items():
        assert server.hits(f"/page/{name}") == 1, name
        assert server.hits(f"/child/{name}") == (1 if case.followed else 0), name
        # the callback read the verdict on its own response
        assert result.spider.noindex_seen[server.url(f"/page/{name}")] is case.noindex, name
    # items are kept by default (REP_META_NOINDEX = "keep"), noindex pages too
    pages = {server.url(f"/page/{name}") for name in CASES}
    assert pages <= result.item_urls
    assert result.stat("rep/meta/nofollow_dropped") == len(not_followed)
    assert result.stat("rep/meta/nofollow_pages") == len(not_followed)
    assert result.stat("rep/meta/noindex_pages") == sum(c.noindex for c in CASES.values())
    assert result.stat("rep/meta/noindex_dropped") is None
    # Scrapy accepted the middleware's methods (it logs errors for ones it skips)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest_twisted.ensureDeferred
async def test_noindex_drop_drops_the_items_of_noindex_pages(server: ScriptedServer) -> None:
    serve_cases(server)
    result = await crawl(server, [f"/page/{name}" for name in CASES], {"REP_META_NOINDEX": "drop"})
    for name, case in CASES.items():
        page = server.url(f"/page/{name}")
        assert (page in result.item_urls) is not case.noindex, name
        # dropping items does not change which links are followed
        assert server.hits(f"/child/{name}") == (1 if case.followed else 0), name
    assert result.stat("rep/meta/noindex_dropped") == sum(c.noindex for c in CASES.values())


@pytest_twisted.ensureDeferred
async def test_dropped_requests_are_logged_with_the_reason(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(
        "/a",
        page(
            html('<meta name="examplebot" content="none">', "/child"),
            headers=[("X-Robots-Tag", "nofollow")],
        ),
    )
    server.script(
        "/b",
        page(html("", "/child/b"), headers=[("X-Robots-Tag", "unavailable_after: 2001-02-03")]),
    )
    caplog.set_level(logging.DEBUG, logger="scrapy_rep.meta")
    await crawl(server, ["/a", "/b"], {"REP_META_NOINDEX": "drop"})
    messages = [r.getMessage() for r in caplog.records if r.name == "scrapy_rep.meta"]
    assert any(
        "/child" in m
        and "nofollow" in m
        and '<meta name="examplebot">' in m
        and "X-Robots-Tag" in m
        for m in messages
    ), messages
    assert any("Dropped an item" in m and "/a" in m and "noindex" in m for m in messages), messages
    assert any(
        "Dropped an item" in m and "/b" in m and "unavailable_after 2001-02-03" in m
        for m in messages
    ), messages


@pytest_twisted.ensureDeferred
async def test_x_robots_tag_applies_to_non_html_responses(server: ScriptedServer) -> None:
    for name, value in [("nofollow", "nofollow"), ("other", "otherbot: nofollow")]:
        server.script(
            f"/{name}.pdf",
            page(
                b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n" + bytes(range(256)),
                content_type="application/pdf",
                headers=[("X-Robots-Tag", value), ("X-Next", f"/child/{name}")],
            ),
        )
    result = await crawl(server, ["/nofollow.pdf", "/other.pdf"])
    assert result.spider.response_types[server.url("/nofollow.pdf")] == "Response"
    assert server.hits("/child/nofollow") == 0
    assert server.hits("/child/other") == 1
    assert result.stat("rep/meta/nofollow_dropped") == 1


@pytest_twisted.ensureDeferred
async def test_meta_tags_are_read_only_from_html(server: ScriptedServer) -> None:
    """A text or JSON body quoting a meta tag is not a page saying it."""
    quoted = b'<html><head><meta name="robots" content="none"></head><a href="/child/txt">x</a>'
    server.script("/quoted.txt", page(quoted, content_type="text/plain"))
    server.script(
        "/quoted.xhtml",
        page(quoted.replace(b"/child/txt", b"/child/xhtml"), content_type="application/xhtml+xml"),
    )
    result = await crawl(server, ["/quoted.txt", "/quoted.xhtml"])
    assert server.hits("/child/txt") == 1
    assert server.hits("/child/xhtml") == 0  # XHTML is HTML
    assert result.stat("rep/meta/nofollow_dropped") == 1


@pytest_twisted.ensureDeferred
async def test_undecodable_or_garbage_html_never_breaks_the_crawl(server: ScriptedServer) -> None:
    server.script(
        "/garbage",
        page(
            b"\xff\xfe\x00<head>\x00<meta name=robots content=\xff\xfenofollow>"
            + bytes(range(256)),
            content_type="text/html; charset=utf-8",
        ),
    )
    server.script("/empty", page(b"", content_type="text/html"))
    server.script(
        "/huge-head",
        page(
            html(
                "<style>" + "x" * 2_000_000 + '</style><meta name="robots" content="nofollow">',
                "/c",
            )
        ),
    )
    result = await crawl(server, ["/garbage", "/empty", "/huge-head"])
    assert result.stat("spider_exceptions") is None
    assert {server.url(p) for p in ["/garbage", "/empty", "/huge-head"]} <= result.item_urls
    assert server.hits("/c") == 0


@pytest_twisted.ensureDeferred
async def test_dont_obey_robotstxt_on_the_page_skips_its_directives(server: ScriptedServer) -> None:
    server.script("/a", page(html('<meta name="robots" content="none">', "/child")))
    result = await crawl(
        server, ["/a"], {"REP_META_NOINDEX": "drop"}, start_meta={"dont_obey_robotstxt": True}
    )
    assert server.hits("/child") == 1
    assert server.url("/a") in result.item_urls
    assert result.spider.noindex_seen[server.url("/a")] == "absent"
    assert result.stat("rep/meta/nofollow_dropped") is None


@pytest_twisted.ensureDeferred
async def test_dont_obey_robotstxt_on_a_yielded_request_lets_it_through(
    server: ScriptedServer,
) -> None:
    server.script("/a", page(html('<meta name="robots" content="nofollow">', "/child")))
    result = await crawl(server, ["/a"], child_meta={"dont_obey_robotstxt": True})
    assert server.hits("/child") == 1
    assert result.stat("rep/meta/nofollow_dropped") is None


@pytest.mark.parametrize(
    "settings",
    [{"REP_META_ROBOTS": False}, {"ROBOTSTXT_OBEY": False}],
    ids=["REP_META_ROBOTS-off", "ROBOTSTXT_OBEY-off"],
)
@pytest_twisted.ensureDeferred
async def test_disabled_middleware_follows_everything(
    server: ScriptedServer, settings: dict[str, Any]
) -> None:
    server.script("/a", page(html('<meta name="robots" content="none">', "/child")))
    result = await crawl(server, ["/a"], {**settings, "REP_META_NOINDEX": "drop"})
    assert server.hits("/child") == 1
    assert server.url("/a") in result.item_urls
    assert not any(
        isinstance(mw, MetaRobotsMiddleware)
        for mw in result.crawler.engine.scraper.spidermw.middlewares  # type: ignore[union-attr]
    )


@pytest_twisted.ensureDeferred
async def test_token_comes_from_user_agent_without_robotstxt_user_agent(
    server: ScriptedServer,
) -> None:
    server.script("/a", page(html('<meta name="examplebot" content="nofollow">', "/child/a")))
    server.script("/b", page(html('<meta name="otherbot" content="nofollow">', "/child/b")))
    await crawl(
        server,
        ["/a", "/b"],
        {"ROBOTSTXT_USER_AGENT": None, "USER_AGENT": "ExampleBot/2.1 (+https://example.com/bot)"},
    )
    assert server.hits("/child/a") == 0
    assert server.hits("/child/b") == 1


@pytest_twisted.ensureDeferred
async def test_directives_of_an_error_page_still_apply(server: ScriptedServer) -> None:
    """A 404 page handed to the callback (HTTPERROR_ALLOW_ALL) keeps its X-Robots-Tag."""
    server.script(
        "/gone", page(html("", "/child"), status=404, headers=[("X-Robots-Tag", "nofollow")])
    )
    result = await crawl(server, ["/gone"], {"HTTPERROR_ALLOW_ALL": True})
    assert server.hits("/gone") == 1
    assert server.hits("/child") == 0
    assert result.stat("rep/meta/nofollow_dropped") == 1


def test_sync_output_path_filters_like_the_async_one() -> None:
    """Scrapy versions that feed a plain iterable use process_spider_output itself."""
    crawler = get_crawler(LinkSpider, {**SETTINGS, "REP_META_NOINDEX": "drop"})
    middleware = MetaRobotsMiddleware.from_crawler(crawler)
    page = HtmlResponse(
        "http://example.com/a",
        body=html('<meta name="robots" content="none">', "/b"),
        request=Request("http://example.com/a"),
    )
    middleware.process_spider_input(page)
    assert page.meta["rep_noindex"] is True
    assert page.meta["rep_directives"].none
    output = [{"url": page.url}, Request("http://example.com/b")]
    assert list(middleware.process_spider_output(page, output)) == []
    assert crawler.stats is not None
    assert crawler.stats.get_value("rep/meta/nofollow_dropped") == 1
    assert crawler.stats.get_value("rep/meta/noindex_dropped") == 1


@pytest_twisted.ensureDeferred
async def test_enabled_by_the_addon(server: ScriptedServer) -> None:
    """ADDONS = {"scrapy_rep.Addon": ...} alone turns the middleware on."""
    server.script("/a", page(html('<meta name="robots" content="nofollow">', "/child")))
    addon_only = {"ADDONS": {"scrapy_rep.Addon": 100}, "SPIDER_MIDDLEWARES": {}}
    result = await crawl(server, ["/a"], {**addon_only, "DOWNLOADER_MIDDLEWARES": {}})
    assert server.hits("/a") == 1
    assert server.hits("/child") == 0
    assert result.stat("rep/meta/nofollow_dropped") == 1
