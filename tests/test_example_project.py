"""End to end: ``scrapy crawl links`` and ``scrapy crawl sitemaps`` in example_project/,
as a user runs them, against the demo site (its own process on 127.0.0.1), checked on
what reached the site."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free]  # scrapy crawl subprocesses

PROJECT = Path(__file__).resolve().parent.parent / "example_project"


def _load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_demo", PROJECT / "demo.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


demo = _load_demo()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return demo.run_demo(tmp_path_factory.mktemp("demo"))


def served(run: Any, name: str) -> list[str]:
    """Paths the site served to one origin, robots.txt included, in order."""
    return [hit["path"] for hit in run.hits_of(name)]


def stats(run: Any, spider: str) -> dict[str, Any]:
    return dict(run.crawls[spider].stats["stats"])


def pages(run: Any, spider: str, name: str) -> dict[str, dict[str, Any]]:
    """The spider's page items of one origin, by path."""
    return {
        run.path_of(item["url"]): item
        for item in run.crawls[spider].items
        if item["kind"] == "page" and run.name_of(item["url"]) == name
    }


def test_the_crawls_finish_and_identify_themselves(run: Any) -> None:
    assert run.ok, run.failure()
    assert [crawl.stats["reason"] for crawl in run.crawls.values()] == ["finished", "finished"]
    assert {hit["user_agent"] for hit in run.hits} == {
        "ExampleBot/1.0 (+http://127.0.0.1/bot.html)"
    }


def test_disallowed_pages_are_never_downloaded_and_the_report_says_which_line(run: Any) -> None:
    assert sorted(served(run, "shop")) == sorted(
        ["/robots.txt", "/", "/products/1", "/products/2", "/private/press"]
    )
    assert served(run, "moved") == ["/robots.txt", "/", "/articles/1"]
    assert served(run, "static") == ["/robots/moved.txt"]
    # what REP_REPORT says robots.txt forbade: each of these links was never requested
    assert demo.forbidden_rules(run, "shop") == [
        (7, "Disallow: /cart", 1),  # /cart
        (8, "Disallow: /private/", 1),  # /private/orders
        (10, "Disallow: /*?sort=", 1),  # /products?sort=price
    ]
    assert demo.forbidden_rules(run, "moved") == [(2, "Disallow: /drafts/", 1)]  # the target's
    assert demo.forbidden_rules(run, "maps") == [(2, "Disallow: /private/", 1)]  # a sitemap's
    assert "/private/notes" not in served(run, "maps")
    for name in ("shop", "moved", "maps"):
        assert run.robots(name)["outcome"] == "parsed"
    assert stats(run, "links")["rep/forbidden"] == 4
    assert stats(run, "sitemaps")["rep/forbidden"] == 1
    # the links spider's errback saw the same requests
    errback = {
        run.path_of(item["url"])
        for item in demo.drops(run)
        if item["exception"].endswith(".ForbiddenByRobots")
    }
    assert errback == {"/cart", "/private/orders", "/products?sort=price", "/drafts/1"}
    assert "line 7: Disallow: /cart" in demo.format_report(run)


def test_crawl_delay_spaces_the_requests_to_its_site(run: Any) -> None:
    assert sorted(served(run, "blog")) == sorted(
        ["/robots.txt", "/", "/posts/1", "/posts/2", "/posts/3"]
    )
    gaps = demo.request_gaps(run, "blog")
    assert len(gaps) == 3
    assert min(gaps) >= 0.9, gaps  # Crawl-delay: 1, server-side clock
    # and to its site alone: the news site's pages (no Crawl-delay) are not spaced by it
    # (the demo's origins are ports of one host: the slot per origin must be named
    # before the requests are scheduled, example/middlewares.py)
    news_gaps = demo.request_gaps(run, "news")
    assert min(news_gaps) < 0.5, news_gaps
    blog = run.robots("blog")
    assert (blog["delay"], blog["delay_source"], blog["paced"]) == (1.0, "Crawl-delay: 1", 4)
    assert "blog: one request every 1 s (Crawl-delay: 1), 4 requests paced" in (
        demo.format_report(run)
    )


