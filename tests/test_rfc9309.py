"""RFC 9309 (Robots Exclusion Protocol), one test per rule, named by section.

Where the RFC is silent the tests follow Google's documented interpretation
("How Google interprets the robots.txt specification"); those are said so in
the docstring. Readings that go beyond the RFC live in test_google_leniencies.py.
"""

from __future__ import annotations

import tracemalloc

import pytest

from scrapy_rep import Decision, RobotsTxt
from scrapy_rep.robotstxt import DEFAULT_MAX_SIZE, DelayLine, Delays

# no Scrapy code runs: neither the reactor nor Scrapy's version changes anything
pytestmark = [pytest.mark.reactor_free, pytest.mark.scrapy_free]

BOT = "ExampleBot"


def allowed(body: str | bytes, url: str, agent: str = BOT) -> bool:
    return RobotsTxt.parse(body).allowed(url, user_agent=agent)


def disallowed_urls(body: str | bytes, urls: list[str], agent: str = BOT) -> list[str]:
    robots = RobotsTxt.parse(body)
    return [url for url in urls if not robots.allowed(url, user_agent=agent)]


# -- 2.1 Protocol definition: groups and rules ---------------------------------


def test_2_1_group_applies_its_rules_to_its_agent() -> None:
    """A group is a user-agent line followed by rules.

    User-agent: examplebot / Disallow: /private -> /private/x is disallowed for
    ExampleBot, /public is allowed.
    """
    body = "User-agent: examplebot\nDisallow: /private\n"
    assert not allowed(body, "/private/x")
    assert allowed(body, "/public")


def test_2_1_consecutive_user_agent_lines_share_one_group() -> None:
    """Several user-agent lines in a row open one group for all of them.

    User-agent: otherbot / User-agent: examplebot / Disallow: /x -> both bots
    are disallowed /x.
    """
    body = "User-agent: otherbot\nUser-agent: examplebot\nDisallow: /x\n"
    assert not allowed(body, "/x", "ExampleBot")
    assert not allowed(body, "/x", "OtherBot")
    assert allowed(body, "/x", "ThirdBot")


def test_2_1_empty_line_between_user_agent_lines_keeps_one_group() -> None:
    """Empty lines may sit between the user-agent lines of one group (ABNF).

    User-agent: examplebot / (empty) / User-agent: * / Disallow: / -> ExampleBot
    shares the group, so / is disallowed for it.
    """
    body = "User-agent: examplebot\n\nUser-agent: *\nDisallow: /\n"
    assert not allowed(body, "/page")


def test_2_1_user_agent_line_after_rules_starts_a_new_group() -> None:
    """A user-agent line after rules ends the group before it.

    User-agent: otherbot / Disallow: /a / User-agent: examplebot / Disallow: /b
    -> ExampleBot: /a allowed, /b disallowed.
    """
    body = "User-agent: otherbot\nDisallow: /a\nUser-agent: examplebot\nDisallow: /b\n"
    assert allowed(body, "/a")
    assert not allowed(body, "/b")
    assert not allowed(body, "/a", "OtherBot")
    assert allowed(body, "/b", "OtherBot")


def test_2_1_last_group_without_rules_allows_everything() -> None:
    """The last group may have no rules; it implicitly allows everything (§5.1 quxbot).

    User-agent: * / Disallow: / / (empty) / User-agent: examplebot (end of file)
    -> ExampleBot may fetch anything; it does not fall back to the * group.
    """
    body = "User-agent: *\nDisallow: /\n\nUser-agent: examplebot\n"
    assert allowed(body, "/anything")
    assert not allowed(body, "/anything", "OtherBot")


# -- 2.2 Formal syntax ----------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "USER-AGENT: examplebot\nDISALLOW: /x\n",
        "user-agent: examplebot\ndisallow: /x\n",
        "User-Agent: examplebot\nDisAllow: /x\n",
    ],
)
def test_2_2_keys_are_case_insensitive(body: str) -> None:
    """ABNF string literals are case-insensitive (RFC 5234), so are the keys.

    USER-AGENT: examplebot / DISALLOW: /x -> /x disallowed.
    """
    assert not allowed(body, "/x")
    assert allowed(body, "/y")


def test_2_2_whitespace_around_key_colon_and_value() -> None:
    """*WS is allowed before the key, around the colon and around the value.

    "  User-agent \t:  examplebot  " / "\tDisallow  :\t/x  " -> /x disallowed,
    and the trailing spaces are not part of the pattern (/x/y disallowed too).
    """
    body = "  User-agent \t:  examplebot  \n\tDisallow  :\t/x  \n"
    assert not allowed(body, "/x")
    assert not allowed(body, "/x/y")
    assert allowed(body, "/y")


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_2_2_line_ends_cr_lf_and_crlf(newline: str) -> None:
    """NL = CR / LF / CRLF: each ends a line.

    User-agent: examplebot<NL>Disallow: /a<NL>Allow: /a/b<NL> -> /a disallowed,
    /a/b allowed, whatever the line end.
    """
    body = newline.join(["User-agent: examplebot", "Disallow: /a", "Allow: /a/b", ""])
    assert not allowed(body, "/a")
    assert allowed(body, "/a/b")
    assert allowed(body, "/c")


def test_2_2_comments_at_end_of_line_and_on_their_own_line() -> None:
    """A # starts a comment, on its own line or after a value.

    "# Disallow: /" is a comment; "Disallow: /x # not /y" disallows /x only.
    """
    body = "# Disallow: /\nUser-agent: examplebot # me\n# Disallow: /\nDisallow: /x # not /y\n"
    assert not allowed(body, "/x")
    assert allowed(body, "/y")
    assert allowed(body, "/")


def test_2_2_empty_lines_between_rules_do_not_end_the_group() -> None:
    """Empty lines and comment lines may sit among a group's rules.

    User-agent: examplebot / (empty) / Disallow: /a / (empty) / # note / Disallow: /b
    -> /a and /b both disallowed for ExampleBot.
    """
    body = "User-agent: examplebot\n\nDisallow: /a\n\n# note\n\nDisallow: /b\n"
    assert disallowed_urls(body, ["/a", "/b", "/c"]) == ["/a", "/b"]


# -- 2.2.1 The user-agent line --------------------------------------------------


@pytest.mark.parametrize("token", ["ExampleBot", "examplebot", "EXAMPLEBOT", "eXaMpLeBoT"])
def test_2_2_1_agent_matched_case_insensitively(token: str) -> None:
    """Crawlers MUST match the product token case-insensitively.

    User-agent: ExampleBot / Disallow: /x -> disallowed for any casing of the token.
    """
    body = "User-agent: ExampleBot\nDisallow: /x\n"
    assert not allowed(body, "/x", token)


@pytest.mark.parametrize("line_value", ["examplebot-news", "example", "bot", "xexamplebot"])
def test_2_2_1_agent_is_not_matched_as_a_substring_or_prefix(line_value: str) -> None:
    """The whole token must match: no substring or prefix matching.

    User-agent: examplebot-news / Disallow: / -> ExampleBot is not in that group
    (and neither for "example", "bot", "xexamplebot").
    """
    body = f"User-agent: {line_value}\nDisallow: /\n"
    assert allowed(body, "/page")


