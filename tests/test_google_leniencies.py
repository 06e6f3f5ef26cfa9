"""Readings beyond RFC 9309 that Google documents or its reference parser applies.

Each test says which leniency it checks; the RFC alone would not require it.
"""

from __future__ import annotations

import pytest

from scrapy_rep import RobotsTxt

# no Scrapy code runs: neither the reactor nor Scrapy's version changes anything
pytestmark = [pytest.mark.reactor_free, pytest.mark.scrapy_free]

BOT = "ExampleBot"
GOOGLE_MAX_LINE = 16_663  # bytes of a line Google's reference parser keeps


def allowed(body: str | bytes, url: str, agent: str = BOT) -> bool:
    return RobotsTxt.parse(body).allowed(url, user_agent=agent)


@pytest.mark.parametrize("body", [b"\xef\xbb\xbf", "\ufeff"], ids=["bytes", "str"])
def test_utf8_bom_is_ignored(body: bytes | str) -> None:
    """Leniency beyond RFC 9309: a UTF-8 byte order mark before the first line is skipped.

    BOM + "User-agent: examplebot" / Disallow: /x -> /x disallowed (the first
    line is not spoilt by the BOM), and line numbers are unchanged.
    """
    text = "User-agent: examplebot\nDisallow: /x\n"
    full = body + text.encode() if isinstance(body, bytes) else body + text
    robots = RobotsTxt.parse(full)
    decision = robots.decide("/x", user_agent=BOT)
    assert (decision.allowed, decision.line) == (False, 2)


@pytest.mark.parametrize("key", ["disalow", "dissallow", "dissalow", "diasllow", "disallaw"])
def test_disallow_typos_are_read_as_disallow(key: str) -> None:
    """Leniency beyond RFC 9309: Google's reference accepts common misspellings of disallow.

    User-agent: examplebot / <typo>: /x -> /x disallowed; decide() names it "Disallow: /x".
    """
    body = f"User-agent: examplebot\n{key}: /x\n"
    decision = RobotsTxt.parse(body).decide("/x", user_agent=BOT)
    assert (decision.allowed, decision.rule) == (False, "Disallow: /x")
    assert not allowed(f"User-agent: examplebot\n{key.upper()}: /x\n", "/x")


@pytest.mark.parametrize("key", ["user agent", "useragent", "User Agent", "UserAgent"])
def test_user_agent_typos_are_read_as_user_agent(key: str) -> None:
    """Leniency beyond RFC 9309: "user agent" and "useragent" start a group like user-agent.

    <typo>: examplebot / Disallow: /x -> /x disallowed for ExampleBot.
    """
    assert not allowed(f"{key}: examplebot\nDisallow: /x\n", "/x")


@pytest.mark.parametrize("key", ["site-map", "Site-Map", "sitemap"])
def test_site_map_typo_is_a_sitemap(key: str) -> None:
    """Leniency beyond RFC 9309: "site-map" is read as Sitemap.

    site-map: https://example.com/s.xml -> sitemaps == ("https://example.com/s.xml",).
    """
    robots = RobotsTxt.parse(f"{key}: https://example.com/s.xml\n")
    assert robots.sitemaps == ("https://example.com/s.xml",)


@pytest.mark.parametrize("key", ["Crawl-delay", "crawl delay", "CRAWLDELAY"])
def test_crawl_delay_spellings(key: str) -> None:
    """Leniency beyond RFC 9309 (which has no Crawl-delay): its key spelt as the
    other keys may be, with a hyphen, a space or neither, in any case.

    User-agent: examplebot / <key>: 2.5 -> crawl_delay == 2.5.
    """
    robots = RobotsTxt.parse(f"User-agent: examplebot\n{key}: 2.5\n")
    assert robots.crawl_delay(user_agent=BOT) == 2.5


@pytest.mark.parametrize("key", ["Request-rate", "request rate", "REQUESTRATE"])
def test_request_rate_spellings(key: str) -> None:
    """Leniency beyond RFC 9309: Request-rate with a hyphen, a space or neither, any case.

    User-agent: examplebot / <key>: 1/5 -> request_rate == (1, 5.0).
    """
    robots = RobotsTxt.parse(f"User-agent: examplebot\n{key}: 1/5\n")
    assert robots.request_rate(user_agent=BOT) == (1, 5.0)


