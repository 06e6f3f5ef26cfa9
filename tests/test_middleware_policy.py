"""The pieces under the middleware: fetch outcome -> rules (policy.py), origins, the LRU cache."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from scrapy_rep.cache import MemoryRulesCache
from scrapy_rep.config import Config
from scrapy_rep.origin import OriginKeys, origin_of, origin_text, robots_url
from scrapy_rep.policy import PARSED, UNAVAILABLE, UNREACHABLE, max_age, retry_after

pytestmark = pytest.mark.reactor_free  # no crawl in pytest's process: its reactor changes nothing

NOW = 1_000_000.0
POLICY = Config().policy
RULES = b"User-agent: *\nDisallow: /private\n"


def test_2xx_is_parsed_and_fresh_for_the_ttl() -> None:
    entry = POLICY.on_response(200, RULES, url="http://h/robots.txt", now=NOW)
    assert entry.outcome == PARSED
    assert entry.robots is not None
    assert not entry.robots.allowed("/private", user_agent="bot")
    assert entry.expires == NOW + 86_400


@pytest.mark.parametrize(
    ("cache_control", "fresh_for"),
    [
        ("max-age=3600", 3600),
        ("public, max-age=10", 60),
        ("max-age=999999", 86_400),
        ("no-cache", 60),
        ("private", 86_400),
    ],
)
def test_max_age_is_honoured_within_bounds(cache_control: str, fresh_for: float) -> None:
    entry = POLICY.on_response(200, RULES, url="u", now=NOW, cache_control=cache_control)
    assert entry.expires == NOW + fresh_for


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 451, 300, 399])
def test_4xx_and_unfollowed_3xx_allow_all(status: int) -> None:
    entry = POLICY.on_response(status, b"User-agent: *\nDisallow: /", url="u", now=NOW)
    assert entry.outcome == UNAVAILABLE
    assert entry.robots is not None
    assert entry.robots.allowed("/x", user_agent="bot")


@pytest.mark.parametrize("status", [429, 500, 502, 503, 599])
def test_429_and_5xx_disallow_all_without_rules_to_fall_back_on(status: int) -> None:
    entry = POLICY.on_response(status, b"User-agent: *\nAllow: /", url="u", now=NOW)
    assert entry.outcome == UNREACHABLE
    assert entry.robots is None
    assert entry.reason == f"HTTP {status}"
    assert entry.expires == NOW + 60


def test_backoff_doubles_up_to_the_bound_and_honours_retry_after() -> None:
    entry = POLICY.on_error("TimeoutError", now=NOW)
    waits = []
    for _ in range(8):
        waits.append(entry.expires - NOW)
        entry = POLICY.on_error("TimeoutError", now=NOW, previous=entry)
    assert waits == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    limited = POLICY.on_response(503, b"", url="u", now=NOW, retry_after_header="300")
    assert limited.expires == NOW + 300
    too_long = POLICY.on_response(429, b"", url="u", now=NOW, retry_after_header="99999")
    assert too_long.expires == NOW + 3_600


def test_last_good_rules_are_served_for_up_to_30_days_after_errors() -> None:
    good = POLICY.on_response(200, RULES, url="u", now=NOW)
    stale = POLICY.on_error("HTTP 503", now=NOW + 90_000, previous=good)
    assert stale.robots is good.robots
    assert stale.stale
    later = POLICY.on_error("HTTP 503", now=NOW + 29 * 86_400, previous=stale)
    assert later.robots is good.robots
    expired = POLICY.on_error("HTTP 503", now=NOW + 31 * 86_400, previous=later)
    assert expired.robots is None


def test_retry_after_parsing() -> None:
    assert retry_after("120", NOW) == 120
    assert retry_after(" 5 ", NOW) == 5
    assert retry_after("Thu, 01 Jan 1970 00:00:00 GMT", NOW) == 0  # past: at once
    assert retry_after("soon", NOW) is None
    assert max_age('max-age="5"') == 5


HTTP_DATE = 1_700_000_000.0  # Tue, 14 Nov 2023 22:13:20 GMT


@pytest.mark.parametrize(
    "value",
    [
        "Tue, 14 Nov 2023 22:13:50 GMT",  # IMF-fixdate
        "Tuesday, 14-Nov-23 22:13:50 GMT",  # RFC 850
        "Tue Nov 14 22:13:50 2023",  # asctime: no zone, so UTC (not local time)
    ],
)
def test_retry_after_http_dates_count_from_the_servers_date(value: str) -> None:
    """RFC 9110 §10.2.3 / §5.6.7: three date forms; the wait counts from the
    response's Date (the server's clock), else from our clock."""
    assert retry_after(value, 0.0, date="Tue, 14 Nov 2023 22:13:20 GMT") == 30
    assert retry_after(value, HTTP_DATE) == 30


@pytest.mark.parametrize(
    "value",
    [
        "²",  # the byte 0xB2, read as Latin-1
        "-5",
        "1e3",
        "1_000",
        "inf",
        "nan",
        "0x10",
        "5 s",
        "Tue, 99 Nov 2023",
        "a" * 5000,
    ],
)
def test_hostile_retry_after_says_nothing(value: str) -> None:
    """Anything but ASCII digits or an HTTP date is no Retry-After (the backoff
    applies); nothing raises."""
    assert retry_after(value, NOW) is None


def test_huge_retry_after_is_infinite_not_an_error() -> None:
    """5,000 digits: past Python's int-string limit, still read (callers cap it)."""
    assert retry_after("9" * 5000, NOW) == float("inf")
    entry = POLICY.on_response(503, b"", url="u", now=NOW, retry_after_header="9" * 5000)
    assert entry.expires == NOW + POLICY.retry_max


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://Example.COM/a", ("http", "example.com", 80)),
        ("http://example.com:80/a", ("http", "example.com", 80)),
        ("https://example.com/a", ("https", "example.com", 443)),
        ("https://example.com:443/", ("https", "example.com", 443)),
        ("http://example.com:8080/", ("http", "example.com", 8080)),
        ("http://example.com:0/", ("http", "example.com", 0)),  # not port 80
        ("http://bücher.example/", ("http", "xn--bcher-kva.example", 80)),
        ("http://xn--bcher-kva.example/", ("http", "xn--bcher-kva.example", 80)),
        ("http://[::1]:8000/", ("http", "::1", 8000)),
        ("ftp://example.com/", None),
        ("data:text/plain,hi", None),
        ("http://example.com:99999/", None),
    ],
)
def test_origins(url: str, origin: tuple[str, str, int] | None) -> None:
    assert origin_of(urlparse(url)) == origin
    assert OriginKeys().get(urlparse(url)) == origin


