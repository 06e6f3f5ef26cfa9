"""scrapy_rep._compat on the installed Scrapy: every test here runs on every
supported release (CI runs the suite on the floor and on the newest)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_twisted
from crawls import BASE_SETTINGS
from scrapy import Request, Spider, signals
from scrapy.core.engine import ExecutionEngine
from scrapy.crawler import Crawler
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as ScrapyMiddleware
from scrapy.downloadermiddlewares.useragent import UserAgentMiddleware
from scrapy.settings import BaseSettings, Settings
from scrapy.spiders import SitemapSpider
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from servers import ScriptedServer

from scrapy_rep import _compat
from scrapy_rep.robotparser import RobotParser
from scrapy_rep.robotstxt import RobotsTxt

SCRAPY_PATH = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
# Scrapy's own middleware alone, as a project without scrapy-rep has it
PLAIN_SETTINGS = {**BASE_SETTINGS, "ADDONS": {}}


class Idle(Spider):
    """Requests ``urls`` (none by default) and records the downloader middlewares."""

    name = "idle"

    def __init__(self, urls: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = urls
        self.middlewares: list[type] = []

    async def start(self) -> AsyncIterator[Request]:
        assert self.crawler.engine is not None
        self.middlewares = [type(m) for m in self.crawler.engine.downloader.middleware.middlewares]
        for url in self.urls:
            yield Request(url, dont_filter=True)


async def crawl(settings: dict[str, Any], *urls: str) -> tuple[Crawler, list[type]]:
    crawler = get_crawler(Idle, settings)
    await deferred_from_coro(crawler.crawl_async(urls=urls))
    assert isinstance(crawler.spider, Idle)
    return crawler, crawler.spider.middlewares


# -- check ----------------------------------------------------------------------------------------


def test_the_installed_scrapy_has_everything_scrapy_rep_needs() -> None:
    assert _compat.problems() == []
    _compat.check()


def test_a_missing_api_stops_the_start_naming_the_installed_scrapy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A future Scrapy without ExecutionEngine.download_async."""
    monkeypatch.delattr(ExecutionEngine, "download_async")
    with pytest.raises(RuntimeError) as error:
        _compat.check()
    message = str(error.value)
    assert f"Scrapy {_compat.SCRAPY_VERSION}" in message
    assert "ExecutionEngine.download_async is missing (new in Scrapy 2.14)" in message


@pytest.mark.parametrize(
    ("version", "release"),
    [
        ("2.14.2", (2, 14, 2)),
        ("2.15", (2, 15)),
        ("2.20.0.dev1", (2, 20, 0)),
        ("3.0.0rc1", (3, 0, 0)),
    ],
)
def test_release_numbers(version: str, release: tuple[int, ...]) -> None:
    assert _compat._release(version) == release


# -- component priority dicts ---------------------------------------------------------------------


class Custom:
    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        return None