@pytest.mark.parametrize(
    "line",
    [
        "disllow: /x",
        "dsallow: /x",
        "dissalllow: /x",
        "di sallow: /x",
        "alow: /x",
        "user_agent: examplebot",
        "user--agent: examplebot",
        "site map: https://example.com/s.xml",
        "crawl_delay: 5",
        "request_rate: 1/5",
    ],
)
def test_keys_close_to_a_known_spelling_are_not_read(line: str) -> None:
    """The limit of the typo leniency: only Google's spellings count, nothing near them.

    User-agent: examplebot / <near miss> / Disallow: /y -> /x allowed, no sitemap, no
    delay, no rate, and the group (and its Disallow: /y) still belongs to examplebot.
    """
    robots = RobotsTxt.parse(f"User-agent: examplebot\n{line}\nDisallow: /y\n")
    assert robots.allowed("/x", user_agent=BOT)
    assert not robots.allowed("/y", user_agent=BOT)
    assert robots.sitemaps == ()
    assert robots.crawl_delay(user_agent=BOT) is None
    assert robots.request_rate(user_agent=BOT) is None


def test_missing_colon_with_exactly_two_words() -> None:
    """Leniency beyond RFC 9309: a forgotten colon works when the line is exactly two words.

    "User-agent examplebot" / "Disallow /x" -> /x disallowed, rule "Disallow: /x", line 2.
    """
    body = "User-agent examplebot\nDisallow /x\n"
    decision = RobotsTxt.parse(body).decide("/x/y", user_agent=BOT)
    assert (decision.allowed, decision.line, decision.rule) == (False, 2, "Disallow: /x")
    assert not allowed("User-agent examplebot\nDisallow\t/x\n", "/x")


def test_missing_colon_with_more_words_is_not_a_rule() -> None:
    """Leniency beyond RFC 9309, and its limit: "Disallow /x /y" (three words) is ignored.

    User-agent: * / Disallow /x /y -> /x and /x /y allowed.
    """
    body = "User-agent: *\nDisallow /x /y\n"
    assert allowed(body, "/x")
    assert allowed(body, "/x%20/y")


@pytest.mark.parametrize(
    "line_value",
    ["examplebot/2.1", "ExampleBot/1.0 (+https://example.com/bot)", "examplebot*", "examplebot;"],
)
def test_user_agent_value_is_cut_to_its_product_token(line_value: str) -> None:
    """Leniency beyond RFC 9309: a User-agent value counts up to its first non-[A-Za-z_-].

    Google: "googlebot/1.2 and googlebot* are equivalent to googlebot".
    User-agent: examplebot/2.1 / Disallow: /x -> /x disallowed for ExampleBot.
    """
    assert not allowed(f"User-agent: {line_value}\nDisallow: /x\n", "/x")


def test_user_agent_token_cut_never_widens_to_other_bots() -> None:
    """Leniency beyond RFC 9309, and its limit: the cut keeps the whole leading name.

    User-agent: examplebot-news/1.0 -> a group for examplebot-news, not examplebot.
    """
    body = "User-agent: examplebot-news/1.0\nDisallow: /x\n"
    assert allowed(body, "/x")
    assert not allowed(body, "/x", "examplebot-news")


def test_star_followed_by_words_is_still_the_global_group() -> None:
    """Leniency beyond RFC 9309: "User-agent: * everyone else" is the * group.

    User-agent: * everyone else / Disallow: /x -> /x disallowed for ExampleBot.
    """
    assert not allowed("User-agent: * everyone else\nDisallow: /x\n", "/x")


def test_dollar_before_the_end_is_an_ordinary_character() -> None:
    """Leniency beyond RFC 9309: only a final $ anchors; elsewhere it is a literal $.

    Disallow: /a$b -> /a$b and /a$bc disallowed, /a and /ab allowed.
    """
    body = "User-agent: *\nDisallow: /a$b\n"
    assert not allowed(body, "/a$b")
    assert not allowed(body, "/a$bc")
    assert allowed(body, "/a")
    assert allowed(body, "/ab")


@pytest.mark.parametrize(
    ("pattern", "url"),
    [
        ("/sitecore modules/", "/sitecore%20modules/x"),
        ("/b/*?*|", "/b/x?y%7C"),
        ('/a"b', "/a%22b"),
        ("/a%20b", "/a b"),
        ("/*intagid[]=", "/deals?intagid%5B%5D=1"),
    ],
)
def test_characters_not_allowed_raw_in_urls_match_their_escapes(pattern: str, url: str) -> None:
    """Leniency beyond RFC 9309: a rule written with a raw space (or " < > \\ ^ ` { | } [ ]),
    which RFC 3986 does not allow raw in a path or query, matches the URL's
    percent-encoded form, as in Google's reference.

    Real files say "Disallow: /sitecore modules/" or "Disallow: /*intagid[]="; the
    URLs a crawler requests (Scrapy: w3lib's safe_url_string) are
    /sitecore%20modules/x and /deals?intagid%5B%5D=1 -> disallowed.
    """
    assert not allowed(f"User-agent: *\nDisallow: {pattern}\n", url)


