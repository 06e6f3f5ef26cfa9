"""Properties of the parser over generated input (hypothesis).

parse() never raises; allowed()/decide() answer for any URL text and agent;
answers do not depend on the line-end style, a BOM, bytes vs str, or how a URL
is spelt; longest match agrees with a brute-force reference; path and pattern
normalisation is idempotent.
"""

from __future__ import annotations

import os
import re
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from scrapy_rep import Decision, RobotsTxt
from scrapy_rep.robotstxt._url import normalize_path, normalize_pattern, path_of, url_path

# no Scrapy code runs: neither the reactor nor Scrapy's version changes anything
pytestmark = [pytest.mark.reactor_free, pytest.mark.scrapy_free]

BOT = "examplebot"
# REP_HYPOTHESIS_EXAMPLES=5000 for a deeper run than the everyday one.
EXAMPLES = int(os.environ.get("REP_HYPOTHESIS_EXAMPLES", "150"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

any_text = st.text(st.characters(exclude_categories=()), max_size=200)  # surrogates too
token_text = st.text(string.ascii_letters + "_-", min_size=1, max_size=12)

KEYS = [
    "User-agent", "user-agent", "USER-AGENT", "useragent", "user agent",
    "Allow", "allow", "Disallow", "disallow", "DISALLOW", "disalow", "dissallow",
    "Sitemap", "site-map", "Crawl-delay", "Request-rate", "Host", "Clean-param", "Noindex",
    "", "#", "<html>",
]  # fmt: skip
VALUES = [
    "*", "examplebot", "ExampleBot/1.0", "otherbot", "* everyone", "",
    "/", "/a", "/a/", "/a*", "/a$", "/*.php$", "/a$b", "$", "*", "/*", "/%61", "/%2A", "/%24",
    "/ツ", "/%E3%83%84", "/robots.txt", "/index.html", "/a?b=c", "5", "0.5", "nan", "1/5",
    "10/1m", "https://example.com/s.xml", "/s.xml", "//[bad/s.xml", "http://[::1/s.xml",
    "9" * 4301 + "/1", "1/5\u017f", "0" * 5000 + "1", "/" + "%2F" * 6000,
]  # fmt: skip
ROBOTS_URLS = [None, "https://example.com/robots.txt", "http://[::1", "//[x", "", "robots.txt"]
BOMS = [b"", b"\xef\xbb\xbf", b"\xef"]  # none, whole, partial
# Line text without line ends (those are chosen separately).
line_safe_text = st.text(
    st.characters(exclude_categories=(), exclude_characters="\r\n"), max_size=20
)


def robots_line(value_text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(
        lambda key, sep, value, comment: f"{key}{sep}{value}{comment}",
        st.sampled_from(KEYS),
        st.sampled_from([":", ": ", " : ", "\t:\t", " ", ""]),
        st.one_of(st.sampled_from(VALUES), value_text),
        st.sampled_from(["", " # comment", "#", "  "]),
    )


robots_lines = st.lists(robots_line(line_safe_text), max_size=25)
# The same without lone surrogates: text that has one UTF-8 encoding.
utf8_robots_lines = st.lists(
    robots_line(st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=20)),
    max_size=25,
)
newline = st.sampled_from(["\n", "\r\n", "\r"])

url_text = st.one_of(
    any_text,
    st.builds(
        lambda prefix, path: prefix + path,
        st.sampled_from(["", "https://example.com", "http://u:p@example.com:8080", "//h", "h"]),
        st.text(st.sampled_from("/ab.?=&#%*$~ツé09AF-_"), max_size=30),
    ),
)
agent_text = st.one_of(any_text, token_text, st.sampled_from(["ExampleBot", "*", "", "OtherBot"]))

# A small alphabet on which the brute-force reference below is exact.
pattern_text = st.builds(
    lambda start, body, anchor: start + body + anchor,
    st.sampled_from(["/", "*", "/a", ""]),
    st.text(st.sampled_from("/ab*?=."), max_size=8),
    st.sampled_from(["", "$"]),
)
# Path-absolute: "/" not followed by "/" (RFC 3986: "//" would start an authority).
path_text = st.one_of(
    st.just("/"),
    st.builds(
        lambda first, body: "/" + first + body,
        st.sampled_from(["a", "b", "?", "."]),
        st.text(st.sampled_from("/ab?=."), max_size=12),
    ),
)


def split_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text)


def check_decision(robots: RobotsTxt, body_text: str | None, url: str, agent: str) -> Decision:
    """decide() and allowed() agree, and the decision is well formed."""
    decision = robots.decide(url, user_agent=agent)
    assert isinstance(decision, Decision)
    assert decision.allowed is robots.allowed(url, user_agent=agent)
    assert isinstance(decision.agents, tuple)
    assert all(isinstance(agent, str) for agent in decision.agents)
    assert (decision.line is None) == (decision.rule is None)
    if decision.rule is None:
        assert decision.allowed
        return decision
    key, _, value = decision.rule.partition(": ")
    assert key == ("Allow" if decision.allowed else "Disallow")
    assert value
    assert isinstance(decision.line, int)
    assert decision.line >= 1
    if body_text is not None:
        lines = split_lines(body_text.removeprefix("\ufeff"))
        assert decision.line <= len(lines)
        assert value in lines[decision.line - 1], (decision, lines[decision.line - 1])
    return decision


# -- parse() never raises --------------------------------------------------------


@SETTINGS
@given(st.binary(max_size=2000), st.integers(min_value=0, max_value=3000))
def test_parse_never_raises_on_arbitrary_bytes(body: bytes, max_size: int) -> None:
    """Any bytes parse, at any size limit, and can then be asked about a URL."""
    robots = RobotsTxt.parse(body, max_size=max_size)
    assert isinstance(robots.allowed("/", user_agent=BOT), bool)
    assert isinstance(robots.sitemaps, tuple)


@SETTINGS
@given(any_text, st.one_of(st.none(), any_text))
def test_parse_never_raises_on_arbitrary_text(body: str, url: str | None) -> None:
    """Any str parses (lone surrogates included), with any url for relative sitemaps."""
    robots = RobotsTxt.parse(body, url=url)
    assert isinstance(robots.allowed("/", user_agent=BOT), bool)
    assert all(isinstance(sitemap, str) for sitemap in robots.sitemaps)


@SETTINGS
@given(
    robots_lines,
    newline,
    st.sampled_from(BOMS),
    st.binary(max_size=8),
    st.sampled_from(ROBOTS_URLS),
)
def test_parse_never_raises_on_robots_like_bytes(
    lines: list[str], end: str, bom: bytes, junk: bytes, url: str | None
) -> None:
    """robots.txt-shaped bodies with a BOM (whole or partial) and junk octets parse,
    whatever url they came from (relative sitemaps are resolved against it)."""
    body = bom + end.join(lines).encode("utf-8", "surrogatepass") + junk
    robots = RobotsTxt.parse(body, url=url)
    for agent in ("ExampleBot", "OtherBot"):
        assert isinstance(robots.crawl_delay(user_agent=agent), (float, type(None)))
        rate = robots.request_rate(user_agent=agent)
        assert rate is None or (isinstance(rate[0], int) and isinstance(rate[1], float))
        seconds = robots.delays(user_agent=agent).seconds
        assert seconds is None or 0 <= seconds < float("inf")
        robots.decide("/a", user_agent=agent)


# Numbers as hostile servers write them: runs of digits (of any script) far
# longer than int() converts, zeros, signs, dots, units and exponents.
number_text = st.builds(
    lambda parts: "".join(parts),
    st.lists(
        st.one_of(
            st.sampled_from(["/", ".", " ", "-", "+", "e", "s", "m", "h", "d", "\u017f", "inf"]),
            st.builds(
                lambda digit, count: digit * count,
                st.sampled_from(["0", "1", "9", "\u0660", "\u0669"]),
                st.integers(min_value=1, max_value=6000),
            ),
        ),
        max_size=6,
    ),
)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["Crawl-delay", "Request-rate"]), number_text)))
@example([("Request-rate", "9" * 4301 + "/1")])
@example([("Request-rate", "1/5\u017f")])
def test_delay_lines_never_raise_whatever_their_numbers(lines: list[tuple[str, str]]) -> None:
    """Crawl-delay and Request-rate values of any size and shape: every query
    answers, delays are finite and positive or None."""
    body = "User-agent: *\nDisallow: /x\n" + "".join(f"{k}: {v}\n" for k, v in lines)
    robots = RobotsTxt.parse(body)
    delay = robots.crawl_delay(user_agent=BOT)
    assert delay is None or (isinstance(delay, float) and 0 <= delay < float("inf"))
    rate = robots.request_rate(user_agent=BOT)
    assert rate is None or (rate[0] > 0 and 0 < rate[1] < float("inf"))
    assert not robots.allowed("/x", user_agent=BOT)
    assert not robots.decide("/x", user_agent=BOT).allowed


