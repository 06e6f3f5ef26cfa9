"""RobotsSitemapSpider in real crawls against local HTTP servers.

What reached the servers (hits per path) and which pages reached the spider's
callbacks tell what the spider did with the sitemaps robots.txt lists.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import pytest_twisted
from crawls import BASE_SETTINGS
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.spiders import SitemapSpider
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from servers import Reply, ScriptedServer

from scrapy_rep import RobotsSitemapMixin, RobotsSitemapSpider

XML = {"Content-Type": "application/xml"}
MakeSite = Callable[[], ScriptedServer]


def urlset(*urls: str) -> Reply:
    locs = "".join(f"<url><loc>{url}</loc></url>" for url in urls)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'
    )
    return Reply(body=body.encode(), headers=XML)


def index(*urls: str) -> Reply:
    locs = "".join(f"<sitemap><loc>{url}</loc></sitemap>" for url in urls)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</sitemapindex>'
    )
    return Reply(body=body.encode(), headers=XML)


def robots(*sitemaps: str, rules: str = "User-agent: *\nDisallow: /private\n") -> str:
    return rules + "".join(f"Sitemap: {url}\n" for url in sitemaps)


class Recorder(RobotsSitemapSpider):
    """Records (callback, URL) of every page; follows links when ``follow_links``."""

    name = "rep-sitemaps"
    follow_links = False

    def __init__(self, seen: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen = seen

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Request]:
        self.seen.append(("parse", response.url))
        if self.follow_links:
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)

    def parse_product(self, response: Response) -> None:
        self.seen.append(("parse_product", response.url))


async def crawl(
    settings: dict[str, Any] | None = None, spider: type[Recorder] = Recorder, **kwargs: Any
) -> tuple[set[str], list[tuple[str, str]], dict[str, Any], Crawler]:
    """Run the spider; (page URLs seen, (callback, URL) list, rep/sitemaps stats, crawler)."""
    crawler = get_crawler(spider, {**BASE_SETTINGS, **(settings or {})})
    seen: list[tuple[str, str]] = []
    await deferred_from_coro(crawler.crawl_async(seen=seen, **kwargs))
    assert crawler.stats is not None
    stats = crawler.stats.get_stats()
    return {url for _, url in seen}, seen, stats, crawler


def sitemap_stats(stats: dict[str, Any]) -> dict[str, Any]:
    return {k.removeprefix("rep/sitemaps/"): v for k, v in stats.items() if "sitemaps/" in k}


@pytest_twisted.ensureDeferred
async def test_robots_sitemaps_of_two_sites_give_exactly_the_allowed_pages(
    make_site: MakeSite,
) -> None:
    """An index (listing itself and a listed sitemap again), a gzipped sitemap,
    a text sitemap, a sitemap robots.txt disallows and a sitemap both sites list:
    every allowed page once, robots.txt and each sitemap fetched once."""
    a, b = make_site(), make_site()
    a.robots(
        robots(
            a.url("/index.xml"),
            a.url("/pages.xml.gz"),
            a.url("/list.txt"),
            a.url("/private/sitemap.xml"),
            b.url("/shared.xml"),
        )
    )
    b.robots(robots(b.url("/shared.xml"), rules="User-agent: *\nDisallow:\n"))
    a.script("/index.xml", index(a.url("/sub.xml"), a.url("/index.xml"), a.url("/pages.xml.gz")))
    a.script("/sub.xml", urlset(a.url("/a1"), a.url("/private/a2")))
    gzipped = gzip.compress(urlset(a.url("/g1")).body)
    a.script("/pages.xml.gz", Reply(body=gzipped, headers={"Content-Type": "application/gzip"}))
    text = f"\ufeff{a.url('/t1')}\r\n\r\n  {a.url('/t2')}  \nnot a url\n".encode()
    a.script("/list.txt", Reply(body=text, headers={"Content-Type": "text/plain"}))
    a.script("/private/sitemap.xml", urlset(a.url("/never")))
    b.script("/shared.xml", urlset(b.url("/s1"), a.url("/a1")))

    pages, seen, stats, _ = await crawl(sitemap_sites=[a.origin, b.origin])

    assert pages == {a.url("/a1"), a.url("/g1"), a.url("/t1"), a.url("/t2"), b.url("/s1")}
    assert len(seen) == len(pages)  # /a1, listed twice, crawled once
    assert (a.hits("/robots.txt"), b.hits("/robots.txt")) == (1, 1)
    for site, path in [(a, "/index.xml"), (a, "/pages.xml.gz"), (a, "/list.txt")]:
        assert site.hits(path) == 1, path
    assert b.hits("/shared.xml") == 1
    assert a.hits("/private/sitemap.xml") == 0
    assert a.hits("/private/a2") == 0
    assert a.hits("/never") == 0
    got = sitemap_stats(stats)
    assert got["sites"] == 2
    assert got["found"] == 6  # 5 lines of a, 1 of b
    assert got["duplicates"] == 3  # shared.xml by b, index.xml and pages.xml.gz by the index
    assert got["forbidden"] == 1
    assert got["text"] == 1
    assert stats["rep/forbidden"] == 2  # the sitemap and /private/a2


@pytest_twisted.ensureDeferred
async def test_sitemap_follow_and_rules_apply_to_robots_sitemaps(make_site: MakeSite) -> None:
    """sitemap_follow picks robots.txt sitemaps and index entries alike;
    sitemap_rules pick the pages and their callbacks."""
    a = make_site()
    a.robots(robots(a.url("/sitemap-products.xml"), a.url("/sitemap-blog.xml")))
    a.script(
        "/sitemap-products.xml",
        index(a.url("/sitemap-products-1.xml"), a.url("/sitemap-news.xml")),
    )
    a.script("/sitemap-products-1.xml", urlset(a.url("/shop/p1"), a.url("/about")))
    a.script("/sitemap-blog.xml", urlset(a.url("/blog/1")))
    a.script("/sitemap-news.xml", urlset(a.url("/news/1")))

    _, seen, stats, _ = await crawl(
        sitemap_sites=[a.origin],
        sitemap_follow=["products"],
        sitemap_rules=[("/shop/", "parse_product")],
    )

    assert seen == [("parse_product", a.url("/shop/p1"))]
    assert a.hits("/sitemap-blog.xml") == 0
    assert a.hits("/sitemap-news.xml") == 0
    assert a.hits("/about") == 0
    assert sitemap_stats(stats)["follow_skipped"] == 2


@pytest_twisted.ensureDeferred
async def test_sitemap_filter_sees_robots_sitemaps(make_site: MakeSite) -> None:
    class Filtering(Recorder):
        def sitemap_filter(self, entries: Any) -> Iterator[dict[str, Any]]:
            return (entry for entry in entries if "skip" not in entry["loc"])

    a = make_site()
    a.robots(robots(a.url("/keep.xml"), a.url("/skip.xml")))
    a.script("/keep.xml", urlset(a.url("/kept"), a.url("/skip-page")))
    a.script("/skip.xml", urlset(a.url("/other")))

    pages, _, _, _ = await crawl(spider=Filtering, sitemap_sites=[a.origin])

    assert pages == {a.url("/kept")}
    assert a.hits("/skip.xml") == 0


@pytest_twisted.ensureDeferred
async def test_nested_indexes_stop_at_sitemap_max_depth(make_site: MakeSite) -> None:
    a = make_site()
    a.robots(robots(a.url("/i0.xml")))
    a.script("/i0.xml", index(a.url("/i1.xml"), a.url("/shallow.xml")))
    a.script("/shallow.xml", urlset(a.url("/shallow")))
    a.script("/i1.xml", index(a.url("/i2.xml")))
    a.script("/i2.xml", urlset(a.url("/deep")))

    pages, _, stats, _ = await crawl(sitemap_sites=[a.origin], sitemap_max_depth=1)

    assert pages == {a.url("/shallow")}
    assert a.hits("/i1.xml") == 1
    assert a.hits("/i2.xml") == 0
    assert sitemap_stats(stats)["depth_exceeded"] == 1


@pytest_twisted.ensureDeferred
async def test_discover_reads_sitemaps_of_a_site_reached_by_a_link(make_site: MakeSite) -> None:
    a, b = make_site(), make_site()
    a.robots("User-agent: *\nDisallow:\n")
    a.script("/start", Reply(body=f'<html><a href="{b.url("/hello")}">b</a></html>'.encode()))
    b.robots(robots(b.url("/sitemap.xml")))
    b.script("/sitemap.xml", urlset(b.url("/from-sitemap")))

    class Follower(Recorder):
        follow_links = True

    pages, _, stats, _ = await crawl(
        spider=Follower, start_urls=[a.url("/start")], sitemap_discover=True
    )

    assert pages == {a.url("/start"), b.url("/hello"), b.url("/from-sitemap")}
    assert (a.hits("/robots.txt"), b.hits("/robots.txt")) == (1, 1)
    assert sitemap_stats(stats)["sites"] == 2


@pytest_twisted.ensureDeferred
async def test_without_discover_reached_sites_are_not_searched(make_site: MakeSite) -> None:
    a = make_site()
    a.robots(robots(a.url("/sitemap.xml")))
    a.script("/sitemap.xml", urlset(a.url("/from-sitemap")))

    pages, _, _, _ = await crawl(start_urls=[a.url("/start")])

    assert pages == {a.url("/start")}
    assert a.hits("/sitemap.xml") == 0


@pytest_twisted.ensureDeferred
async def test_robots_url_in_sitemap_urls_is_read_once(make_site: MakeSite) -> None:
    """SitemapSpider would download it a second time and ignore sitemap_follow."""
    a = make_site()
    a.robots(robots(a.url("/yes.xml"), a.url("/no.xml")))
    a.script("/yes.xml", urlset(a.url("/p")))

    pages, _, _, _ = await crawl(sitemap_urls=[a.url("/robots.txt")], sitemap_follow=["yes"])

    assert pages == {a.url("/p")}
    assert a.hits("/robots.txt") == 1
    assert a.hits("/no.xml") == 0


@pytest_twisted.ensureDeferred
async def test_sitemap_obey_robotstxt_false_crawls_disallowed_pages(make_site: MakeSite) -> None:
    a = make_site()
    a.robots(robots(a.url("/private/sitemap.xml")))
    a.script("/private/sitemap.xml", urlset(a.url("/private/p")))

    pages, _, stats, _ = await crawl(sitemap_sites=[a.origin], sitemap_obey_robotstxt=False)

    assert pages == {a.url("/private/p")}
    assert a.hits("/robots.txt") == 1
    assert "rep/forbidden" not in stats


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"ROBOTSTXT_OBEY": False}, "ROBOTSTXT_OBEY is False"),
        (
            {"DOWNLOADER_MIDDLEWARES": {"scrapy_rep.RobotsTxtMiddleware": None}},
            "scrapy_rep.RobotsTxtMiddleware is not in DOWNLOADER_MIDDLEWARES",
        ),
    ],
    ids=["obey-off", "middleware-off"],
)
@pytest_twisted.ensureDeferred
async def test_without_the_middleware_robots_txt_is_downloaded_for_its_sitemaps(
    make_site: MakeSite, caplog: pytest.LogCaptureFixture, settings: dict[str, Any], why: str
) -> None:
    a = make_site()
    a.robots(robots(a.url("/private/sitemap.xml")))
    a.script("/private/sitemap.xml", urlset(a.url("/private/p")))

    with caplog.at_level(logging.INFO, logger="scrapy_rep.sitemaps"):
        pages, _, stats, _ = await crawl(settings, sitemap_sites=[a.origin])

    assert pages == {a.url("/private/p")}  # rules not obeyed: nothing obeys them
    assert a.hits("/robots.txt") == 1
    assert sitemap_stats(stats)["robotstxt_requested"] == 1
    said = [r.getMessage() for r in caplog.records]
    assert f"robots.txt is not obeyed ({why})" in " ".join(said), said


@pytest_twisted.ensureDeferred
async def test_x_robots_tag_nofollow_on_a_sitemap_does_not_drop_its_pages(
    make_site: MakeSite,
) -> None:
    """Sitemaps commonly carry X-Robots-Tag: noindex, nofollow; that keeps them out
    of search results and says nothing about the pages they list. The same header
    on a page still drops the page's links."""
    a = make_site()
    a.robots(robots(a.url("/sitemap.xml")))
    sitemap = urlset(a.url("/page"))
    sitemap.headers["X-Robots-Tag"] = "noindex, nofollow"
    a.script("/sitemap.xml", sitemap)
    a.script(
        "/page",
        Reply(
            body=b'<html><a href="/child">c</a></html>',
            headers={"X-Robots-Tag": "nofollow"},
        ),
    )

    class Follower(Recorder):
        follow_links = True

    pages, _, stats, _ = await crawl(spider=Follower, sitemap_sites=[a.origin])

    assert pages == {a.url("/page")}
    assert a.hits("/child") == 0
    assert stats["rep/meta/nofollow_dropped"] == 1