def test_2_2_1_groups_of_the_same_agent_are_combined() -> None:
    """Several groups for one agent MUST be combined into one (Google's example).

    googlebot-news: /fish; *: /carrots; googlebot-news: /shrimp -> googlebot-news
    is disallowed /fish and /shrimp, not /carrots.
    """
    body = (
        "user-agent: googlebot-news\ndisallow: /fish\n\n"
        "user-agent: *\ndisallow: /carrots\n\n"
        "user-agent: googlebot-news\ndisallow: /shrimp\n"
    )
    urls = ["/fish", "/shrimp", "/carrots"]
    assert disallowed_urls(body, urls, "googlebot-news") == ["/fish", "/shrimp"]
    assert disallowed_urls(body, urls, "otherbot") == ["/carrots"]


def test_2_2_1_star_groups_are_combined_too() -> None:
    """The * groups are combined like any other agent's.

    User-agent: * / Disallow: /a / (empty) / User-agent: * / Disallow: /b
    -> /a and /b disallowed.
    """
    body = "User-agent: *\nDisallow: /a\n\nUser-agent: *\nDisallow: /b\n"
    assert disallowed_urls(body, ["/a", "/b", "/c"]) == ["/a", "/b"]


def test_2_2_1_star_group_applies_when_no_group_matches() -> None:
    """Without a matching group, crawlers MUST obey the * group.

    User-agent: otherbot / Disallow: /a / User-agent: * / Disallow: /b
    -> ExampleBot: /b disallowed, /a allowed.
    """
    body = "User-agent: otherbot\nDisallow: /a\n\nUser-agent: *\nDisallow: /b\n"
    assert disallowed_urls(body, ["/a", "/b"]) == ["/b"]


def test_2_2_1_own_group_replaces_the_star_group() -> None:
    """The crawler's own group is used instead of *, never together with it.

    User-agent: * / Disallow: /a / User-agent: examplebot / Disallow: /b
    -> ExampleBot: /a allowed, /b disallowed.
    """
    body = "User-agent: *\nDisallow: /a\n\nUser-agent: examplebot\nDisallow: /b\n"
    assert disallowed_urls(body, ["/a", "/b"]) == ["/b"]


def test_2_2_1_no_matching_group_and_no_star_group_means_no_rules() -> None:
    """No matching group and no * group: there are no rules, all is allowed.

    User-agent: otherbot / Disallow: / -> ExampleBot may fetch /.
    """
    assert allowed("User-agent: otherbot\nDisallow: /\n", "/")


@pytest.mark.parametrize(
    ("token", "group"),
    [
        ("Googlebot-News", "1"),
        ("Googlebot", "3"),
        ("Storebot-Google", "2"),
        ("Otherbot", "2"),
    ],
)
def test_2_2_1_most_specific_group_google_example(token: str, group: str) -> None:
    """Google's precedence table: each crawler follows exactly one group.

    googlebot-news (group 1), * (group 2), googlebot (group 3): Googlebot-News
    -> 1, Googlebot -> 3, Storebot-Google and Otherbot -> 2.
    """
    body = (
        "user-agent: googlebot-news\ndisallow: /1\n\n"
        "user-agent: *\ndisallow: /2\n\n"
        "user-agent: googlebot\ndisallow: /3\n"
    )
    assert disallowed_urls(body, ["/1", "/2", "/3"], token) == [f"/{group}"]


# -- 2.2.2 The Allow and Disallow lines -----------------------------------------


def test_2_2_2_longest_match() -> None:
    """The most specific (longest) matching rule MUST be used (§5.2 example).

    Allow: /example/page/ + Disallow: /example/page/disallowed.gif
    -> /example/page/disallowed.gif disallowed, /example/page/other allowed.
    """
    body = (
        "User-Agent: examplebot\n"
        "Allow: /example/page/\n"
        "Disallow: /example/page/disallowed.gif\n"
        "Disallow: /example/\n"
    )
    assert not allowed(body, "https://example.com/example/page/disallowed.gif")
    assert allowed(body, "https://example.com/example/page/other.html")
    assert not allowed(body, "https://example.com/example/other.html")


def test_2_2_2_longest_match_does_not_depend_on_rule_order() -> None:
    """The first rule is not the one that wins: length decides.

    Disallow: / then Allow: /p -> /page allowed; Allow: /p then Disallow: /pa -> /page disallowed.
    """
    assert allowed("User-agent: *\nDisallow: /\nAllow: /p\n", "/page")
    assert not allowed("User-agent: *\nAllow: /p\nDisallow: /pa\n", "/page")


def test_2_2_2_allow_wins_a_tie() -> None:
    """Equivalent allow and disallow rules: the allow rule SHOULD be used.

    Disallow: /folder + Allow: /folder -> /folder/page allowed (either order).
    """
    assert allowed("User-agent: *\nDisallow: /folder\nAllow: /folder\n", "/folder/page")
    assert allowed("User-agent: *\nAllow: /folder\nDisallow: /folder\n", "/folder/page")


def test_2_2_2_no_matching_rule_means_allowed() -> None:
    """If no rule matches the URI, it is allowed.

    User-agent: * / Disallow: /private -> /public allowed.
    """
    assert allowed("User-agent: *\nDisallow: /private\n", "/public")


def test_2_2_2_matching_is_case_sensitive() -> None:
    """Paths are matched case-sensitively.

    Disallow: /fish -> /fish.html disallowed, /Fish.asp allowed.
    """
    body = "User-agent: *\nDisallow: /fish\n"
    assert not allowed(body, "/fish.html")
    assert allowed(body, "/Fish.asp")


def test_2_2_2_robots_txt_is_always_allowed() -> None:
    """The /robots.txt URI is implicitly allowed.

    User-agent: * / Disallow: / -> /robots.txt allowed (path or absolute URL),
    /robots.html and /other disallowed.
    """
    body = "User-agent: *\nDisallow: /\nDisallow: /robots.txt\n"
    assert allowed(body, "/robots.txt")
    assert allowed(body, "https://example.com/robots.txt")
    assert not allowed(body, "/robots.html")
    assert not allowed(body, "/other")


@pytest.mark.parametrize("key", ["Disallow", "Allow"])
def test_2_2_2_empty_pattern_is_ignored(key: str) -> None:
    """A rule with an empty path is ignored (Google: "crawlers ignore rules without a path").

    Disallow: (empty) -> everything allowed; Allow: (empty) + Disallow: / -> / disallowed.
    """
    assert allowed(f"User-agent: *\n{key}:\n", "/anything")
    assert allowed(f"User-agent: *\n{key}: \t \n", "/anything")
    assert not allowed(f"User-agent: *\n{key}:\nDisallow: /\n", "/anything")
    assert not allowed(f"User-agent: *\nDisallow: /x\n{key}:\n", "/x")