def test_unreachable_robots_txt_keeps_the_crawler_off_the_site(run: Any) -> None:
    assert set(served(run, "down")) == {"/robots.txt"}  # 503: no page requested
    down = run.robots("down")
    assert (down["outcome"], down["status"], down["dropped"]) == ("unreachable", 503, 1)
    assert down["dropped_reason"] == "HTTP 503"
    [dropped] = [item for item in demo.drops(run) if "RobotsTxtUnavailable" in item["exception"]]
    assert dropped["url"] == run.origins["down"] + "/"


def test_robots_txt_is_fetched_once_per_site(run: Any) -> None:
    for name in ("shop", "blog", "moved", "news", "maps"):
        assert served(run, name).count("/robots.txt") == 1, name
    assert "line 7: Disallow: /cart" in demo.format_report(run)


def test_links_of_nofollow_pages_are_never_requested(run: Any) -> None:
    # <meta name="robots" content="nofollow"> on /archive, X-Robots-Tag: nofollow on /topics
    assert sorted(served(run, "news")) == sorted(
        ["/robots.txt", "/", "/archive", "/topics", "/story/1", "/story/2", "/story/3", "/story/4"]
    )
    said = {page["path"]: page for page in demo.page_directives(run)}
    assert said["/archive"]["not_followed"] == ["/archive/2024", "/archive/2025"]
    assert said["/topics"]["not_followed"] == ["/topics/python", "/topics/web"]
    assert said["/topics"]["says"] == ["X-Robots-Tag: nofollow"]
    links = stats(run, "links")
    assert links["rep/meta/nofollow_pages"] == 2
    assert links["rep/meta/nofollow_dropped"] == 4
    report = demo.format_report(run)
    assert "links not followed, never requested: /archive/2024, /archive/2025" in report


def test_noindex_marks_the_page_for_this_crawler_only(run: Any) -> None:
    news = {path: item["noindex"] for path, item in pages(run, "links", "news").items()}
    # <meta name="examplebot" content="noindex"> on /story/1; /story/2's tag names otherbot
    assert news == {
        "/": False,
        "/archive": False,
        "/topics": False,
        "/story/1": True,
        "/story/2": False,
        "/story/3": False,
        "/story/4": False,
    }
    assert stats(run, "links")["rep/meta/noindex_pages"] == 1
    # noindex is not nofollow: /story/3 is linked from /story/1 only, /story/4 from /story/2
    assert {"/story/3", "/story/4"} <= set(served(run, "news"))


def test_sitemap_spider_crawls_what_robots_txt_sitemaps_list(run: Any) -> None:
    assert run.robots("maps")["sitemaps"] == 2  # two Sitemap: lines
    # the index leads to the gzipped sitemap and again to the text one: each fetched once;
    # robots.txt once for its rules and its sitemaps
    assert Counter(served(run, "maps")) == {
        "/robots.txt": 1,
        "/sitemaps/index.xml": 1,
        "/sitemaps/guides.xml.gz": 1,
        "/sitemaps/more.txt": 1,
        "/": 1,
        "/guides/1": 1,
        "/guides/2": 1,
        "/guides/3": 1,  # in the gzipped sitemap
        "/faq": 1,  # in the text sitemap, next to /private/notes, which robots.txt forbids
    }
    crawled = set(pages(run, "sitemaps", "maps"))
    assert crawled == {"/", "/guides/1", "/guides/2", "/guides/3", "/faq"}
    sitemaps = stats(run, "sitemaps")
    assert sitemaps["rep/sitemaps/fetched"] == 3
    assert sitemaps["rep/sitemaps/duplicates"] == 1
    assert sitemaps["rep/sitemaps/text"] == 1
    report = demo.format_report(run)
    assert "1 listed page(s) by line 2 (Disallow: /private/), never requested" in report
    assert "robots.txt of maps  fetched once" in report


def test_the_demo_ends_with_what_to_do_next() -> None:
    assert 'ADDONS = {"scrapy_rep.Addon": 100}' in demo.NEXT_STEPS
    assert "REP_REPORT" in demo.NEXT_STEPS