@pytest_twisted.ensureDeferred
async def test_broken_and_missing_sitemaps_are_counted_and_the_crawl_goes_on(
    make_site: MakeSite,
) -> None:
    a = make_site()
    a.robots(
        robots(
            a.url("/missing.xml"),
            a.url("/html.xml"),
            a.url("/empty.xml"),
            a.url("/relative.xml"),
            a.url("/good.xml"),
        )
    )
    a.script("/missing.xml", Reply(status=404, body=b"not found"))
    a.script("/html.xml", Reply(body=b"<html><body>hello</body></html>"))
    a.script("/empty.xml", Reply(body=b"", headers=XML))
    a.script("/relative.xml", urlset("/relative-page", a.url("/ok2")))
    a.script("/good.xml", urlset(a.url("/ok")))

    pages, _, stats, _ = await crawl(sitemap_sites=[a.origin])

    assert pages == {a.url("/ok"), a.url("/ok2")}
    got = sitemap_stats(stats)
    assert got["failed"] == 1
    assert got["invalid"] == 2
    assert got["invalid_url"] == 1


@pytest_twisted.ensureDeferred
async def test_a_sitemap_url_with_bytes_that_are_not_utf8_is_requested_percent_encoded(
    make_site: MakeSite,
) -> None:
    """Sitemap: /s\\xe9.xml (a Latin-1 byte in robots.txt) -> GET /s%E9.xml, its pages crawled."""
    a = make_site()
    a.robots(
        b"User-agent: *\nDisallow: /private\nSitemap: " + a.url("/s\xe9.xml").encode("latin-1")
    )
    a.script("/s%E9.xml", urlset(a.url("/page")))

    pages, _, stats, _ = await crawl(sitemap_sites=[a.origin])

    assert a.hits("/s%E9.xml") == 1
    assert pages == {a.url("/page")}
    assert "invalid_url" not in sitemap_stats(stats)