def test_http_and_https_never_share_an_origin() -> None:
    http = origin_of(urlparse("http://example.com/"))
    https = origin_of(urlparse("https://example.com/"))
    assert http != https


def test_robots_url() -> None:
    assert robots_url(("https", "example.com", 443)) == "https://example.com/robots.txt"
    assert robots_url(("http", "example.com", 8080)) == "http://example.com:8080/robots.txt"
    assert origin_text(("http", "::1", 8000)) == "http://[::1]:8000"


@pytest.mark.parametrize(
    ("url", "text"),
    [
        ("http://Example.COM:80/a", "http://example.com"),
        ("https://example.com:8443/", "https://example.com:8443"),
        ("http://example.com:443/", "http://example.com:443"),
        ("http://[::1]:8000/", "http://[::1]:8000"),
    ],
)
def test_an_origin_carries_its_text_and_is_the_plain_tuple(url: str, text: str) -> None:
    """Origin.text and robots_url are what origin_text() and robots_url() say; an
    Origin is equal to, hashed as and the same dict key as its plain tuple."""
    origin = origin_of(urlparse(url))
    assert origin is not None
    plain = tuple(origin)
    assert (origin.text, origin.robots_url) == (text, text + "/robots.txt")
    assert (origin_text(plain), robots_url(plain)) == (text, text + "/robots.txt")
    assert origin == plain
    assert hash(origin) == hash(plain)
    assert {plain: 1}[origin] == 1
    assert {origin: 2}[plain] == 2
    assert (origin.scheme, origin.host, origin.port) == plain


def test_memory_cache_evicts_the_least_recently_used() -> None:
    cache = MemoryRulesCache(max_origins=2)
    a, b, c = (("http", name, 80) for name in "abc")
    entry = POLICY.on_response(200, RULES, url="u", now=NOW)
    cache.put(a, entry)
    cache.put(b, entry)
    assert cache.get(a) is entry  # a is now the most recently used
    cache.put(c, entry)
    assert (cache.get(a), cache.get(b), cache.get(c)) == (entry, None, entry)
    assert len(cache) == 2