@pytest.mark.parametrize(
    ("pattern", "url"),
    [
        ("/foo/bar?baz=quz", "/foo/bar?baz=quz"),
        ("/foo/bar/ツ", "/foo/bar/%E3%83%84"),
        ("/foo/bar/ツ", "/foo/bar/ツ"),
        ("/foo/bar/%E3%83%84", "/foo/bar/%E3%83%84"),
        ("/foo/bar/%E3%83%84", "/foo/bar/ツ"),
        ("/foo/bar/%62%61%7A", "/foo/bar/baz"),
        ("/foo/bar/baz", "/foo/bar/%62%61%7A"),
    ],
)
def test_2_2_2_percent_encoding_table(pattern: str, url: str) -> None:
    """RFC 9309 §2.2.2 table: both sides are compared in one percent-encoded form.

    Non-ASCII is UTF-8 percent-encoded, escapes of unreserved characters are
    decoded: Disallow: <pattern>$ disallows exactly <url> (and not <url>x).
    """
    body = f"User-agent: *\nDisallow: {pattern}$\n"
    assert not allowed(body, url)
    assert not allowed(body, f"https://example.com{url}")
    assert allowed(body, url + "x")


def test_2_2_2_allow_with_escaped_unreserved_characters() -> None:
    """The issue's example: Allow: /foo/bar/%62%61%7A matches /foo/bar/baz.

    Disallow: /foo/bar/ + Allow: /foo/bar/%62%61%7A -> /foo/bar/baz allowed,
    /foo/bar/qux disallowed.
    """
    body = "User-agent: *\nDisallow: /foo/bar/\nAllow: /foo/bar/%62%61%7A\n"
    assert allowed(body, "/foo/bar/baz")
    assert not allowed(body, "/foo/bar/qux")


def test_2_2_2_hex_case_of_escapes_does_not_matter() -> None:
    """%3c and %3C are one octet: escapes compare with their hex case folded.

    Disallow: /a%3cb -> /a%3Cb disallowed; Disallow: /%E3%83%84 -> /%e3%83%84 disallowed.
    """
    assert not allowed("User-agent: *\nDisallow: /a%3cb\n", "/a%3Cb")
    assert not allowed("User-agent: *\nDisallow: /%E3%83%84\n", "/%e3%83%84")


# Reserved characters (RFC 3986) whose escapes RFC 9309 §2.2.2 can be read to keep
# apart from the raw character, or to equate with it; '*' and '$' have a meaning
# in rules (§2.2.3), '[' ']' and '#' never stand raw in a path.
RESERVED_READ_BOTH_WAYS = ":/?@!&'()+,;="


@pytest.mark.parametrize("char", RESERVED_READ_BOTH_WAYS)
@pytest.mark.parametrize(
    ("rule", "url"),
    [
        ("/a{raw}b", "/a{escaped}b/c"),  # escaped in the URL only
        ("/a{escaped}b", "/a{raw}b/c"),  # escaped in the rule only
        ("/a{lower}b$", "/a{raw}b"),  # anchored, lower-case hex
        ("/*{raw}b", "/x/a{escaped}b"),  # after a wildcard
        ("/*{escaped}b$", "/x/a{raw}b"),
    ],
    ids=["url-escaped", "rule-escaped", "anchored", "wildcard", "wildcard-anchored"],
)
def test_2_2_2_reserved_character_escaped_on_one_side_only_is_not_fetched(
    char: str, rule: str, url: str
) -> None:
    """§2.2.2 reads two ways for reserved characters escaped on one side only:
    "%3D" kept apart from "=", or taken as it. A URL is fetched only when both
    readings allow it (Google's reference and Protego do not fetch these either).

    Disallow: /*page= -> /x/page%3D5 disallowed; Disallow: /a%2Fb -> /a/b disallowed.
    """
    code = f"{ord(char):02X}"
    spell = {"raw": char, "escaped": f"%{code}", "lower": f"%{code.lower()}"}
    body = f"User-agent: *\nDisallow: {rule.format(**spell)}\n"
    assert not allowed(body, url.format(**spell))
    assert not allowed(body, "https://example.com" + url.format(**spell))
    assert allowed(body, "/other")


def test_2_2_2_the_issues_page_parameter_example() -> None:
    """Issue 9's example: Disallow: /*page= -> /x/page%3D5 disallowed, decided by
    that line; /x/page5 allowed."""
    robots = RobotsTxt.parse("User-agent: *\nDisallow: /*page=\n")
    decision = robots.decide("https://example.com/x/page%3D5", user_agent=BOT)
    assert decision == Decision(False, 2, "Disallow: /*page=", ("*",))
    assert robots.allowed("/x/page5", user_agent=BOT)


def test_2_2_2_allow_of_an_escaped_reserved_character_needs_both_readings() -> None:
    """An Allow matches only where both readings match it, so neither fetches more.

    Disallow: / + Allow: /a%3Db -> /a%3Db allowed, /a=b disallowed (kept apart,
    the Allow does not match it); Allow: /a=b -> /a%3Db disallowed likewise.
    """
    assert allowed("User-agent: *\nDisallow: /\nAllow: /a%3Db\n", "/a%3db")
    assert not allowed("User-agent: *\nDisallow: /\nAllow: /a%3Db\n", "/a=b")
    assert allowed("User-agent: *\nDisallow: /\nAllow: /a=b\n", "/a=b")
    assert not allowed("User-agent: *\nDisallow: /\nAllow: /a=b\n", "/a%3Db")


def test_2_2_2_an_escape_counts_three_octets_in_either_reading() -> None:
    """A rule's priority is its length in normal form, however it matched: an
    escape of a reserved character counts three octets, as written.

    Disallow: /a%2Fb (6 octets) + Allow: /a/b (4) -> /a/b disallowed; Allow: /a%2Fb
    + Disallow: /a/ -> /a%2Fb allowed, decided by the Allow.
    """
    robots = RobotsTxt.parse("User-agent: *\nDisallow: /a%2Fb\nAllow: /a/b\n")
    assert robots.decide("/a/b", user_agent=BOT) == Decision(False, 2, "Disallow: /a%2Fb", ("*",))
    robots = RobotsTxt.parse("User-agent: *\nAllow: /a%2Fb\nDisallow: /a/\n")
    assert robots.decide("/a%2Fb", user_agent=BOT) == Decision(True, 2, "Allow: /a%2Fb", ("*",))


@pytest.mark.parametrize(("rule", "url"), [("/a%25", "/a%"), ("/a%", "/a%25"), ("/%25x", "/%x")])
def test_2_2_2_a_percent_that_starts_no_escape_is_a_percent(rule: str, url: str) -> None:
    """A '%' not followed by two hex digits can only stand for itself, "%25": one
    reading keeps them apart, the other not, so the URL is not fetched.

    Disallow: /a%25 -> /a% disallowed; Disallow: /a% -> /a%25 disallowed.
    """
    assert not allowed(f"User-agent: *\nDisallow: {rule}\n", url)


@pytest.mark.parametrize(("rule", "url"), [("/a%2A", "/a*"), ("/a%24", "/a$"), ("/a%5B", "/a[")])
def test_2_2_3_escaped_star_dollar_and_brackets_are_one_reading(rule: str, url: str) -> None:
    """'*' and '$' mean something in rules, so their escapes are literal in both
    readings; '[' is escaped in both. Disallow: /a%2A -> /a* disallowed, /ab allowed."""
    body = f"User-agent: *\nDisallow: {rule}\n"
    assert not allowed(body, url)
    assert allowed(body, "/ab")


def test_2_2_2_priority_is_the_length_of_the_normalised_pattern() -> None:
    """The most specific match is measured on the normalised pattern.

    Disallow: /%61b is /ab (3 octets), shorter than Allow: /abc (4)
    -> /abcd allowed, although the rule as written is longer.
    """
    assert allowed("User-agent: *\nDisallow: /%61b\nAllow: /abc\n", "/abcd")
    assert not allowed("User-agent: *\nDisallow: /%61b\nAllow: /abc\n", "/abx")


