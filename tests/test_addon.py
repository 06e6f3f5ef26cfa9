"""scrapy_rep.Addon: what ADDONS = {"scrapy_rep.Addon": 100} enables, in real crawls."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import pytest_twisted
from crawls import run_crawl
from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as ScrapyMiddleware
from servers import Reply, ScriptedServer

from scrapy_rep import MetaRobotsMiddleware, RobotsTxtMiddleware

SCRAPY_PATH = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"


def record_components(found: dict[str, list[Any]]) -> Any:
    def before(crawler: Crawler) -> None:
        def opened(spider: Any) -> None:
            assert crawler.engine is not None
            found["downloader"] = list(crawler.engine.downloader.middleware.middlewares)
            found["spider"] = list(crawler.engine.scraper.spidermw.middlewares)

        crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)

    return before


def kinds(components: list[Any]) -> list[type]:
    return [type(component) for component in components]


def both_enabled_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The WARNING that both robots.txt middlewares run (and no ERROR about it)."""
    said = [r for r in caplog.records if "Scrapy's own RobotsTxtMiddleware" in r.getMessage()]
    assert all(r.levelno == logging.WARNING for r in said)
    return said


@pytest_twisted.ensureDeferred
async def test_addon_replaces_scrapys_middleware_at_its_place(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    site.script("/robots.txt", Reply(status=404, body=b"User-agent: *\nDisallow: /\n"))
    found: dict[str, list[Any]] = {}
    await run_crawl([site.url("/page")], before=record_components(found))

    downloader = kinds(found["downloader"])
    assert RobotsTxtMiddleware in downloader
    assert ScrapyMiddleware not in downloader
    # where Scrapy's own was: after OffsiteMiddleware (50), before HttpAuthMiddleware (300)
    names = [cls.__name__ for cls in downloader]
    assert names.index("OffsiteMiddleware") < names.index("RobotsTxtMiddleware")
    assert names.index("RobotsTxtMiddleware") < names.index("HttpAuthMiddleware")
    assert MetaRobotsMiddleware in kinds(found["spider"])
    assert site.hits("/page") == 1  # Scrapy's own would have parsed the 404 body
    assert both_enabled_warnings(caplog) == []


@pytest_twisted.ensureDeferred
async def test_addon_respects_orders_set_by_hand(site: ScriptedServer) -> None:
    found: dict[str, list[Any]] = {}
    await run_crawl(
        [site.url("/page")],
        {
            "DOWNLOADER_MIDDLEWARES": {"scrapy_rep.RobotsTxtMiddleware": 560},
            "SPIDER_MIDDLEWARES": {"scrapy_rep.MetaRobotsMiddleware": None},
        },
        before=record_components(found),
    )
    names = [cls.__name__ for cls in kinds(found["downloader"])]
    assert names.index("UserAgentMiddleware") < names.index("RobotsTxtMiddleware")  # 500 < 560
    assert MetaRobotsMiddleware not in kinds(found["spider"])


@pytest_twisted.ensureDeferred
async def test_rep_meta_robots_false_leaves_the_spider_middleware_out(
    site: ScriptedServer,
) -> None:
    found: dict[str, list[Any]] = {}
    await run_crawl([site.url("/")], {"REP_META_ROBOTS": False}, before=record_components(found))
    assert MetaRobotsMiddleware not in kinds(found["spider"])
    assert RobotsTxtMiddleware in kinds(found["downloader"])


@pytest_twisted.ensureDeferred
async def test_scrapys_middleware_enabled_by_hand_next_to_ours_logs_one_warning(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    await run_crawl([site.url("/")], {"DOWNLOADER_MIDDLEWARES": {SCRAPY_PATH: 100}})
    (warning,) = both_enabled_warnings(caplog)
    # the add-on is on: the fix is in DOWNLOADER_MIDDLEWARES, not in ADDONS
    message = warning.getMessage()
    fix = f"remove '{SCRAPY_PATH}' from DOWNLOADER_MIDDLEWARES"
    assert (
        f"The add-on is enabled, but DOWNLOADER_MIDDLEWARES names Scrapy's middleware: {fix}"
        in (message)
    )
    assert "ADDONS" not in message


@pytest_twisted.ensureDeferred
async def test_enabling_ours_by_hand_without_disabling_scrapys_logs_one_warning(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    await run_crawl(
        [site.url("/")],
        {"ADDONS": {}, "DOWNLOADER_MIDDLEWARES": {"scrapy_rep.RobotsTxtMiddleware": 100}},
    )
    (warning,) = both_enabled_warnings(caplog)
    assert "enable scrapy-rep with ADDONS = {'scrapy_rep.Addon': 100}" in warning.getMessage()


@pytest_twisted.ensureDeferred
async def test_enabling_by_hand_the_documented_way(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    site.robots("User-agent: *\nDisallow: /private\n")
    result = await run_crawl(
        [site.url("/private"), site.url("/public")],
        {
            "ADDONS": {},
            "DOWNLOADER_MIDDLEWARES": {
                SCRAPY_PATH: None,
                "scrapy_rep.RobotsTxtMiddleware": 100,
            },
        },
    )
    assert (site.hits("/private"), site.hits("/public")) == (0, 1)
    assert result.stats["rep/forbidden"] == 1
    assert both_enabled_warnings(caplog) == []


@pytest_twisted.ensureDeferred
async def test_robotstxt_obey_false_disables_it_with_one_info_line(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    site.robots("User-agent: *\nDisallow: /\n")
    caplog.set_level(logging.INFO)
    result = await run_crawl([site.url("/page")], {"ROBOTSTXT_OBEY": False})
    assert site.hits("/robots.txt") == 0
    assert site.hits("/page") == 1
    lines = [r for r in caplog.records if "ROBOTSTXT_OBEY is False" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.INFO]
    assert not [k for k in result.stats if k.startswith("rep/")]


def test_help_on_the_addon_says_what_it_sets_and_how_to_turn_parts_off() -> None:
    """``help(scrapy_rep.Addon)``: the one class the Quick start names."""
    import pydoc

    import scrapy_rep
    from scrapy_rep import addon, decompression, usage_middleware

    text = pydoc.render_doc(scrapy_rep.Addon, renderer=pydoc.plaintext)
    for said in (
        f"scrapy_rep.RobotsTxtMiddleware`` at {addon.MIDDLEWARE_ORDER}",
        f"scrapy_rep.BoundedDecompressionMiddleware`` at {decompression.ORDER}",
        f"scrapy_rep.UsageMiddleware`` at {usage_middleware.ORDER}",
        f"scrapy_rep.MetaRobotsMiddleware`` at {addon.META_MIDDLEWARE_ORDER}",
        f'SCHEDULER_PRIORITY_QUEUE = "{addon.FRONTIER_QUEUE}"',
        'at the "addon" settings priority',
        "ROBOTSTXT_OBEY = False",
        "REP_FRONTIER = False",
        "REP_META_ROBOTS = False",
        "REP_PURPOSES",
        '{"scrapy_rep.BoundedDecompressionMiddleware": None}',
    ):
        assert said in " ".join(text.split()), said