@pytest.mark.parametrize(
    ("sitemap", "url"),
    [
        ("//[bad/sitemap.xml", "https://example.com/robots.txt"),
        ("/sitemap.xml", "http://[::1/robots.txt"),
        ("sitemap.xml", "http://[/robots.txt"),
    ],
)
def test_parse_never_raises_on_malformed_sitemap_urls(sitemap: str, url: str) -> None:
    """A relative Sitemap line that cannot be resolved (bad IPv6 brackets, in the
    line or in url=) does not make parse() raise; the rules still apply."""
    robots = RobotsTxt.parse(f"Sitemap: {sitemap}\nUser-agent: *\nDisallow: /x\n", url=url)
    assert not robots.allowed("/x", user_agent=BOT)
    assert all(isinstance(found, str) for found in robots.sitemaps)


# -- allowed() and decide() are total -----------------------------------------------


@SETTINGS
@given(robots_lines, newline, url_text, agent_text)
def test_decide_is_total_and_names_a_real_line(
    lines: list[str], end: str, url: str, agent: str
) -> None:
    """For any URL text and agent: a bool, decide() agrees with allowed(), and the
    deciding line (if any) is the line that holds the rule's value."""
    body = end.join(lines)
    check_decision(RobotsTxt.parse(body), body, url, agent)