def test_2_2_2_query_is_part_of_the_path() -> None:
    """Rules see the path with its query (the URI's path and query).

    Disallow: /*? -> /a?b=1 disallowed, /a allowed; Disallow: /search?q=
    -> https://example.com/search?q=x disallowed, /search allowed.
    """
    assert not allowed("User-agent: *\nDisallow: /*?\n", "/a?b=1")
    assert allowed("User-agent: *\nDisallow: /*?\n", "/a")
    assert not allowed("User-agent: *\nDisallow: /search?q=\n", "https://example.com/search?q=x")
    assert allowed("User-agent: *\nDisallow: /search?q=\n", "https://example.com/search")


def test_2_2_2_fragment_is_not_part_of_the_path() -> None:
    """A fragment is never sent to the server, so rules do not see it.

    Disallow: /page$ -> https://example.com/page#top disallowed;
    Disallow: /*? -> /a#?b allowed.
    """
    assert not allowed("User-agent: *\nDisallow: /page$\n", "https://example.com/page#top")
    assert allowed("User-agent: *\nDisallow: /*?\n", "/a#?b")


@pytest.mark.parametrize(
    "url",
    [
        "/private/x?y=1",
        "https://example.com/private/x?y=1",
        "http://example.com:8080/private/x?y=1",
        "https://user:secret@example.com/private/x?y=1#frag",
    ],
)
def test_2_2_2_absolute_and_path_absolute_urls_agree(url: str) -> None:
    """The rules apply to the URI's path, whatever the scheme, authority or fragment.

    Disallow: /private -> every spelling of /private/x?y=1 disallowed.
    """
    assert not allowed("User-agent: *\nDisallow: /private\n", url)


def test_2_2_2_scheme_and_host_alone_mean_the_root() -> None:
    """A URL without a path is the root path "/".

    Disallow: /$ -> https://example.com disallowed, https://example.com/a allowed.
    """
    body = "User-agent: *\nDisallow: /$\n"
    assert not allowed(body, "https://example.com")
    assert not allowed(body, "https://example.com/")
    assert allowed(body, "https://example.com/a")
    # a network-path reference too: "//example.com" is host example.com, path "/"
    assert not allowed(body, "//example.com")
    assert not allowed("User-agent: *\nDisallow: /$\nAllow: //\n", "//example.com")
    assert allowed("User-agent: *\nDisallow: //\n", "//example.com")
    decision = RobotsTxt.parse(body).decide("//example.com", user_agent=BOT)
    assert (decision.allowed, decision.line) == (False, 2)


def test_2_2_2_allow_of_an_index_page_does_not_allow_its_directory() -> None:
    """Only the longest matching rule decides: Allow: /d/index.html does not match /d/.

    Disallow: /d/ + Allow: /d/index.html -> /d/ disallowed, /d/index.html allowed
    (Google's reference code also allows /d/ there; RFC 9309 and Google's
    documentation do not, so the RFC is followed).
    """
    body = "User-agent: *\nDisallow: /d/\nAllow: /d/index.html\n"
    assert not allowed(body, "/d/")
    assert allowed(body, "/d/index.html")


def test_2_2_2_rules_outside_any_group_are_ignored() -> None:
    """Rules before the first user-agent line belong to no group and are ignored.

    Disallow: /a / User-agent: * / Disallow: /b -> /a allowed, /b disallowed.
    """
    body = "Disallow: /a\nAllow: /b/c\nUser-agent: *\nDisallow: /b\n"
    assert disallowed_urls(body, ["/a", "/b", "/b/c"]) == ["/b", "/b/c"]


def test_2_2_2_decide_names_the_deciding_line_and_rule() -> None:
    """decide() reports the verdict, the 1-based line and the rule that decided.

    Line 5 "Allow: /public" decides /public; line 6 "Disallow: /private" decides
    /private/x; nothing matches /other (line None, rule None); OtherBot gets
    line 2 of the * group.
    """
    body = (
        "User-agent: *\nDisallow: /\n\nUser-agent: examplebot\nAllow: /public\nDisallow: /private\n"
    )
    robots = RobotsTxt.parse(body)
    private = robots.decide("https://example.com/private/x", user_agent=BOT)
    assert (private.allowed, private.line, private.rule) == (False, 6, "Disallow: /private")
    assert private.agents == ("examplebot",)
    public = robots.decide("/public", user_agent=BOT)
    assert (public.allowed, public.line, public.rule) == (True, 5, "Allow: /public")
    other = robots.decide("/other", user_agent=BOT)
    assert (other.allowed, other.line, other.rule) == (True, None, None)
    star = robots.decide("/x", user_agent="OtherBot")
    assert (star.allowed, star.line, star.rule, star.agents) == (False, 2, "Disallow: /", ("*",))
    assert isinstance(star, Decision)


def test_2_2_2_decide_names_a_line_of_the_asking_agents_own_group() -> None:
    """Two agents whose groups hold the same rule spelt differently each get their
    own line, whoever asked first.

    a: line 2 "Disallow: /x"; b: line 5 "Disallow: /%78" (the same pattern).
    """
    body = "User-agent: a\nDisallow: /x\n\nUser-agent: b\nDisallow: /%78\n"
    robots = RobotsTxt.parse(body)
    first = robots.decide("/x", user_agent="a")
    second = robots.decide("/x", user_agent="b")
    assert (first.line, first.rule, first.agents) == (2, "Disallow: /x", ("a",))
    assert (second.line, second.rule, second.agents) == (5, "Disallow: /%78", ("b",))


def test_2_2_2_decide_names_the_first_of_equal_rules() -> None:
    """Rules that are the same once normalised: the first one written is named.

    "Disallow: /%61" (line 2) and "Disallow: /a" (line 3) -> line 2, as written.
    """
    body = "User-agent: *\nDisallow: /%61\nDisallow: /a\nAllow: /b\n"
    robots = RobotsTxt.parse(body)
    decision = robots.decide("/a/x", user_agent=BOT)
    assert (decision.allowed, decision.line, decision.rule) == (False, 2, "Disallow: /%61")
    allow = robots.decide("/b", user_agent=BOT)
    assert (allow.allowed, allow.line, allow.rule) == (True, 4, "Allow: /b")


def test_2_2_2_decide_rule_is_canonical_key_and_value_as_written() -> None:
    """The rule text is "Disallow: " or "Allow: " and the value as written.

    "   disallow   :   /café   # secret" -> rule "Disallow: /café" (comment,
    spaces and key spelling gone, value not percent-encoded), line 2.
    """
    body = "User-agent: examplebot\n   disallow   :   /café   # secret\n"
    decision = RobotsTxt.parse(body).decide("/caf%C3%A9/menu", user_agent=BOT)
    assert (decision.allowed, decision.line, decision.rule) == (False, 2, "Disallow: /café")