def test_long_line_keeps_its_first_16663_bytes() -> None:
    """Leniency beyond RFC 9309: of a very long line Google keeps the first 16,663 bytes.

    "Disallow: /" + 20,000 x "a" is read as "Disallow: /" + 16,652 x "a": a URL
    with 16,652 a's then "b" is disallowed, one with 16,651 a's then "b" is not.
    """
    body = "User-agent: *\nDisallow: /" + "a" * 20_000 + "X\n"
    kept = GOOGLE_MAX_LINE - len("Disallow: /")
    assert not allowed(body, "/" + "a" * kept + "b")
    assert allowed(body, "/" + "a" * (kept - 1) + "b")


def test_long_line_limit_counts_bytes_not_characters() -> None:
    """Leniency beyond RFC 9309: the 16,663-byte cut counts UTF-8 bytes, as Google's does.

    "Disallow: /" + 9,000 x "é" (2 bytes each) keeps 8,326 "é": a URL with
    8,326 "é" then "x" is disallowed.
    """
    body = "User-agent: *\nDisallow: /" + "é" * 9_000 + "\n"
    kept = (GOOGLE_MAX_LINE - len("Disallow: /")) // 2
    assert not allowed(body, "/" + "é" * kept + "x")
    assert allowed(body, "/" + "é" * (kept - 1) + "x")


def test_lines_after_an_absurdly_long_line_still_work() -> None:
    """Leniency beyond RFC 9309: an absurdly long line spoils only itself.

    A 1 MB comment line in the middle -> the user-agent line and rule after it
    apply (max_size raised so the limit of §2.5 does not hide them).
    """
    body = "User-agent: otherbot\n#" + "x" * 1_000_000 + "\nUser-agent: examplebot\nDisallow: /x\n"
    robots = RobotsTxt.parse(body, max_size=2_000_000)
    decision = robots.decide("/x", user_agent=BOT)
    assert (decision.allowed, decision.line) == (False, 4)


def test_invalid_utf8_spoils_only_what_it_touches() -> None:
    """Leniency beyond RFC 9309 (the file MUST be UTF-8): invalid octets affect only their line.

    A user-agent line of junk octets and a rule with a Latin-1 "é" -> the group
    after still applies, /private is disallowed, and the Latin-1 rule compares
    as its octet %E9 (RFC 9309 §2.2.2: non-ASCII octets are percent-encoded).
    """
    body = (
        b"User-agent: \xff\xfe\xfd\nDisallow: /a\n\n"
        b"User-agent: examplebot\nDisallow: /caf\xe9\nDisallow: /private\n"
    )
    robots = RobotsTxt.parse(body)
    assert not robots.allowed("/private", user_agent=BOT)
    assert robots.allowed("/a", user_agent=BOT)
    assert not robots.allowed("/caf%E9", user_agent=BOT)
    assert robots.allowed("/caf%C3%A9", user_agent=BOT)
    assert robots.allowed("/cafe", user_agent=BOT)
    assert robots.decide("/private", user_agent=BOT).line == 6


def test_nul_bytes_do_not_stop_parsing() -> None:
    """Leniency beyond RFC 9309: a binary file (NUL bytes) parses; its text lines still count.

    NULs and control bytes, then User-agent: * / Disallow: /x -> /x disallowed.
    """
    body = b"\x00\x01\x02\xff\x00\nUser-agent: *\nDisallow: /x\n\x00\x00"
    assert not allowed(body, "/x")
    assert allowed(body, "/y")


def test_delay_lines_longer_than_googles_line_limit_are_cut_like_any_line() -> None:
    """Leniency beyond RFC 9309: a line is read up to Google's 16,663 bytes, delay
    lines too; a number cut there is read as cut, never an error.

    Crawl-delay: 0. then 20,000 zeros and 5 -> cut before the 5: 0 s, the line's text
    16,663 characters; Request-rate: 20,000 nines/1 -> cut before "/1": no rate.
    """
    body = (
        f"User-agent: examplebot\nCrawl-delay: 0.{'0' * 20_000}5\nRequest-rate: {'9' * 20_000}/1\n"
    )
    robots = RobotsTxt.parse(body)
    delays = robots.delays(user_agent=BOT)
    assert robots.crawl_delay(user_agent=BOT) == 0.0
    assert delays.crawl_delay is not None
    assert delays.crawl_delay.line == 2
    assert len(delays.crawl_delay.text) == GOOGLE_MAX_LINE
    assert robots.request_rate(user_agent=BOT) is None
