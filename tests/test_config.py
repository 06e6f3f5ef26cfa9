"""Settings: read once, validated; an invalid value stops the crawl at start."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import pytest_twisted
from crawls import run_crawl
from servers import ScriptedServer

from scrapy_rep.config import Config
from scrapy_rep.exceptions import InvalidSetting
from scrapy_rep.robotstxt._agent import product_token


def test_defaults() -> None:
    config = Config.from_settings({"ROBOTSTXT_OBEY": True, "USER_AGENT": "ExampleBot/1.0"})
    assert config.obey is True
    assert config.user_agent == "ExampleBot"
    assert (config.max_size, config.fetch_timeout, config.fetch_retries) == (512_000, 10.0, 1)
    assert (config.unreachable, config.cache_ttl, config.max_crawl_delay) == (
        "disallow",
        86_400,
        60,
    )
    assert (config.dry_run, config.obey_crawl_delay) == (False, True)
    assert (config.meta_robots, config.meta_noindex) == (True, "keep")


def test_values_are_read_from_strings_too() -> None:
    config = Config.from_settings(
        {
            "REP_DRY_RUN": "True",
            "REP_MAX_SIZE": "1000",
            "REP_CACHE_TTL": "60.5",
            "REP_UNREACHABLE": " Defer ",
        }
    )
    assert (config.dry_run, config.max_size, config.cache_ttl) == (True, 1000, 60.5)
    assert config.unreachable == "defer"


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("REP_MAX_SIZE", 0),
        ("REP_MAX_SIZE", "big"),
        ("REP_MAX_SIZE", 1.5),
        ("REP_HEADERS_MAX", -1),
        ("REP_FETCH_TIMEOUT", 0),
        ("REP_FETCH_TIMEOUT", "nan"),
        ("REP_FETCH_RETRIES", -1),
        ("REP_UNREACHABLE", "ignore"),
        ("REP_UNREACHABLE", True),
        ("REP_CACHE_TTL", -5),
        ("REP_CACHE_TTL", True),
        ("REP_CACHE_MAX_ORIGINS", 0),
        ("REP_DRY_RUN", "maybe"),
        ("REP_OBEY_CRAWL_DELAY", "yes please"),
        ("REP_MAX_CRAWL_DELAY", -1),
        ("REP_META_NOINDEX", "delete"),
        ("REP_RETRY_MIN", 0),
        ("REP_MAX_WAITING", -1),
        ("ROBOTSTXT_OBEY", "perhaps"),
    ],
)
def test_invalid_values_name_the_setting(setting: str, value: Any) -> None:
    with pytest.raises(InvalidSetting) as raised:
        Config.from_settings({setting: value})
    assert raised.value.setting == setting
    assert str(raised.value).startswith(f"{setting}: ")
    assert isinstance(raised.value, ValueError)


def test_bounds_between_settings() -> None:
    with pytest.raises(InvalidSetting, match="REP_CACHE_MIN_TTL"):
        Config.from_settings({"REP_CACHE_TTL": 100, "REP_CACHE_MIN_TTL": 200})
    with pytest.raises(InvalidSetting, match="REP_RETRY_MAX"):
        Config.from_settings({"REP_RETRY_MIN": 100, "REP_RETRY_MAX": 10})


@pytest_twisted.ensureDeferred
async def test_an_invalid_value_stops_the_crawl_at_start(site: ScriptedServer) -> None:
    with pytest.raises(InvalidSetting, match="REP_UNREACHABLE"):
        await run_crawl([site.url("/")], {"REP_UNREACHABLE": "sometimes"})
    assert site.hits() == 0


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("ExampleBot/1.0 (+http://example.com/bot)", "ExampleBot"),
        ("ExampleBot", "ExampleBot"),
        ("Example-Bot_2/1.0", "Example-Bot_"),
        ("Scrapy/2.19 (+https://scrapy.org)", "Scrapy"),
        ("Mozilla/5.0 (compatible; ExampleBot/1.0; +http://example.com/bot)", "ExampleBot"),
        ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "Googlebot"),
        (b"ExampleBot/1.0", "ExampleBot"),
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36", None),
        ("Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)", None),
        ("", None),
        (None, None),
    ],
)
def test_product_token(header: str | bytes | None, token: str | None) -> None:
    assert product_token(header) == token


def test_robotstxt_user_agent_wins_over_user_agent() -> None:
    config = Config.from_settings(
        {"ROBOTSTXT_USER_AGENT": "SpecialBot", "USER_AGENT": "ExampleBot/1.0"}
    )
    assert config.user_agent == "SpecialBot"


def test_robotstxt_user_agent_without_a_token_is_invalid() -> None:
    with pytest.raises(InvalidSetting, match="ROBOTSTXT_USER_AGENT"):
        Config.from_settings({"ROBOTSTXT_USER_AGENT": "Mozilla/5.0 (X11; Linux x86_64)"})


@pytest_twisted.ensureDeferred
async def test_browser_like_user_agent_warns_how_to_set_the_token(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    site.robots("User-agent: *\nDisallow: /star\n\nUser-agent: Mozilla\nDisallow: /moz\n")
    await run_crawl(
        [site.url("/star"), site.url("/moz")],
        {"USER_AGENT": "Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/120.0"},
    )
    warnings = [r for r in caplog.records if "ROBOTSTXT_USER_AGENT" in r.getMessage()]
    assert [r.levelno for r in warnings] == [logging.WARNING]
    assert (site.hits("/star"), site.hits("/moz")) == (0, 1)  # only the * group applies


@pytest_twisted.ensureDeferred
async def test_lower_case_and_scrapy_prefixed_typos_name_the_setting_meant(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """rep_unreachable (lower case) and ROBOTSTXT_USERAGENT (Scrapy's name misspelt) are
    read by nobody: one WARNING each at start, naming the setting meant; a setting
    of someone else's (MY_PIPELINE_OPTION) is left alone."""
    settings = {"rep_unreachable": "allow", "ROBOTSTXT_USERAGENT": "X", "MY_PIPELINE_OPTION": 1}
    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        await run_crawl([site.url("/")], settings)
    said = sorted(r.getMessage() for r in caplog.records if "Unknown setting" in r.getMessage())
    assert said == [
        "Unknown setting ROBOTSTXT_USERAGENT is ignored; did you mean ROBOTSTXT_USER_AGENT?",
        "Unknown setting rep_unreachable is ignored; did you mean REP_UNREACHABLE?",
    ]


@pytest.mark.parametrize(
    ("name", "token", "rest", "fix"),
    [
        ("Agent5", "Agent", "5", " (e.g. 'Agent')"),
        # USER_AGENT "My Crawler/1.0" would not name the fixed one: one message says both
        (
            "My Crawler",
            "My",
            " Crawler",
            " (e.g. 'MyCrawler'), and USER_AGENT name the same crawler "
            "('MyCrawler/1.0 (+https://your.site/bot)')",
        ),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_name_longer_than_its_product_token_is_warned_once(
    site: ScriptedServer,
    caplog: pytest.LogCaptureFixture,
    name: str,
    token: str,
    rest: str,
    fix: str,
) -> None:
    """ROBOTSTXT_USER_AGENT = "Agent5" is obeyed as "Agent" (RFC 9309 tokens have no
    digits or spaces), so "User-agent: Agent1" applies to it: one WARNING at start
    names the token used and why."""
    site.robots(f"User-agent: {token}1\nDisallow: /one\n\nUser-agent: *\nDisallow:\n")
    settings = {"ROBOTSTXT_USER_AGENT": name, "USER_AGENT": f"{name}/1.0"}
    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        await run_crawl([site.url("/one"), site.url("/two")], settings)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"ROBOTSTXT_USER_AGENT {name!r} is obeyed as {token!r}: a robots.txt "
        f"product token holds only letters, '_' and '-' (RFC 9309 §2.2.1), so it ends before "
        f"{rest!r}. User-agent lines are cut the same way: the groups of 'User-agent: {token}', "
        f"'{token}1' or '{token} Other' apply to this crawler. Set ROBOTSTXT_USER_AGENT to a "
        f"name of letters, '_' and '-' only{fix}"
    ]
    assert (site.hits("/one"), site.hits("/two")) == (0, 1)


@pytest.mark.parametrize(
    "name", ["ExampleBot", "ExampleBot/1.0 (+http://example.com/bot)", "Example_Bot-x"]
)
def test_a_name_that_is_its_product_token_is_not_warned_about(name: str) -> None:
    """A version after "/" or a comment in brackets is not part of the name."""
    config = Config.from_settings({"ROBOTSTXT_USER_AGENT": name, "USER_AGENT": name})
    assert config.warnings == ()