@SETTINGS
@given(url_text, agent_text)
def test_allow_all_and_disallow_all_are_total(url: str, agent: str) -> None:
    """allow_all() allows every URL; disallow_all() allows only /robots.txt."""
    assert RobotsTxt.allow_all().allowed(url, user_agent=agent) is True
    assert RobotsTxt.allow_all().decide(url, user_agent=agent).allowed is True
    verdict = RobotsTxt.disallow_all().allowed(url, user_agent=agent)
    assert verdict is RobotsTxt.disallow_all().decide(url, user_agent=agent).allowed


@SETTINGS
@given(path_text, agent_text)
def test_disallow_all_denies_every_path_but_robots_txt(path: str, agent: str) -> None:
    """disallow_all() denies every path (and its absolute URL) except /robots.txt."""
    robots = RobotsTxt.disallow_all()
    assert robots.allowed(path, user_agent=agent) is False
    assert robots.allowed("https://example.com" + path, user_agent=agent) is False
    assert robots.allowed("/robots.txt", user_agent=agent) is True


# -- answers do not depend on the spelling of the input ------------------------------


@SETTINGS
@given(robots_lines, st.lists(url_text, min_size=1, max_size=5))
def test_line_end_style_changes_nothing(lines: list[str], urls: list[str]) -> None:
    """LF, CRLF and CR bodies give the same decisions, line numbers included."""
    parsed = [RobotsTxt.parse(end.join(lines)) for end in ("\n", "\r\n", "\r")]
    for url in urls:
        for agent in ("ExampleBot", "OtherBot"):
            decisions = {robots.decide(url, user_agent=agent) for robots in parsed}
            assert len(decisions) == 1, decisions


