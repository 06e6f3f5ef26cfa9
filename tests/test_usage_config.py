"""REP_PURPOSES and REP_USAGE_ACTION: read, validated, and what the add-on enables."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from crawls import run_crawl
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler
from servers import ScriptedServer

from scrapy_rep import UsageMiddleware
from scrapy_rep.config import Config, default_of
from scrapy_rep.exceptions import InvalidSetting


def test_defaults_nothing_declared_annotate() -> None:
    config = Config.from_settings({})
    assert config.purposes == () == default_of("REP_PURPOSES")
    assert config.usage_action == "annotate" == default_of("REP_USAGE_ACTION")


@pytest.mark.parametrize(
    ("value", "purposes"),
    [
        (["train-ai"], ("train-ai",)),
        (("search", "ai-input"), ("search", "ai-input")),
        ("train-ai, Search,train-ai", ("train-ai", "search")),  # -s REP_PURPOSES=...
        ([], ()),
        ("", ()),
    ],
)
def test_purposes_from_lists_and_strings(value: Any, purposes: tuple[str, ...]) -> None:
    assert Config.from_settings({"REP_PURPOSES": value}).purposes == purposes


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("REP_PURPOSES", ["ai-train"], "unknown purpose 'ai-train' (did you mean 'train-ai'?)"),
        ("REP_PURPOSES", ["tdm"], "unknown purpose 'tdm'; known purposes: 'train-ai'"),
        ("REP_PURPOSES", 1, "expected a list of purposes, got 1"),
        ("REP_PURPOSES", [None], "unknown purpose None"),
        ("REP_USAGE_ACTION", "skip", "expected one of 'annotate', 'drop', got 'skip'"),
    ],
)
def test_invalid_values_name_the_setting(setting: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidSetting, match=f"^{setting}: ") as raised:
        Config.from_settings({setting: value})
    assert message in str(raised.value)


def test_settings_are_known_no_unknown_setting_warning() -> None:
    config = Config.from_settings({"REP_PURPOSES": ["search"], "REP_USAGE_ACTION": "drop"})
    assert not [w for w in config.warnings if "Unknown setting" in w]


def test_middleware_not_configured_without_purposes_or_without_obey() -> None:
    with pytest.raises(NotConfigured, match="REP_PURPOSES is empty"):
        UsageMiddleware.from_crawler(get_crawler(settings_dict={"ROBOTSTXT_OBEY": True}))
    off = {"ROBOTSTXT_OBEY": False, "REP_PURPOSES": ["search"]}
    with pytest.raises(NotConfigured, match="ROBOTSTXT_OBEY is off"):
        UsageMiddleware.from_crawler(get_crawler(settings_dict=off))


@pytest.mark.parametrize(
    ("purposes", "enabled"), [(None, False), ([], False), ("", False), (["search"], True)]
)
@pytest_twisted.ensureDeferred
async def test_addon_enables_the_middleware_after_robots_only_with_purposes(
    site: ScriptedServer, purposes: Any, enabled: bool
) -> None:
    """Placed at 101, just after RobotsTxtMiddleware (100); absent without purposes."""
    site.robots("User-agent: *\nAllow: /\n")
    settings = {} if purposes is None else {"REP_PURPOSES": purposes}
    result = await run_crawl([site.url("/")], settings)
    engine = result.crawler.engine
    assert engine is not None
    names = [type(m).__name__ for m in engine.downloader.middleware.middlewares]
    assert ("UsageMiddleware" in names) is enabled
    if enabled:
        assert names.index("UsageMiddleware") == names.index("RobotsTxtMiddleware") + 1