def test_2_2_2_decide_counts_cr_lf_and_crlf_as_one_line_end_each() -> None:
    """Line numbers count CR, LF and CRLF as one line end each.

    "User-agent: *" CRLF "Allow: /a" CR "Disallow: /b" LF "Disallow: /c" CRLF CRLF
    "Disallow: /d" -> /b on line 3, /c on line 4, /d on line 6.
    """
    body = b"User-agent: *\r\nAllow: /a\rDisallow: /b\nDisallow: /c\r\n\r\nDisallow: /d"
    robots = RobotsTxt.parse(body)
    lines = [robots.decide(path, user_agent=BOT).line for path in ("/a", "/b", "/c", "/d")]
    assert lines == [2, 3, 4, 6]


# -- 2.2.3 Special characters ---------------------------------------------------


def test_2_2_3_star_matches_any_sequence_of_characters() -> None:
    """* designates 0 or more instances of any character.

    Disallow: /this/*/exactly -> /this/a/b/exactly and /this//exactly disallowed,
    /this/exactly allowed.
    """
    body = "User-agent: *\nDisallow: /this/*/exactly\n"
    assert disallowed_urls(body, ["/this/a/b/exactly", "/this//exactly", "/this/exactly"]) == [
        "/this/a/b/exactly",
        "/this//exactly",
    ]


def test_2_2_3_dollar_anchors_the_end() -> None:
    """$ designates the end of the match pattern.

    Disallow: / + Allow: /this/path/exactly$ -> /this/path/exactly allowed,
    /this/path/exactly/more and /this/path/exactly?x disallowed.
    """
    body = "User-agent: *\nDisallow: /\nAllow: /this/path/exactly$\n"
    assert allowed(body, "/this/path/exactly")
    assert not allowed(body, "/this/path/exactly/more")
    assert not allowed(body, "/this/path/exactly?x")


def test_2_2_3_percent_2a_in_a_pattern_is_a_literal_star() -> None:
    """A * in the URI is written %2A in a rule (RFC 9309 §2.2.3 example).

    Disallow: /path/file-with-a-%2A.html -> https://www.example.com/path/file-with-a-*.html
    disallowed, /path/file-with-a-xyz.html allowed (%2A is no wildcard).
    """
    body = "User-agent: *\nDisallow: /path/file-with-a-%2A.html\n"
    assert not allowed(body, "https://www.example.com/path/file-with-a-*.html")
    assert not allowed(body, "/path/file-with-a-%2A.html")
    assert allowed(body, "/path/file-with-a-xyz.html")


def test_2_2_3_percent_24_in_a_pattern_is_a_literal_dollar() -> None:
    """A $ in the URI is written %24 in a rule (RFC 9309 §2.2.3 example).

    Disallow: /path/foo-%24 -> https://www.example.com/path/foo-$ disallowed
    (and /path/foo-$bar: %24 is no anchor), /path/foo- allowed.
    """
    body = "User-agent: *\nDisallow: /path/foo-%24\n"
    assert not allowed(body, "https://www.example.com/path/foo-$")
    assert not allowed(body, "/path/foo-%24")
    assert not allowed(body, "/path/foo-$bar")
    assert allowed(body, "/path/foo-")