@SETTINGS
@given(utf8_robots_lines, st.lists(url_text, min_size=1, max_size=5))
def test_bom_and_bytes_or_str_change_nothing(lines: list[str], urls: list[str]) -> None:
    """A UTF-8 BOM, or giving the body as str instead of UTF-8 bytes, changes no decision."""
    text = "\n".join(lines)
    assume(not text.startswith("\ufeff"))
    data = text.encode("utf-8")
    variants: list[bytes | str] = [text, data, b"\xef\xbb\xbf" + data, "\ufeff" + text]
    parsed = [RobotsTxt.parse(body) for body in variants]
    for url in urls:
        decisions = {robots.decide(url, user_agent=BOT) for robots in parsed}
        assert len(decisions) == 1, decisions
    assert len({robots.sitemaps for robots in parsed}) == 1


@SETTINGS
@given(robots_lines, path_text)
def test_url_spelling_changes_nothing(lines: list[str], path: str) -> None:
    """The same path as path-absolute, absolute, with userinfo/port, or with a fragment."""
    robots = RobotsTxt.parse("\n".join(lines))
    spellings = [
        path,
        "https://example.com" + path,
        "http://user:pw@example.com:8080" + path,
        path + "#fragment?x",
    ]
    assert len({robots.decide(url, user_agent=BOT) for url in spellings}) == 1


@SETTINGS
@given(robots_lines, path_text, st.data())
def test_escaping_unreserved_characters_changes_nothing(
    lines: list[str], path: str, data: st.DataObject
) -> None:
    """%61 and a are one character to the rules (RFC 9309 §2.2.2), in any hex case."""
    robots = RobotsTxt.parse("\n".join(lines))
    escaped = "".join(
        data.draw(st.sampled_from([char, f"%{ord(char):02X}", f"%{ord(char):02x}"]))
        if char in "ab."
        else char
        for char in path
    )
    assert robots.decide(escaped, user_agent=BOT) == robots.decide(path, user_agent=BOT)


@SETTINGS
@given(robots_lines, path_text, token_text)
def test_agent_case_changes_nothing(lines: list[str], path: str, agent: str) -> None:
    """The product token is matched case-insensitively."""
    robots = RobotsTxt.parse("\n".join(lines))
    assert robots.decide(path, user_agent=agent.lower()) == robots.decide(
        path, user_agent=agent.upper()
    )


# -- longest match against a brute-force reference ------------------------------------


def reference_verdict(rules: list[tuple[bool, str]], path: str) -> tuple[bool, set[str]]:
    """RFC 9309 by brute force: the longest matching pattern wins, allow wins ties.

    Returns the verdict and the rule texts that could have decided it.
    """
    best: tuple[int, bool] | None = None
    winners: set[str] = set()
    for allow, pattern in rules:
        if not pattern:
            continue  # an empty pattern is ignored
        anchored = pattern.endswith("$")
        body = pattern[:-1] if anchored else pattern
        regex = "".join(".*" if char == "*" else re.escape(char) for char in body)
        if not re.match(regex + (r"\Z" if anchored else ""), path):
            continue
        rank = (len(pattern), allow)  # the alphabet needs no normalisation
        text = f"{'Allow' if allow else 'Disallow'}: {pattern}"
        if best is None or rank > best:
            best, winners = rank, {text}
        elif rank == best:
            winners.add(text)
    return (True if best is None else best[1]), winners


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(st.lists(st.tuples(st.booleans(), pattern_text), max_size=8), path_text)
@example([(False, "/a"), (True, "/a")], "/ab")
@example([(False, "/*b"), (True, "/a")], "/ab")
@example([(False, "/a*b$"), (True, "/a")], "/aab")
@example([(True, "/a$"), (False, "/")], "/a")
def test_longest_match_agrees_with_brute_force(rules: list[tuple[bool, str]], path: str) -> None:
    """allowed()/decide() agree with a brute-force longest-match over */$ patterns."""
    lines = ["User-agent: *"] + [f"{'Allow' if a else 'Disallow'}: {p}" for a, p in rules]
    robots = RobotsTxt.parse("\n".join(lines))
    expected, winners = reference_verdict(rules, path)
    decision = check_decision(robots, "\n".join(lines), path, BOT)
    assert decision.allowed is expected, (rules, path, decision)
    if winners:
        assert decision.rule in winners, (rules, path, decision)