def test_the_mixin_needs_sitemap_spider() -> None:
    class Wrong(RobotsSitemapMixin):
        name = "wrong"

    with pytest.raises(TypeError, match="SitemapSpider"):
        Wrong()


def test_the_mixin_composes_with_a_sitemap_spider_subclass() -> None:
    class Base(SitemapSpider):
        sitemap_rules = (("/shop/", "parse_shop"),)

        def parse_shop(self, response: Response) -> None:
            pass

    class Mine(RobotsSitemapMixin, Base):
        name = "mine"
        sitemap_sites = ("example.com",)

    spider = Mine(sitemap_discover="false", sitemap_max_depth="2")
    assert spider.sitemap_discover is False
    assert spider.sitemap_max_depth == 2
    assert spider.sitemap_sites == ("example.com",)


@pytest_twisted.ensureDeferred
async def test_discover_without_the_middleware_downloads_each_robots_txt_once(
    make_site: MakeSite,
) -> None:
    a, b = make_site(), make_site()
    a.script("/start", Reply(body=f'<html><a href="{b.url("/hello")}">b</a></html>'.encode()))
    a.script("/again", Reply(body=f'<html><a href="{b.url("/hello2")}">b</a></html>'.encode()))
    b.robots(robots(b.url("/sitemap.xml")))
    b.script("/sitemap.xml", urlset(b.url("/from-sitemap")))

    class Follower(Recorder):
        follow_links = True

    pages, _, _, _ = await crawl(
        {"ROBOTSTXT_OBEY": False},
        spider=Follower,
        start_urls=[a.url("/start"), a.url("/again")],
        sitemap_discover=True,
    )

    assert b.url("/from-sitemap") in pages
    assert (a.hits("/robots.txt"), b.hits("/robots.txt")) == (1, 1)