@pytest.mark.parametrize(
    "middlewares",
    [
        pytest.param({}, id="defaults"),
        # Scrapy 2.14 builds the middleware anyway: the class key does not
        # replace the import path in DOWNLOADER_MIDDLEWARES_BASE
        pytest.param({ScrapyMiddleware: None}, id="class-key-None"),
        pytest.param({SCRAPY_PATH: None}, id="path-None"),
        pytest.param({ScrapyMiddleware: 650, UserAgentMiddleware: None}, id="moved-and-off"),
        pytest.param({Custom: 543, f"{__name__}.Custom": 544}, id="custom-twice"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_downloader_middlewares_are_those_the_crawler_builds(
    middlewares: dict[Any, int | None],
) -> None:
    settings = {**PLAIN_SETTINGS, "DOWNLOADER_MIDDLEWARES": middlewares}
    crawler, built = await crawl(settings)
    enabled = _compat.downloader_middlewares(crawler.settings)
    # Some enabled middlewares build nothing (NotConfigured): the others, in order.
    assert built == [component for component, _ in enabled if component in built]
    orders = [order for component, order in enabled if component is ScrapyMiddleware]
    assert len(orders) == built.count(ScrapyMiddleware)
    # Scrapy 2.15: a class key replaces the base's import path of the same class
    if ScrapyMiddleware in middlewares and _compat._release(_compat.SCRAPY_VERSION) >= (2, 15):
        assert orders == ([] if middlewares[ScrapyMiddleware] is None else [650])


class DisablingAddon:
    """What scrapy_rep.Addon does to Scrapy's middleware."""

    def update_settings(self, settings: BaseSettings) -> None:
        _compat.set_component(
            settings, "DOWNLOADER_MIDDLEWARES", ScrapyMiddleware, None, default=True
        )


@pytest_twisted.ensureDeferred
async def test_an_addon_turns_scrapys_middleware_off(site: ScriptedServer) -> None:
    settings = {**PLAIN_SETTINGS, "ADDONS": {DisablingAddon: 100}}
    _, built = await crawl(settings, site.url("/page"))
    assert ScrapyMiddleware not in built
    assert site.hits("/robots.txt") == 0
    assert site.hits("/page") == 1


@pytest.mark.parametrize("key", [SCRAPY_PATH, ScrapyMiddleware])
@pytest_twisted.ensureDeferred
async def test_an_addon_default_keeps_a_middleware_the_project_enabled(
    key: Any, site: ScriptedServer
) -> None:
    settings = {
        **PLAIN_SETTINGS,
        "ADDONS": {DisablingAddon: 100},
        "DOWNLOADER_MIDDLEWARES": {key: 100},
    }
    _, built = await crawl(settings, site.url("/page"))
    assert built.count(ScrapyMiddleware) == 1
    assert site.hits("/robots.txt") == 1


@pytest.mark.parametrize("key", [SCRAPY_PATH, ScrapyMiddleware])
def test_set_component_overrides_the_project_and_the_base(key: Any) -> None:
    settings = Settings({"DOWNLOADER_MIDDLEWARES": {key: 100}})
    _compat.set_component(settings, "DOWNLOADER_MIDDLEWARES", ScrapyMiddleware, None)
    assert scrapy_orders(settings) == []
    _compat.set_component(settings, "DOWNLOADER_MIDDLEWARES", ScrapyMiddleware, 120)
    assert scrapy_orders(settings) == [120]


def scrapy_orders(settings: BaseSettings) -> list[float]:
    middlewares = _compat.downloader_middlewares(settings)
    return [order for component, order in middlewares if component is ScrapyMiddleware]


# -- robots_parsed --------------------------------------------------------------------------------


def test_robots_parsed_is_scrapys_signal_where_it_exists() -> None:
    assert _compat.ROBOTS_PARSED is getattr(signals, "robots_parsed", None)
    if _compat._release(_compat.SCRAPY_VERSION) >= (2, 18):
        assert _compat.ROBOTS_PARSED is not None


@pytest_twisted.ensureDeferred
async def test_send_robots_parsed_reaches_receivers_or_does_nothing() -> None:
    crawler = get_crawler(Idle)
    received: list[tuple[Any, Any]] = []
    if _compat.ROBOTS_PARSED is not None:
        crawler.signals.connect(
            lambda robotparser, request: received.append((robotparser, request)),
            signal=_compat.ROBOTS_PARSED,
            weak=False,
        )
    parser = RobotParser(RobotsTxt.parse(b"User-agent: *\nDisallow: /\n"))
    request = Request("https://example.com/page")
    await deferred_from_coro(_compat.send_robots_parsed(crawler, parser, request))
    assert received == ([(parser, request)] if _compat.ROBOTS_PARSED is not None else [])


# -- SitemapSpider --------------------------------------------------------------------------------


class Shop(SitemapSpider):
    name = "shop"
    sitemap_rules = (("/product/", "parse_product"), ("/blog/", "parse"))
    sitemap_follow = ("/sitemap-products",)
    sitemap_alternate_links = True

    def parse_product(self, response: Any) -> None:
        return None


ENTRIES = [
    {"loc": "https://shop.example/sitemap-products-1.xml"},
    {"loc": "https://shop.example/sitemap-news.xml"},
    {"loc": ""},  # an empty <loc>
    {
        "loc": "https://shop.example/product/1",
        "alternate": ["https://shop.example/fr/product/1", "https://shop.example/fr/about"],
    },
    {"loc": "https://shop.example/blog/hello"},
    {"loc": "https://shop.example/about"},
]


def test_sitemap_follow_picks_the_sitemaps_of_an_index() -> None:
    urls = list(_compat.sitemapindex_urls(Shop(), ENTRIES))
    assert urls == ["https://shop.example/sitemap-products-1.xml"]


def test_sitemap_rules_give_each_page_its_first_matching_callback() -> None:
    spider = Shop()
    pairs = list(_compat.urlset_urls_and_callbacks(spider, ENTRIES))
    assert pairs == [
        ("https://shop.example/product/1", spider.parse_product),
        ("https://shop.example/fr/product/1", spider.parse_product),
        ("https://shop.example/blog/hello", spider.parse),
    ]


def test_a_spider_overriding_the_helper_is_obeyed_on_every_release() -> None:
    class Everything(Shop):
        def _get_urls_from_sitemapindex(self, entries: Any) -> Any:
            return (entry["loc"] for entry in entries if entry["loc"])

    urls = list(_compat.sitemapindex_urls(Everything(), ENTRIES))
    assert len(urls) == 5