def two_readings_verdict(rules: list[tuple[bool, str]], path: str) -> tuple[bool, set[str]]:
    """RFC 9309 §2.2.2 read both ways, by brute force: longest match with "%3D"
    and "%2F" kept apart from "=" and "/" and a bare '%' from "%25", and with them
    taken as those; the URL is allowed only if both readings allow it. Either way
    a rule's priority is its length as written (the alphabet is in normal form).

    Returns the verdict and the rules that could have decided it: a Disallow of
    either reading, else an Allow of the first, else of the second."""

    def decoded(text: str) -> str:
        text = re.sub("%(?![0-9A-Fa-f]{2})", "%25", text)
        return text.replace("%3D", "=").replace("%2F", "/")

    readings = []  # (best rank, the rules with it) of each reading
    for read in (lambda text: text, decoded):
        best: tuple[int, bool] | None = None
        winners: set[str] = set()
        for allow, pattern in rules:
            anchored = pattern.endswith("$")
            body = read(pattern[:-1] if anchored else pattern)
            regex = "".join(".*" if char == "*" else re.escape(char) for char in body)
            if re.match(regex + (r"\Z" if anchored else ""), read(path)):
                rank = (len(pattern), allow)
                text = f"{'Allow' if allow else 'Disallow'}: {pattern}"
                if best is None or rank > best:
                    best, winners = rank, {text}
                elif rank == best:
                    winners.add(text)
        readings.append((best, winners))
    for best, winners in readings:
        if best is not None and not best[1]:
            return False, winners
    for best, winners in readings:
        if best is not None:
            return True, winners
    return True, set()


escaped_pattern_text = st.builds(
    lambda start, body, anchor: start + "".join(body) + anchor,
    st.sampled_from(["/", "/*", "/a"]),
    st.lists(st.sampled_from(["/", "a", "=", "%3D", "%2F", "%25", "%", "*", "?"]), max_size=5),
    st.sampled_from(["", "$"]),
)
escaped_path_text = st.builds(
    lambda body: "/" + "".join(body),
    st.lists(st.sampled_from(["a", "/", "=", "%3D", "%2F", "%25", "%24", "%", "?"]), max_size=7),
)


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(st.lists(st.tuples(st.booleans(), escaped_pattern_text), max_size=6), escaped_path_text)
@example([(False, "/a%2F"), (True, "/a/")], "/a/")
@example([(True, "/a%2F"), (False, "/a/")], "/a%2F")
@example([(False, "/*="), (True, "/a%3D")], "/a%3D")
@example([(False, "/a%2F"), (True, "/a/a")], "/a/a=")  # the shorter prefix ranks higher
@example([(True, "/a%"), (False, "/a")], "/a%24")  # bare '%': "/a%25" in the second reading
@example([(False, "/a=*"), (False, "/a=%")], "/a%3D%24")  # "/a=%" is "/a=%25": not it
def test_fetched_only_when_both_readings_of_escapes_allow(
    rules: list[tuple[bool, str]], path: str
) -> None:
    """allowed()/decide() agree with a brute force of both readings of escaped
    reserved characters, and never fetch what either would not."""
    assume(not path.startswith("//"))  # that would start an authority (RFC 3986)
    lines = ["User-agent: *"] + [f"{'Allow' if a else 'Disallow'}: {p}" for a, p in rules]
    robots = RobotsTxt.parse("\n".join(lines))
    decision = check_decision(robots, "\n".join(lines), path, BOT)
    expected, winners = two_readings_verdict(rules, path)
    assert decision.allowed is expected, (rules, path, decision)
    assert (decision.rule in winners) if winners else decision.rule is None, (rules, path, decision)