# Google's "URL matching based on path values" table: pattern, matches, non-matches.
GOOGLE_PATH_EXAMPLES = [
    ("/", ["/", "/any/page", "/?q=1"], []),
    ("/*", ["/", "/any/page", "/?q=1"], []),
    ("/$", ["/"], ["/page", "/?q=1"]),
    (
        "/fish",
        ["/fish", "/fish.html", "/fish/salmon.html", "/fishheads", "/fishheads/yummy.html",
         "/fish.php?id=anything"],
        ["/Fish.asp", "/catfish", "/?id=fish", "/desert/fish"],
    ),
    (
        "/fish*",
        ["/fish", "/fish.html", "/fish/salmon.html", "/fishheads", "/fishheads/yummy.html",
         "/fish.php?id=anything"],
        ["/Fish.asp", "/catfish", "/?id=fish", "/desert/fish"],
    ),
    (
        "/fish/",
        ["/fish/", "/fish/?id=anything", "/fish/salmon.htm"],
        ["/fish", "/fish.html", "/animals/fish/", "/Fish/Salmon.asp"],
    ),
    (
        "/*.php",
        ["/index.php", "/filename.php", "/folder/filename.php",
         "/folder/filename.php?parameters", "/folder/any.php.file.html", "/filename.php/"],
        ["/", "/windows.PHP"],
    ),
    (
        "/*.php$",
        ["/filename.php", "/folder/filename.php"],
        ["/filename.php?parameters", "/filename.php/", "/filename.php5", "/windows.PHP"],
    ),
    (
        "/fish*.php",
        ["/fish.php", "/fishheads/catfish.php?parameters"],
        ["/Fish.PHP"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("pattern", "matching", "other"),
    GOOGLE_PATH_EXAMPLES,
    ids=[example[0] for example in GOOGLE_PATH_EXAMPLES],
)
def test_2_2_3_google_path_matching_examples(
    pattern: str, matching: list[str], other: list[str]
) -> None:
    """Google's path matching table: /, /*, /$, /fish, /fish*, /fish/, /*.php, /*.php$ ...

    Disallow: <pattern> disallows exactly the URLs the table lists as matches.
    """
    body = f"User-agent: *\nDisallow: {pattern}\n"
    assert disallowed_urls(body, matching + other) == matching


GOOGLE_PRECEDENCE_EXAMPLES = [
    ("/page", "allow: /p\ndisallow: /", True),
    ("/folder/page", "allow: /folder\ndisallow: /folder", True),
    ("/page.htm", "allow: /page\ndisallow: /*.htm", False),
    ("/page.php5", "allow: /page\ndisallow: /*.ph", True),
    ("/", "allow: /$\ndisallow: /", True),
    ("/page.htm", "allow: /$\ndisallow: /", False),
]


@pytest.mark.parametrize(("url", "rules", "expected"), GOOGLE_PRECEDENCE_EXAMPLES)
def test_2_2_3_google_rule_precedence_examples(url: str, rules: str, expected: bool) -> None:
    """Google's order-of-precedence table for wildcard rules.

    /page: allow /p beats disallow /; /page.htm: disallow /*.htm (6) beats allow
    /page (5); /page.php5: allow /page and disallow /*.ph tie, allow wins; ...
    """
    assert allowed(f"user-agent: *\n{rules}\n", f"https://example.com{url}") is expected


# -- 2.2.4 Other records ----------------------------------------------------------


@pytest.mark.parametrize(
    "between",
    [
        "sitemap: https://example.com/sitemap.xml",
        "crawl-delay: 5",
        "host: example.com",
        "clean-param: ref /",
        "noindex: /x",
    ],
)
def test_2_2_4_other_records_do_not_end_a_group(between: str) -> None:
    """Lines other than allow, disallow and user-agent are ignored by grouping.

    Google's documented example: user-agent: a / sitemap: ... / (empty) /
    user-agent: b / disallow: / -> one group, a is disallowed / too.
    """
    body = f"user-agent: examplebot\n{between}\n\nuser-agent: b\ndisallow: /\n"
    assert not allowed(body, "/page")


def test_2_2_4_crawl_delay_of_the_agents_group() -> None:
    """Crawl-delay (a record the RFC lets crawlers interpret) is read per group.

    *: 10, examplebot: 2.5 -> ExampleBot 2.5, OtherBot 10.0; values are floats.
    (Each group has a rule: Crawl-delay alone does not end a group, §2.2.4.)
    """
    body = (
        "User-agent: *\nDisallow: /tmp\nCrawl-delay: 10\n\n"
        "User-agent: examplebot\nDisallow: /tmp\nCrawl-delay: 2.5\n"
    )
    robots = RobotsTxt.parse(body)
    assert robots.crawl_delay(user_agent=BOT) == 2.5
    assert robots.crawl_delay(user_agent="OtherBot") == 10.0
    assert isinstance(robots.crawl_delay(user_agent="OtherBot"), float)


def test_2_2_4_crawl_delay_own_group_replaces_star() -> None:
    """The crawler's own group replaces * for Crawl-delay as for rules.

    *: Disallow /tmp, Crawl-delay 10; examplebot: Disallow /x only -> ExampleBot has no delay.
    """
    body = (
        "User-agent: *\nDisallow: /tmp\nCrawl-delay: 10\n\nUser-agent: examplebot\nDisallow: /x\n"
    )
    assert RobotsTxt.parse(body).crawl_delay(user_agent=BOT) is None


# Delays belong to the user-agent lines written above them (scrapy_rep.robotstxt._delay_lines).


def delays_of(body: str, agent: str = BOT) -> tuple[float | None, tuple[int, float] | None]:
    robots = RobotsTxt.parse(body)
    return robots.crawl_delay(user_agent=agent), robots.request_rate(user_agent=agent)


def test_2_2_4_delay_right_after_its_agents_is_theirs_only() -> None:
    """Issue 9's example: two runs of user-agent lines in one group of rules,
    each with its own Crawl-delay.

    User-agent: slurp / Crawl-delay: 60 / User-agent: * / Crawl-delay: 1 /
    Disallow: /x -> slurp 60 s, ExampleBot 1 s; both are disallowed /x.
    """
    body = "User-agent: slurp\nCrawl-delay: 60\nUser-agent: *\nCrawl-delay: 1\nDisallow: /x\n"
    assert delays_of(body, "slurp") == (60.0, None)
    assert delays_of(body) == (1.0, None)
    assert not allowed(body, "/x", "slurp")
    assert not allowed(body, "/x")


def test_2_2_4_delay_after_rules_is_the_runs_above_them() -> None:
    """A delay line after rules belongs to the nearest run above it.

    User-agent: a / Crawl-delay: 3 / User-agent: examplebot / Disallow: /x /
    Request-rate: 1/9 -> a: 3 s and no rate, ExampleBot: no Crawl-delay, 1/9.
    """
    body = (
        "User-agent: a\nCrawl-delay: 3\nUser-agent: examplebot\nDisallow: /x\nRequest-rate: 1/9\n"
    )
    assert delays_of(body, "a") == (3.0, None)
    assert delays_of(body) == (None, (1, 9.0))


def test_2_2_4_two_delay_lines_for_two_runs_in_one_group() -> None:
    """Crawl-delay and Request-rate of two runs that share one group of rules.

    User-agent: otherbot / Crawl-delay: 20 / Request-rate: 1/30 / (blank) /
    User-agent: examplebot / Request-rate: 1/2 / Disallow: / -> OtherBot (20,
    1/30), ExampleBot (None, 1/2); both are disallowed everything.
    """
    body = (
        "User-agent: otherbot\nCrawl-delay: 20\nRequest-rate: 1/30\n\n"
        "User-agent: examplebot\nRequest-rate: 1/2\nDisallow: /\n"
    )
    assert delays_of(body, "OtherBot") == (20.0, (1, 30.0))
    assert delays_of(body) == (None, (1, 2.0))
    assert not allowed(body, "/a")
    assert not allowed(body, "/a", "OtherBot")


def test_2_2_4_one_run_of_several_agents_shares_its_delay() -> None:
    """Blank lines, comments and Sitemap lines do not break a run.

    User-agent: a / # note / Sitemap: /s.xml / (blank) / User-agent: examplebot /
    Crawl-delay: 4 -> a and ExampleBot 4 s.
    """
    body = "User-agent: a\n# note\nSitemap: /s.xml\n\nUser-agent: examplebot\nCrawl-delay: 4\n"
    assert delays_of(body, "a") == delays_of(body) == (4.0, None)


def test_2_2_4_an_unusable_delay_line_still_ends_its_run() -> None:
    """A delay line ends its run by its key, whatever its value.

    User-agent: a / Crawl-delay: soon / User-agent: examplebot / Crawl-delay: 5
    -> a: none, ExampleBot 5 s.
    """
    body = "User-agent: a\nCrawl-delay: soon\nUser-agent: examplebot\nCrawl-delay: 5\n"
    assert delays_of(body, "a") == (None, None)
    assert delays_of(body) == (5.0, None)


def test_2_2_4_delays_of_an_agents_merged_groups_the_most_cautious_wins() -> None:
    """The groups of one agent are combined: the largest Crawl-delay, and the
    Request-rate with the most seconds per request (the first on a tie).

    examplebot: Crawl-delay 5, Request-rate 2/10 ... examplebot: Crawl-delay 10,
    Request-rate 1/5 and 1/3 -> 10 s and 2/10 (5 s per request, as 1/5, first).
    """
    body = (
        "User-agent: examplebot\nCrawl-delay: 5\nRequest-rate: 2/10\nDisallow: /a\n\n"
        "User-agent: examplebot\nCrawl-delay: 10\nRequest-rate: 1/5\nRequest-rate: 1/3\n"
        "Disallow: /b\n"
    )
    assert delays_of(body) == (10.0, (2, 10.0))
    delays = RobotsTxt.parse(body).delays(user_agent=BOT)
    assert delays.crawl_delay == DelayLine(7, "Crawl-delay: 10", 10.0)
    assert delays.request_rate == DelayLine(3, "Request-rate: 2/10", 5.0)


def test_2_2_4_star_runs_apply_only_when_no_run_names_the_agent() -> None:
    """The agent's own run replaces "*" for delays, even without a delay line.

    User-agent: * / Crawl-delay: 5 / User-agent: examplebot / Disallow: /x ->
    ExampleBot: no delay (and /x disallowed); OtherBot (no run of its own): 5 s.
    """
    body = "User-agent: *\nCrawl-delay: 5\nUser-agent: examplebot\nDisallow: /x\n"
    assert delays_of(body) == (None, None)
    assert not allowed(body, "/x")
    assert delays_of(body, "OtherBot") == (5.0, None)


def test_2_2_4_delay_line_before_any_user_agent_line_is_ignored() -> None:
    """Like a rule outside any group, a delay line above every user-agent line
    applies to no one.

    Crawl-delay: 5 / Request-rate: 1/5 / User-agent: * / Disallow: /x -> no delay.
    """
    body = "Crawl-delay: 5\nRequest-rate: 1/5\nUser-agent: *\nDisallow: /x\n"
    assert delays_of(body) == (None, None)
    assert RobotsTxt.parse(body).delays(user_agent=BOT) == Delays()


def test_2_2_4_delays_names_the_lines_and_the_larger_delay() -> None:
    """delays() gives each deciding line's number and text, and seconds: the larger
    delay of the two (seconds per request for a rate).

    (line 2) # c / User-agent: examplebot / crawl-delay: 2 # two / Request-rate:
    1/10 -> lines 3 and 4, 2 s and 10 s, seconds 10; Crawl-delay alone -> 2.
    """
    body = "# c\nUser-agent: examplebot\ncrawl-delay: 2 # two\nRequest-rate: 1/10\n"
    delays = RobotsTxt.parse(body).delays(user_agent=BOT)
    assert delays == Delays(
        DelayLine(3, "Crawl-delay: 2", 2.0), DelayLine(4, "Request-rate: 1/10", 10.0)
    )
    assert delays.seconds == 10.0
    assert Delays(DelayLine(3, "Crawl-delay: 2", 2.0)).seconds == 2.0
    assert Delays().seconds is None
    for robots in (RobotsTxt.allow_all(), RobotsTxt.disallow_all()):
        assert robots.delays(user_agent=BOT) == Delays()


def test_2_2_4_no_crawl_delay_is_none() -> None:
    """No Crawl-delay line -> None."""
    assert RobotsTxt.parse("User-agent: *\nDisallow: /x\n").crawl_delay(user_agent=BOT) is None


@pytest.mark.parametrize("value", ["soon", "-1", "-0.5", "NaN", "nan", "inf", "Infinity", "1e999"])
def test_2_2_4_unusable_crawl_delay_is_none(value: str) -> None:
    """Non-numeric, negative, NaN and infinite delays are no delay.

    Crawl-delay: <value> -> crawl_delay() is None.
    """
    body = f"User-agent: examplebot\nCrawl-delay: {value}\n"
    assert RobotsTxt.parse(body).crawl_delay(user_agent=BOT) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1/5", (1, 5.0)), ("10/1m", (10, 60.0)), ("3/10s", (3, 10.0)), ("1/1h", (1, 3600.0))],
)
def test_2_2_4_request_rate(value: str, expected: tuple[int, float]) -> None:
    """Request-rate: <requests>/<seconds>[s|m|h] -> (requests, seconds).

    "1/5" -> (1, 5.0); "10/1m" -> (10, 60.0); "1/1h" -> (1, 3600.0).
    """
    body = f"User-agent: examplebot\nRequest-rate: {value}\n"
    rate = RobotsTxt.parse(body).request_rate(user_agent=BOT)
    assert rate == expected
    assert rate is not None
    assert isinstance(rate[0], int)
    assert isinstance(rate[1], float)


@pytest.mark.parametrize("body", ["User-agent: *\nRequest-rate: fast\n", "User-agent: *\n"])
def test_2_2_4_missing_or_unusable_request_rate_is_none(body: str) -> None:
    """No Request-rate, or one that is not n/t -> None."""
    assert RobotsTxt.parse(body).request_rate(user_agent=BOT) is None


@pytest.mark.parametrize(
    ("rate", "expected"),
    [
        ("9" * 4301 + "/1", None),  # more digits than int() converts
        ("1" + "0" * 18 + "/1", None),  # 10^18 requests: no rate anyone asks for
        ("999999999999999999/1", (999999999999999999, 1.0)),
        ("0" * 5000 + "1/5", (1, 5.0)),  # leading zeros are no digits of the count
        ("1/" + "0" * 5000 + "5", (1, 5.0)),
        ("1/1" + "0" * 400 + "h", None),  # seconds overflow to infinity
        ("\u0660" * 5000 + "/1", None),  # Arabic-Indic zeros, which "0" does not strip
        ("1/5\u017f", (1, 5.0)),  # the long s, which re.I reads as "s"
    ],
    ids=["4301-digits", "10^18", "18-digits", "zeros", "seconds-zeros", "inf", "arabic", "long-s"],
)
def test_2_2_4_huge_or_odd_request_rate_is_read_or_unusable_never_an_error(
    rate: str, expected: tuple[int, float] | None
) -> None:
    """A hostile Request-rate never raises from any query (issue 10, item 3).

    Request-rate: 999...9 (4,301 digits)/1 -> request_rate() is None, and allowed(),
    decide() and crawl_delay() answer as if the line were not there.
    """
    robots = RobotsTxt.parse(f"User-agent: *\nDisallow: /x\nRequest-rate: {rate}\n")
    assert robots.request_rate(user_agent=BOT) == expected
    assert robots.crawl_delay(user_agent=BOT) is None
    assert not robots.allowed("/x", user_agent=BOT)
    assert robots.decide("/y", user_agent=BOT).allowed


@pytest.mark.parametrize(
    "value", ["9" * 5000, "0." + "0" * 5000 + "1", "1" + "0" * 400, "." + "9" * 100_000]
)
def test_2_2_4_huge_crawl_delay_is_a_number_or_unusable_never_an_error(value: str) -> None:
    """Crawl-delay with thousands of digits: a float, or None when it is infinite.

    Crawl-delay: 999...9 (5,000 digits) -> None; 0.000...01 -> a tiny float.
    """
    robots = RobotsTxt.parse(f"User-agent: *\nCrawl-delay: {value}\n")
    delay = robots.crawl_delay(user_agent=BOT)
    assert delay is None or (isinstance(delay, float) and delay >= 0)
    assert robots.allowed("/", user_agent=BOT)


def test_2_2_4_sitemaps_anywhere_deduplicated_in_order() -> None:
    """Sitemap lines belong to no group: every one counts, once, in file order.

    Before the first user-agent, inside groups, repeated -> a, b, c.
    """
    body = (
        "Sitemap: https://example.com/a.xml\n"
        "User-agent: *\nSitemap: https://example.com/b.xml\nDisallow: /x\n"
        "SITEMAP:https://example.com/a.xml\nDisallow: /y\n"
        "User-agent: otherbot\n  sitemap :  https://cdn.example.org/c.xml  # cdn\n"
    )
    robots = RobotsTxt.parse(body)
    assert robots.sitemaps == (
        "https://example.com/a.xml",
        "https://example.com/b.xml",
        "https://cdn.example.org/c.xml",
    )
    # and a Sitemap line inside a group neither ends it nor hides the rules after it
    assert not robots.allowed("/x", user_agent=BOT)
    assert not robots.allowed("/y", user_agent=BOT)


def test_2_2_4_relative_sitemaps_resolve_against_the_robots_url() -> None:
    """A relative Sitemap URL is resolved against where robots.txt came from.

    parse("Sitemap: /sitemap.xml", url="https://example.com/robots.txt")
    -> "https://example.com/sitemap.xml"; absolute ones stay as they are.
    """
    body = "Sitemap: /sitemap.xml\nSitemap: news.xml\nSitemap: https://other.example/s.xml\n"
    robots = RobotsTxt.parse(body, url="https://example.com/robots.txt")
    assert robots.sitemaps == (
        "https://example.com/sitemap.xml",
        "https://example.com/news.xml",
        "https://other.example/s.xml",
    )


def test_2_2_4_sitemap_bytes_that_are_not_utf8_are_percent_encoded() -> None:
    """A Sitemap URL with bytes that are not UTF-8 keeps them, percent-encoded, so that
    it can be requested (and every entry is a str a URL can hold).

    b"Sitemap: https://example.com/s\\xe9.xml" (Latin-1 é) -> ".../s%E9.xml";
    b"Sitemap: /m\\xff\\xfe.xml" -> ".../m%FF%FE.xml"; valid UTF-8 ("café") stays as written.
    """
    body = (
        b"Sitemap: https://example.com/s\xe9.xml\n"
        b"Sitemap: /m\xff\xfe.xml\n"
        b"Sitemap: https://example.com/caf\xc3\xa9.xml\n"
    )
    robots = RobotsTxt.parse(body, url="https://example.com/robots.txt")
    assert robots.sitemaps == (
        "https://example.com/s%E9.xml",
        "https://example.com/m%FF%FE.xml",
        "https://example.com/café.xml",
    )
    for location in robots.sitemaps:
        location.encode("utf-8")  # no lone surrogate left


def test_2_2_4_no_sitemaps_is_an_empty_tuple() -> None:
    """No Sitemap line -> sitemaps == ()."""
    assert RobotsTxt.parse("User-agent: *\nDisallow: /\n").sitemaps == ()


# -- 2.3 Access method and 2.3.1 access results -----------------------------------


def test_2_3_utf8_bytes_and_text_mean_the_same() -> None:
    """The file is UTF-8: a bytes body and the same text as str give the same answers.

    Disallow: /ツ as bytes or str -> /%E3%83%84 disallowed either way.
    """
    text = "User-agent: *\nDisallow: /ツ\n"
    assert not allowed(text, "/%E3%83%84")
    assert not allowed(text.encode("utf-8"), "/%E3%83%84")


def test_2_3_1_3_unavailable_robots_txt_allows_everything() -> None:
    """Unavailable (e.g. 4xx): crawlers MAY access any resource -> allow_all().

    Every URL, for every agent, is allowed; no delay, no sitemaps.
    """
    robots = RobotsTxt.allow_all()
    assert robots.allowed("https://example.com/private", user_agent=BOT)
    assert robots.allowed("/", user_agent="OtherBot")
    assert robots.decide("/x", user_agent=BOT).allowed
    assert robots.crawl_delay(user_agent=BOT) is None
    assert robots.sitemaps == ()


def test_2_3_1_4_unreachable_robots_txt_disallows_everything_but_itself() -> None:
    """Unreachable (5xx, network error): crawlers MUST assume complete disallow.

    disallow_all(): /, /page?x and absolute URLs disallowed; /robots.txt allowed.
    """
    robots = RobotsTxt.disallow_all()
    assert not robots.allowed("/", user_agent=BOT)
    assert not robots.allowed("https://example.com/page?x", user_agent="OtherBot")
    assert not robots.decide("/page", user_agent=BOT).allowed
    assert robots.allowed("/robots.txt", user_agent=BOT)


def test_2_3_1_5_parseable_rules_are_used_despite_errors() -> None:
    """Crawlers MUST use the parseable rules of a file with errors (e.g. HTML).

    An HTML page with stray markup and a valid group inside -> its Disallow: /x
    applies; the markup lines and "<p>Disallow: /</p>" do not.
    """
    body = (
        "<!DOCTYPE html>\n<html><head><title>robots</title></head><body>\n"
        "<p>Disallow: /</p>\n"
        "User-agent: *\n"
        "this line means nothing\n"
        ":::\n"
        "Disallow: /x\n"
        "</body></html>\n"
    )
    assert disallowed_urls(body, ["/x", "/y", "/"]) == ["/x"]


# -- 2.5 Limits -----------------------------------------------------------------


def _padded(size: int, tail: str) -> bytes:
    """A body of ``size`` bytes of comment lines before ``tail``."""
    head = "User-agent: *\n"
    filler = size - len(head)
    lines = ("#" + "x" * 98 + "\n") * (filler // 100)
    return (head + lines + "#" * (filler - len(lines) - 1) + "\n" + tail).encode()


def test_2_5_the_default_limit_is_500_kib() -> None:
    """RFC 9309 §2.5 asks for at least 500 kibibytes; DEFAULT_MAX_SIZE, the one
    definition of the default (REP_MAX_SIZE's too), is exactly that."""
    assert DEFAULT_MAX_SIZE == 500 * 1024


def test_2_5_at_least_500_kib_are_parsed() -> None:
    """Crawlers MUST parse at least the first 500 KiB.

    A rule starting at byte 511,000 of the file still applies.
    """
    body = _padded(511_000, "Disallow: /late\n")
    assert len(body) < 512_000
    assert not allowed(body, "/late")


def test_2_5_content_after_the_limit_is_ignored() -> None:
    """Crawlers MAY ignore what follows the limit (Google: 500 KiB).

    A rule starting after byte 512,000 does not apply.
    """
    body = _padded(512_100, "Disallow: /late\n")
    assert allowed(body, "/late")


@pytest.mark.parametrize("line", ["\n", "a\n", "allow\n", "Disallow: /x\n", "Sitemap: /s.xml\n"])
def test_2_5_a_500_kib_group_of_short_lines_costs_little_memory(line: str) -> None:
    """Robustness beyond the RFC: 500 KiB of one short line repeated in one group.

    Parsing it and answering once never holds more than 32 MiB at a time
    (a regex that kept state per line once needed 190 MiB here).
    """
    body = ("User-agent: *\nDisallow: /\n" + line * (510_000 // len(line))).encode()
    tracemalloc.start()
    try:
        robots = RobotsTxt.parse(body)
        assert not robots.allowed("/x", user_agent=BOT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"{peak / 2**20:.0f} MiB"


def test_2_5_max_size_sets_the_limit_and_drops_a_cut_line() -> None:
    """parse(max_size=n) reads n bytes; a last line cut short is dropped, not shortened.

    "Disallow: /abcdef" cut after "/abc" is not read as Disallow: /abc.
    """
    body = b"User-agent: *\nDisallow: /a\nDisallow: /abcdef\n"
    cut = body.index(b"/abcdef") + 4
    robots = RobotsTxt.parse(body, max_size=cut)
    assert not robots.allowed("/a", user_agent=BOT)
    assert robots.allowed("/bcd", user_agent=BOT)
    full = RobotsTxt.parse(body, max_size=len(body))
    assert not full.allowed("/abcdef", user_agent=BOT)
    assert RobotsTxt.parse(body, max_size=5).allowed("/a", user_agent=BOT)


# -- 5 Examples -------------------------------------------------------------------


def test_5_1_simple_example() -> None:
    """RFC 9309 §5.1: foobot, barbot/bazbot sharing a group, quxbot with no rules.

    foobot: /example/page.html disallowed; barbot and bazbot: /example/page.html
    allowed, /example/disallowed.gif disallowed; quxbot: everything allowed.
    """
    body = (
        "User-Agent : foobot\n"
        "Disallow : /example/page.html\n"
        "Disallow : /example/disallowed.gif\n"
        "\n"
        "User-Agent : barbot\n"
        "User-Agent : bazbot\n"
        "Allow : /example/page.html\n"
        "Disallow : /example/disallowed.gif\n"
        "\n"
        "User-Agent: quxbot\n"
        "\n"
        "EOF\n"
    )
    urls = ["/example/page.html", "/example/disallowed.gif", "/example/other"]
    assert disallowed_urls(body, urls, "foobot") == urls[:2]
    assert disallowed_urls(body, urls, "barbot") == ["/example/disallowed.gif"]
    assert disallowed_urls(body, urls, "bazbot") == ["/example/disallowed.gif"]
    assert disallowed_urls(body, urls, "quxbot") == []