@pytest_twisted.ensureDeferred
async def test_what_cannot_be_used_is_counted_and_the_crawl_goes_on(
    make_site: MakeSite, caplog: pytest.LogCaptureFixture
) -> None:
    """A sitemap_sites entry that is no http(s) site, a location that is no URL,
    a broken sitemap and a sitemap_filter that fails on robots.txt's entries
    (they hold only "loc"): each is counted under rep/sitemaps/ and logged, and
    the rest of the crawl happens."""

    class ByDate(Recorder):
        def sitemap_filter(self, entries: Any) -> Iterator[dict[str, Any]]:
            return (entry for entry in entries if entry["lastmod"] >= "2020")

    a, b = make_site(), make_site()
    a.robots(robots(a.url("/dated.xml")))  # ByDate cannot read robots.txt's entries
    b.robots(robots(b.url("/pages.xml"), b.url("/broken.xml")))
    b.script("/pages.xml", urlset(b.url("/ok"), "/relative", "http://[broken/"))
    b.script("/broken.xml", Reply(body=b"<urlset><url><loc>", headers=XML))

    with caplog.at_level(logging.INFO):
        pages, _, stats, _ = await crawl(
            sitemap_sites=[a.origin, "ftp://files.example/"], sitemap_urls=[b.url("/robots.txt")]
        )
        assert pages == {b.url("/ok")}  # the plain spider: no filter
        pages, _, by_date, _ = await crawl(spider=ByDate, sitemap_sites=[a.origin])

    assert pages == set()
    assert a.hits("/dated.xml") == 1  # by the first crawl only
    counted = sitemap_stats(stats)
    assert counted["invalid_site"] == 1
    assert counted["invalid_url"] == 2
    assert counted["invalid"] == 1
    assert sitemap_stats(by_date)["filter_error"] == 1
    said = caplog.text
    assert "'ftp://files.example/' is not an http(s) site" in said
    assert "sitemap_filter failed on the robots.txt sitemaps of" in said