# -- delays belong to the user-agent lines above them -----------------------------------

delay_file_line = st.one_of(
    st.builds(lambda token: ("agent", token), st.sampled_from(["examplebot", "otherbot", "*"])),
    st.builds(lambda seconds: ("delay", seconds), st.integers(min_value=0, max_value=9)),
    st.builds(lambda seconds: ("rate", seconds), st.integers(min_value=1, max_value=9)),
    st.sampled_from([("rule", "Disallow: /x"), ("other", ""), ("other", "Sitemap: /s.xml")]),
)
DELAY_LINE_TEXT = {
    "agent": "User-agent: {}",
    "delay": "Crawl-delay: {}",
    "rate": "Request-rate: 1/{}",
    "rule": "{}",
    "other": "{}",
}


def delays_by_runs(
    lines: list[tuple[str, Any]], agent: str
) -> tuple[float | None, tuple[int, float] | None]:
    """The delay rule by brute force, with no groups at all: runs of user-agent
    lines, each delay line to the run above it, the agent's runs (else "*"'s),
    the largest value of each kind (1/n rates: the largest n)."""
    runs: list[tuple[set[str], list[tuple[str, int]]]] = []
    after_run = True  # a rule or delay line since the last user-agent line
    for kind, value in lines:
        if kind == "agent":
            if after_run:
                runs.append((set(), []))
            runs[-1][0].add(value)
            after_run = False
        elif kind in ("delay", "rate", "rule"):
            after_run = True
            if kind != "rule" and runs:
                runs[-1][1].append((kind, value))
    mine = [run for run in runs if agent in run[0]] or [run for run in runs if "*" in run[0]]
    found = [line for _, delay_lines in mine for line in delay_lines]
    delays = [value for kind, value in found if kind == "delay"]
    rates = [value for kind, value in found if kind == "rate"]
    return (
        float(max(delays)) if delays else None,
        (1, float(max(rates))) if rates else None,
    )


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(
    st.lists(delay_file_line, max_size=14), st.sampled_from(["examplebot", "otherbot", "thirdbot"])
)
@example([("agent", "otherbot"), ("delay", 6), ("agent", "*"), ("delay", 1)], "examplebot")
def test_delays_follow_the_runs_of_user_agent_lines(
    lines: list[tuple[str, Any]], agent: str
) -> None:
    """crawl_delay()/request_rate() agree with the run rule computed line by line,
    and delays() names lines that hold those values."""
    body = "\n".join(DELAY_LINE_TEXT[kind].format(value) for kind, value in lines)
    robots = RobotsTxt.parse(body)
    expected = delays_by_runs(lines, agent)
    assert (robots.crawl_delay(user_agent=agent), robots.request_rate(user_agent=agent)) == expected
    written = body.split("\n")
    for found in (
        robots.delays(user_agent=agent).crawl_delay,
        robots.delays(user_agent=agent).request_rate,
    ):
        if found is not None:
            assert written[found.line - 1] == found.text


# -- normalisation -----------------------------------------------------------------

escape_heavy_text = st.text(
    st.sampled_from("%0123456789abcdefABCDEF/~.-_*$?#ツé\udcff"), max_size=40
)


@SETTINGS
@given(st.one_of(any_text, escape_heavy_text))
def test_normalize_path_is_idempotent_and_ascii(path: str) -> None:
    """normalize_path(normalize_path(p)) == normalize_path(p), and the result is ASCII."""
    once = normalize_path(path)
    assert normalize_path(once) == once
    assert once.isascii()


@SETTINGS
@given(st.one_of(any_text, escape_heavy_text))
@example("%%30a")
def test_normalize_pattern_is_idempotent_and_ascii(pattern: str) -> None:
    """normalize_pattern(normalize_pattern(p)) == normalize_pattern(p), and the result is ASCII."""
    once = normalize_pattern(pattern)
    assert normalize_pattern(once) == once
    assert once.isascii()


def test_normalize_path_examples() -> None:
    """RFC 9309 §2.2.2: raw ツ is %E3%83%84, unreserved escapes decode, hex is upper-case,
    reserved escapes stay escaped."""
    assert normalize_path("ツ") == "%E3%83%84"
    assert normalize_path("/foo/bar/ツ") == "/foo/bar/%E3%83%84"
    assert normalize_path("/foo/bar/%e3%83%84") == "/foo/bar/%E3%83%84"
    assert normalize_path("/foo/bar/%62%61%7A") == "/foo/bar/baz"
    assert normalize_path("/%7e%2D%2e%5F") == "/~-._"
    assert normalize_path("/a%2fb%3f") == "/a%2Fb%3F"
    assert normalize_path("/plain/path?q=1") == "/plain/path?q=1"
    # A decoded escape that completes a bare '%' before it: one normal form.
    assert normalize_path("/%%30a") == "/%0A"
    assert normalize_path("/%%34%31") == "/A"
    # ... however deeply nested: one pass (each level was one more pass over it all)
    assert normalize_path("/" + "%3" * 20_000 + "%35") == "/5"


def test_normalize_pattern_examples() -> None:
    """Patterns normalise like paths, but * stays a wildcard and a final $ an anchor."""
    assert normalize_pattern("/foo/bar/ツ$") == "/foo/bar/%E3%83%84$"
    assert normalize_pattern("/*%7e/%62") == "/*~/b"
    assert normalize_pattern("/%e3%83%84*") == "/%E3%83%84*"
    assert normalize_pattern("/a%2a") == "/a%2A"
    assert normalize_pattern("/fish*.php$") == "/fish*.php$"


@SETTINGS
@given(
    st.text(
        st.sampled_from("%0123456789abcdefABCDEF/~.-_*$? \tツé\udcff"), min_size=1, max_size=30
    ),
    st.sampled_from(["", " ", "\t", " # note"]),
    st.one_of(path_text, escape_heavy_text),
)
@example("/%61", "", "/a")
@example("/%7e", " # note", "/~x")
@example("/a b", "\t", "/a%20b")
@example("/a$b", "", "/a$b")
@example("/ツ*", "", "/%E3%83%84")
def test_a_rule_reads_as_its_normalised_pattern(value: str, tail: str, path: str) -> None:
    """However its value is spelt, a rule decides like the rule written in normal form
    (the parser reads most values without normalising them: this checks which)."""
    written = value.strip(" \t")
    pattern = normalize_pattern(written)
    assume(pattern)
    url = path if path.startswith("/") else "/" + path
    spelt = RobotsTxt.parse(f"User-agent: *\nDisallow: {value}{tail}\n")
    normal = RobotsTxt.parse(f"User-agent: *\nDisallow: {pattern}\n")
    decision = spelt.decide(url, user_agent=BOT)
    assert decision.allowed == normal.allowed(url, user_agent=BOT), (value, url)
    if not decision.allowed:
        assert decision.rule == f"Disallow: {written}"


@SETTINGS
@given(url_text, st.integers(min_value=0, max_value=400), st.sampled_from(["a", "/", "%41", "é"]))
@example("https://example.com/a", 300, "a")
@example("/a", 300, "%41")
def test_url_path_is_the_normalised_path_for_short_and_long_urls(
    url: str, padding: int, pad: str
) -> None:
    """url_path() (quick routes for plain short and long URLs) equals normalising the
    path of the URL the slow, general way."""
    url = url + pad * padding
    assert url_path(url) == normalize_path(path_of(url))
