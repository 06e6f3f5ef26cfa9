"""RobotsTxt.usage() and the statement formats of scrapy_rep.usage, per text and rule.

Named by the text each rule comes from: draft-ietf-aipref-attach-05 ("attach"),
draft-ietf-aipref-vocab-07/-08 ("vocab"), RFC 9651 (Structured Fields),
Cloudflare's Content Signals Policy ("content_signal"), W3C TDMRep ("tdmrep"),
and scrapy-rep's own choices where the texts are silent ("ours"). The case is
in each docstring.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_rep import RobotsTxt, UsageLine
from scrapy_rep._page_directives import parse_header, parse_rules
from scrapy_rep.robotstxt._usage_labels import PURPOSES
from scrapy_rep.usage import (
    MAX_FIELD,
    MAX_TDMREP_RULES,
    Statement,
    TdmRep,
    combine,
    content_signal,
    content_usage,
    parse_dictionary,
    response_statements,
    tdm_value,
)

# no Scrapy code runs: neither the reactor nor Scrapy's version changes anything
pytestmark = [pytest.mark.reactor_free, pytest.mark.scrapy_free]

BOT = "ExampleBot"


def usage(body: str, url: str = "/page", agent: str = BOT) -> dict[str, bool]:
    return RobotsTxt.parse(body).usage(url, user_agent=agent)


# -- draft-ietf-aipref-attach-05: the robots.txt Content-Usage rule -----------------------

ATTACH_EXAMPLE = """User-Agent: *
Allow: /
Disallow: /never/
Content-Usage: train-ai=n
Content-Usage: /ai-ok/ train-ai=y

User-Agent: ExampleBot
Allow: /
Content-Usage: train-ai=y
"""


@pytest.mark.parametrize(
    ("agent", "path", "expected"),
    [
        ("OtherBot", "/test", {"train-ai": False}),
        ("OtherBot", "/never/test", {}),
        ("OtherBot", "/ai-ok/test", {"train-ai": True}),
        ("ExampleBot", "/test", {"train-ai": True}),
        ("ExampleBot", "/never/test", {"train-ai": True}),
        ("ExampleBot", "/ai-ok/test", {"train-ai": True}),
    ],
)
def test_attach_worked_example(agent: str, path: str, expected: dict[str, bool]) -> None:
    """The attach draft's example: the "*" group's path-less rule is its default, the
    longer /ai-ok/ path wins below it, a disallowed URL carries no preferences, and
    ExampleBot reads only its own group."""
    assert usage(ATTACH_EXAMPLE, path, agent) == expected


def test_attach_disallowed_url_has_no_preferences() -> None:
    """attach: acquisition first; a URL the agent may not fetch has no statement."""
    body = "User-agent: *\nDisallow: /x\nContent-Usage: train-ai=n\n"
    assert usage(body, "/x/1") == {}
    assert usage(body, "/y") == {"train-ai": False}
    assert RobotsTxt.disallow_all().usage("/y", user_agent=BOT) == {}
    assert RobotsTxt.allow_all().usage("/y", user_agent=BOT) == {}


def test_attach_longest_path_wins_whatever_the_order() -> None:
    """attach: "the same path prefix matching rules as Allow and Disallow": the rule
    with the longest matching path applies; order means nothing."""
    body = (
        "User-agent: *\n"
        "Content-Usage: /a/b/ train-ai=y\n"
        "Content-Usage: train-ai=n\n"
        "Content-Usage: /a/ train-ai=n, search=y\n"
    )
    assert usage(body, "/a/b/c") == {"train-ai": True}  # not search: that rule does not apply
    assert usage(body, "/a/c") == {"train-ai": False, "search": True}
    assert usage(body, "/z") == {"train-ai": False}


def test_attach_equal_paths_resolve_to_the_most_restrictive() -> None:
    """attach: rules with identical paths all apply, combined most-restrictively
    (unlike Allow/Disallow, where a tie goes to Allow)."""
    body = (
        "User-agent: *\n"
        "Content-Usage: /a/ train-ai=y, search=y\n"
        "Content-Usage: /a/ train-ai=n\n"
        "Content-Usage: /a/ search=y\n"
    )
    assert usage(body, "/a/x") == {"train-ai": False, "search": True}


def test_ours_equal_length_different_paths_both_matching_combine_too() -> None:
    """ours (attach is silent): two different paths of the same length that both
    match are combined like identical ones, most restrictive winning."""
    body = "User-agent: *\nContent-Usage: /a*c train-ai=y\nContent-Usage: /ab/ train-ai=n\n"
    assert usage(body, "/ab/c") == {"train-ai": False}
    assert usage(body, "/axc") == {"train-ai": True}


def test_attach_paths_use_robots_txt_patterns_and_percent_encoding() -> None:
    """attach reuses RFC 9309's path-pattern: '*' and '$' are special, the length is
    that of the normalised pattern ('$' counts), escapes compare normalised."""
    body = (
        "User-agent: *\n"
        "Content-Usage: /*.pdf$ train-ai=n\n"
        "Content-Usage: /%7Ejoe/ train-ai=y\n"
        "Content-Usage: /caf%C3%A9/ search=n\n"
    )
    assert usage(body, "/docs/a.pdf") == {"train-ai": False}
    assert usage(body, "/docs/a.pdf?x") == {}
    assert usage(body, "/~joe/a") == {"train-ai": True}
    assert usage(body, "/café/menu") == {"search": False}


def test_attach_line_value_path_ends_at_space_or_tab_comment_ends_the_value() -> None:
    """attach: a value starting with '/' starts with a path ending at the first SP or
    HTAB; '#' always starts a comment; the statement is the rest."""
    body = "User-agent: *\nContent-Usage: /a/\t train-ai=n  # no training here\n"
    assert usage(body, "/a/1") == {"train-ai": False}
    assert usage(body, "/b") == {}
    assert usage("User-agent: *\nContent-Usage: /a/ train-ai=n#x\n", "/a/") == {"train-ai": False}


def test_attach_rule_outside_any_group_applies_to_nobody() -> None:
    """attach: Content-Usage is a group rule; above every group it belongs to none."""
    body = "Content-Usage: train-ai=n\n\nUser-agent: *\nAllow: /\n"
    assert usage(body) == {}


def test_attach_star_group_not_read_by_an_agent_with_a_group() -> None:
    """RFC 9309 group selection: an agent with its own group does not read "*"'s rules."""
    body = "User-agent: *\nContent-Usage: train-ai=n\n\nUser-agent: examplebot\nDisallow: /x\n"
    assert usage(body) == {}
    assert usage(body, agent="OtherBot") == {"train-ai": False}


def test_attach_groups_of_the_same_agent_merge() -> None:
    """RFC 9309: every group naming the agent applies; their rules combine."""
    body = (
        "User-agent: ExampleBot\nContent-Usage: search=y\nDisallow: /x\n\n"
        "User-agent: Other\nDisallow: /\n\n"
        "User-agent: examplebot\nContent-Usage: train-ai=n\n"
    )
    assert usage(body) == {"search": True, "train-ai": False}


def test_attach_key_is_case_insensitive_and_a_missing_colon_tolerated() -> None:
    """ABNF literals are case-insensitive; the missing colon of a two-word line is
    accepted as for every key (Google's leniency)."""
    assert usage("User-agent: *\nCONTENT-USAGE: train-ai=n\n") == {"train-ai": False}
    assert usage("User-agent: *\ncontent-usage train-ai=n\n") == {"train-ai": False}


# -- grouping: usage lines and the groups of Allow/Disallow (ours) ---------------------------


def test_ours_usage_line_does_not_end_a_group_fetch_verdicts_as_google() -> None:
    """ours: a group of user-agent and usage lines only does not end at the next
    user-agent line, as in Google's parser (which does not know the lines): the
    fetch verdicts are those of the same file without them."""
    body = "User-agent: *\nContent-Signal: ai-train=no\nUser-agent: OtherBot\nDisallow: /\n"
    without = "User-agent: *\n#\nUser-agent: OtherBot\nDisallow: /\n"
    for agent in ("MyBot", "OtherBot"):
        parsed, plain = RobotsTxt.parse(body), RobotsTxt.parse(without)
        assert parsed.decide("/a", user_agent=agent) == plain.decide("/a", user_agent=agent)
        assert not parsed.allowed("/a", user_agent=agent)


def test_ours_usage_lines_belong_to_the_user_agent_lines_above_them() -> None:
    """ours: as Crawl-delay, a usage line belongs to the run of user-agent lines
    right above it, so each agent reads what was written for it (what AIPREF's
    grouping means), while Allow/Disallow keep Google's groups."""
    body = (
        "User-agent: *\n"
        "Content-Usage: train-ai=n\n"
        "User-agent: ExampleBot\n"
        "Content-Usage: train-ai=y\n"
        "Disallow: /x\n"
    )
    robots = RobotsTxt.parse(body)
    assert robots.usage("/a", user_agent="ExampleBot") == {"train-ai": True}
    assert robots.usage("/a", user_agent="OtherBot") == {"train-ai": False}
    assert not robots.allowed("/x", user_agent="OtherBot")  # one group for the rules


def test_ours_a_run_naming_several_agents_speaks_for_each() -> None:
    """ours: user-agent lines in a row make one run; its usage lines apply to all of them."""
    body = "User-agent: A\nUser-agent: ExampleBot\n# c\nContent-Usage: search=n\nAllow: /\n"
    assert usage(body) == {"search": False}
    assert usage(body, agent="A") == {"search": False}


def test_ours_usage_line_ends_a_delay_run_too() -> None:
    """ours: runs are one definition for delay and usage lines: a usage line ends
    the run above it, so a Crawl-delay after the next user-agent line is not its."""
    body = "User-agent: a\nContent-Signal: search=yes\nUser-agent: b\nCrawl-delay: 5\n"
    robots = RobotsTxt.parse(body)
    assert robots.crawl_delay(user_agent="a") is None
    assert robots.crawl_delay(user_agent="b") == 5.0
    assert robots.usage("/", user_agent="a") == {"search": True}
    assert robots.usage("/", user_agent="b") == {}


# -- draft-ietf-aipref-vocab: values, labels, combining ------------------------------------


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("train-ai=n", {"train-ai": False}),
        ("train-ai=y, search=n", {"train-ai": True, "search": False}),
        ("search=y,train-ai=n", {"search": True, "train-ai": False}),
        ('train-ai="n"', {}),  # a String, not a Token
        ("train-ai", {}),  # a bare key is the Boolean true
        ("train-ai=no", {}),  # another Token
        ("train-ai=?0", {}),
        ("train-ai=n;reason=x, search=y;q=1", {"train-ai": False, "search": True}),
        ("foo=n, train-ai=n", {"train-ai": False}),  # unknown labels ignored
        ('train-ai=y, train-ai, search=n, search="n"', {}),  # vocab-07's example
        ("train-ai=y, train-ai=n", {"train-ai": False}),  # the last duplicate wins
        ("train-ai=(n y)", {}),  # an inner list
        ("Train-ai=n", {}),  # an uppercase key: the whole statement fails
        ("search=y, TRAIN-AI=n", {}),
        ("train-ai=n,", {}),  # a trailing comma fails
        ("train-ai=n search=y", {}),  # no comma
        ("train-ai=n, search=ñ", {}),  # not ASCII
        ("", {}),
        ("  train-ai=n  ", {"train-ai": False}),
    ],
)
def test_vocab07_statement_processing(statement: str, expected: dict[str, bool]) -> None:
    """vocab-07 §4: an SF Dictionary; Token y allows, Token n denies, anything else
    is unknown; a parse failure makes everything unknown."""
    assert content_usage(statement) == expected
    assert usage(f"User-agent: *\nContent-Usage: {statement}\n") == expected


@pytest.mark.parametrize(
    "label", ["tdm", "ai", "genai", "inference", "all", "bots", "train-genai", "ai-output"]
)
def test_vocab_labels_of_earlier_revisions_are_unknown_and_ignored(label: str) -> None:
    """vocab-07: labels of -01 to -04 are unknown now, so they state nothing."""
    assert content_usage(f"{label}=n") == {}


def test_vocab08_ai_use_speaks_for_ai_input() -> None:
    """vocab-08 (from summaries): ai-use, input to a generative AI model: ai-input."""
    assert content_usage("ai-use=n, train-ai=y") == {"ai-input": False, "train-ai": True}


def test_vocab07_combining_any_no_wins_else_any_yes() -> None:
    """vocab-07 §5.1: per category, any disallow wins, else any allow, else unknown."""
    no = Statement("a", {"train-ai": False}, "no")
    yes = Statement("b", {"train-ai": True, "search": True}, "yes")
    verdicts = combine([yes, no], ["train-ai", "search", "ai-input"])
    assert verdicts["train-ai"].allowed is False
    assert verdicts["train-ai"].reasons == (no,)
    assert verdicts["search"].allowed is True
    assert verdicts["search"].reasons == (yes,)
    assert verdicts["ai-input"].allowed is None
    assert verdicts["ai-input"].reasons == ()


# -- RFC 9651 §4.2.2: the Dictionary parser ------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "a=1, b=-2, c=1.5, d=-123456789012.123, e=123456789012345",
        'a="x \\" \\\\ y", b=:YWJj:, c=?1, d=@1659578233, e=%"caf%c3%a9"',
        "a=tok/en:x, *b=*, c.d_e-f=1",
        'a;p=1;q, b=(1 2;x=y "s");lp=?0, c=()',
        "a=1 ,  b=2\t,\tc=3   ",
    ],
)
def test_rfc9651_valid_dictionaries_parse(text: str) -> None:
    """§4.2.2 and the bare items of §4.2.3-4.2.10: every type parses."""
    assert parse_dictionary(text) is not None


@pytest.mark.parametrize(
    "text",
    [
        "a=1234567890123456",  # 16 digits
        "a=1234567890123.1",  # 13 integer digits in a decimal
        "a=1.1234",  # 4 fraction digits
        "a=1.",
        'a="unterminated',
        'a="bad \\n escape"',
        "a=:not base64!:",
        "a=?2",
        "a=@1.5",  # a Date is an Integer
        'a=%"caf%C3%A9"',  # uppercase hex
        'a=%"%ff"',  # not UTF-8
        "a=(1 2",
        "a=(1,2)",
        "\ta=1",  # only SP may lead
        "a=1,,b=2",
        "a=1;P=2",
        "a=é",
        "a=#x",
    ],
)
def test_rfc9651_invalid_dictionaries_fail(text: str) -> None:
    """A value that breaks §4.2's algorithm fails as a whole."""
    assert parse_dictionary(text) is None


def test_rfc9651_parser_is_linear_on_hostile_input() -> None:
    """Long runs of what a backtracking parser would choke on are read at once."""
    for text in ('a="' + "\\\\" * 50_000, "a=(" + "1 " * 50_000, "a=1;" + "p;" * 50_000):
        assert parse_dictionary(text) is None
    assert content_usage("train-ai=n, " + "a=1, " * (MAX_FIELD // 5)) == {}  # over the bound


# -- Content Signals Policy: the lenient reading --------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("search=yes, ai-train=no", {"search": True, "train-ai": False}),
        ("search=yes,ai-train=no,use=reference", {"search": True, "train-ai": False}),
        ("AI-TRAIN=NO, Search=Yes", {"train-ai": False, "search": True}),
        (" ai-train = no , ai-input = no ", {"train-ai": False, "ai-input": False}),
        ("ai-train=maybe, search=yes", {"search": True}),
        ("ai-train=n, search=y", {}),  # AIPREF's values are not Content Signals'
        ("train-ai=no", {}),  # AIPREF's label neither
        ("foo, ai-input=no", {"ai-input": False}),  # a broken item is ignored alone
        ("ai-train=no; search=yes", {}),
        ("ai-train=no, ai-train=yes", {"train-ai": True}),  # the last in a line wins
        ('ai-train="no"', {}),
    ],
)
def test_content_signal_values(value: str, expected: dict[str, bool]) -> None:
    """Content Signals Policy: yes/no per category; ai-train is train-ai."""
    assert content_signal(value) == expected


@pytest.mark.parametrize(
    "key",
    [
        "Content-Signal",
        "content-signal",
        "CONTENT-SIGNAL",
        "Content-Signals",
        "content signal",
        "ContentSignal",
    ],
)
def test_content_signal_key_spellings(key: str) -> None:
    """No text defines the key: any case, and the spellings deployed parsers read."""
    assert usage(f"User-agent: *\n{key}: ai-train=no\n") == {"train-ai": False}


def test_content_signal_line_before_any_group_applies_to_every_group() -> None:
    """ours (no text says): a line above every group speaks for the whole site, as
    sites writing it there mean, and as crawler-commons reads it."""
    body = (
        "Content-Signal: ai-train=no\n\n"
        "User-agent: ExampleBot\nAllow: /\n\n"
        "User-agent: *\nAllow: /\n"
    )
    assert usage(body) == {"train-ai": False}
    assert usage(body, agent="Other") == {"train-ai": False}
    assert usage("Content-Signal: search=no\n") == {"search": False}  # a file without groups


def test_content_signal_is_scoped_to_the_agents_group() -> None:
    """ours: inside a group, a line speaks for that group's agents; RFC 9309's group
    selection applies ("*" only when no group names the agent)."""
    body = (
        "User-agent: *\nContent-Signal: ai-train=no\nAllow: /\n\n"
        "User-agent: ExampleBot\nContent-Signal: ai-train=yes\nAllow: /\n"
    )
    assert usage(body) == {"train-ai": True}
    assert usage(body, agent="Other") == {"train-ai": False}
    body = (
        "User-agent: *\nContent-Signal: ai-train=no\nAllow: /\n\nUser-agent: ExampleBot\nAllow: /\n"
    )
    assert usage(body) == {}  # its own group says nothing: "*" does not stand in


def test_content_signal_several_lines_of_merged_groups_combine_in_any_order() -> None:
    """ours: two "*" groups (a managed block and the site's own) merge; their lines
    combine most-restrictively, whichever comes first."""
    group = "User-agent: *\nContent-Signal: ai-train={}\nAllow: /\n\n"
    first = group.format("no") + group.format("yes")
    second = group.format("yes") + group.format("no")
    assert usage(first) == usage(second) == {"train-ai": False}


def test_content_signal_with_a_path_reads_like_content_usage() -> None:
    """ours (no text gives a path a meaning): a value starting with '/' is scoped to
    that path, longest path winning, as a Content-Usage rule is."""
    body = (
        "User-agent: *\n"
        "Content-Signal: ai-train=no\n"
        "Content-Signal: /blog/ ai-train=yes, search=yes\n"
    )
    assert usage(body, "/blog/post") == {"train-ai": True, "search": True}
    assert usage(body, "/shop") == {"train-ai": False}


CLOUDFLARE_MANAGED = """# As a condition of accessing this website, you agree to abide by the
# following content signals: (policy text of the site's CDN)
#   search: building a search index and showing links and excerpts
#   ai-input: putting the content into AI models to answer
#   ai-train: training or fine-tuning AI models

# BEGIN Cloudflare Managed content

User-Agent: *
Content-signal: search=yes,ai-train=no
Allow: /

User-agent: Amazonbot
Disallow: /

User-agent: Applebot-Extended
Disallow: /

User-agent: CCBot
Disallow: /

User-agent: GPTBot
Disallow: /

# END Cloudflare Managed Content

User-agent: *
Disallow: /wp-admin/
Allow: /wp-admin/admin-ajax.php
Crawl-delay: 2

Sitemap: https://example.com/sitemap.xml
"""


def test_content_signal_cloudflare_managed_block_prepended_to_the_sites_own_group() -> None:
    """Cloudflare's managed file: its block (a "*" group with the signal, closed by
    Allow: /, then training crawlers disallowed) before the site's own "*" group.
    The two "*" groups merge: the signal and the site's rules both apply."""
    robots = RobotsTxt.parse(CLOUDFLARE_MANAGED)
    assert robots.usage("/post", user_agent=BOT) == {"search": True, "train-ai": False}
    assert robots.usage("/wp-admin/x", user_agent=BOT) == {}  # not fetched: no preferences
    assert robots.usage("/wp-admin/admin-ajax.php", user_agent=BOT) == {
        "search": True,
        "train-ai": False,
    }
    assert robots.usage("/post", user_agent="GPTBot") == {}  # GPTBot may fetch nothing
    assert robots.crawl_delay(user_agent=BOT) == 2.0
    decided = robots.decide_usage("/post", user_agent=BOT)
    line = UsageLine(10, "Content-Signal: search=yes,ai-train=no")
    assert decided["train-ai"].allowed is False
    assert decided["train-ai"].lines == (line,)


def test_content_signal_cloudflare_2026_form_with_use_level() -> None:
    """The managed files of 2026 add use=reference: a level, not read."""
    body = "User-agent: *\nContent-Signal: search=yes,ai-train=no,use=reference\nAllow: /\n"
    assert usage(body) == {"search": True, "train-ai": False}


# -- both lines in one file ------------------------------------------------------------------


def test_ours_both_mechanisms_any_no_wins_and_the_deciding_lines_are_named() -> None:
    """ours: Content-Usage and Content-Signal each resolve by their own rules, then
    any "no" of either wins; decide_usage() names the lines, in file order."""
    body = (
        "User-agent: *\n"
        "Content-Signal: search=yes, ai-train=yes, ai-input=no\n"
        "Content-Usage: /open/ train-ai=n\n"
        "Content-Usage: train-ai=y, search=y\n"
    )
    robots = RobotsTxt.parse(body)
    assert robots.usage("/open/a", user_agent=BOT) == {
        "search": True,
        "train-ai": False,
        "ai-input": False,
    }
    decided = robots.decide_usage("/x", user_agent=BOT)
    assert decided["train-ai"].allowed is True
    assert [line.line for line in decided["train-ai"].lines] == [2, 4]
    assert decided["search"].lines == (
        UsageLine(2, "Content-Signal: search=yes, ai-train=yes, ai-input=no"),
        UsageLine(4, "Content-Usage: train-ai=y, search=y"),
    )
    assert robots.decide_usage("/open/a", user_agent=BOT)["train-ai"].lines == (
        UsageLine(3, "Content-Usage: /open/ train-ai=n"),
    )


def test_ours_line_numbers_with_cr_line_ends_and_a_bom() -> None:
    """Line numbers count the file's own lines, whatever their ends."""
    body = (
        b"\xef\xbb\xbfContent-Signal: search=no\r\r\nUser-agent: *\rContent-Usage: train-ai=n\r\n"
    )
    decided = RobotsTxt.parse(body).decide_usage("/", user_agent=BOT)
    assert decided["search"].lines == (UsageLine(1, "Content-Signal: search=no"),)
    assert decided["train-ai"].lines == (UsageLine(4, "Content-Usage: train-ai=n"),)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "User-agent: *",
                    "User-agent: ExampleBot",
                    "Disallow: /x",
                    "Allow: /",
                    "Crawl-delay: 3",
                    "",
                    "# c",
                ]
            ),
            st.builds(
                "{}: {}{}".format,
                st.sampled_from(["Content-Usage", "Content-Signal", "content signal"]),
                st.sampled_from(["", "/", "/x", "/*a$", "/%", "/\t"]),
                st.text(max_size=40),
            ),
        ),
        max_size=12,
    ),
    st.sampled_from(["/", "/x/1", "/a", "/%zz", "/*", "https://e.test/a?b"]),
)
def test_usage_never_raises_and_answers_known_purposes(lines: list[str], url: str) -> None:
    """Any body: usage() answers {purpose: bool} for known purposes, {} where the
    URL is disallowed, and decide_usage() agrees with it."""
    robots = RobotsTxt.parse("\n".join(lines))
    for agent in (BOT, "Other"):
        found = robots.usage(url, user_agent=agent)
        assert set(found) <= set(PURPOSES)
        assert all(isinstance(value, bool) for value in found.values())
        if not robots.allowed(url, user_agent=agent):
            assert found == {}
        decided = robots.decide_usage(url, user_agent=agent)
        assert {purpose: d.allowed for purpose, d in decided.items()} == found
        assert all(d.lines for d in decided.values())


# -- W3C TDMRep --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", False),
        ("0", True),
        (" 1 ", False),
        ("2", None),
        ("", None),
        ("yes", None),
        ("01", None),
    ],
)
def test_tdmrep_reservation_values(value: str, expected: bool | None) -> None:
    """TDMRep: 1 reserves the rights (not allowed), 0 does not; anything else is a
    protocol error, read as unset."""
    assert tdm_value(value) is expected


def test_tdmrep_json_first_matching_rule_in_array_order() -> None:
    """TDMRep §3.2: "the most specific match is the first in sequence": array order,
    not length; '*' and '$' as in robots.txt; case-sensitive."""
    rules, problem = TdmRep.parse(
        b'[{"location": "/a/*.pdf$", "tdm-reservation": 0},'
        b' {"location": "/a/", "tdm-reservation": 1},'
        b' {"location": "/a/b/", "tdm-reservation": 0},'
        b' {"location": "/A/", "tdm-reservation": "0"}]'
    )
    assert rules is not None
    assert problem == ""
    assert rules.decide("/a/x.pdf") == (
        True,
        "tdmrep.json rule 1 (location /a/*.pdf$): tdm-reservation 0",
    )
    assert rules.decide("https://e.test/a/b/c") == (
        False,
        "tdmrep.json rule 2 (location /a/): tdm-reservation 1",
    )
    assert rules.decide("/A/x") == (True, "tdmrep.json rule 4 (location /A/): tdm-reservation 0")
    assert rules.decide("/z") is None


@pytest.mark.parametrize(
    ("body", "rules"),
    [
        (b'[{"location": "/", "tdm-reservation": true}]', 0),  # a JSON boolean is not 1
        (b'[{"location": "/", "tdm-reservation": 2}]', 0),
        (b'[{"tdm-reservation": 1}]', 0),
        (b'[{"location": 5, "tdm-reservation": 1}, 7, "x", null]', 0),
        (b'[{"location": "/", "tdm-reservation": 1, "tdm-policy": "https://p.test/"}]', 1),
        (b"[]", 0),
    ],
)
def test_tdmrep_json_rules_without_usable_fields_are_skipped(body: bytes, rules: int) -> None:
    """TDMRep: location and tdm-reservation are mandatory; an unusable rule is skipped."""
    parsed, _ = TdmRep.parse(body)
    assert parsed is not None
    assert len(parsed) == rules


@pytest.mark.parametrize(
    "body", [b"{}", b"[", b"\xff\xfe", b"[" * 100_000, b"null", b'"x"', b"", "[]".encode("utf-16")]
)
def test_tdmrep_json_unusable_files_never_raise(body: bytes) -> None:
    """Whatever the bytes: no rules, and why (or none when UTF-16 JSON is fine)."""
    parsed, problem = TdmRep.parse(body)
    assert (parsed is None) == bool(problem)


def test_tdmrep_json_keeps_at_most_max_tdmrep_rules() -> None:
    """Bounded: rules past MAX_TDMREP_RULES are ignored and said so (cut)."""
    items = ",".join(
        f'{{"location": "/p{i}$", "tdm-reservation": 1}}' for i in range(MAX_TDMREP_RULES + 5)
    )
    parsed, _ = TdmRep.parse(f"[{items}]".encode())
    assert parsed is not None
    assert len(parsed) == MAX_TDMREP_RULES
    assert parsed.cut
    assert parsed.decide(f"/p{MAX_TDMREP_RULES + 1}") is None


def tdm_statements(
    rule: tuple[bool, str] | None, header: list[str], meta: list[str]
) -> list[Statement]:
    return response_statements(
        headers={"tdm-reservation": header},
        meta_tags=[("tdm-reservation", value) for value in meta],
        directives=[],
        image=False,
        tdmrep_rule=rule,
        tdmrep=True,
    )


def test_tdmrep_precedence_file_then_header_then_meta_absence_never_resets() -> None:
    """TDMRep §3: a later technique supersedes an earlier one (file < header < HTML
    meta); a technique that says nothing leaves the value as it was."""
    from_file = (False, "tdmrep.json rule 1 (location /): tdm-reservation 1")
    [only_file] = tdm_statements(from_file, [], [])
    assert only_file.said == {"train-ai": False, "ai-input": False}
    [header] = tdm_statements(from_file, ["0"], [])
    assert header.said == {"train-ai": True, "ai-input": True}
    assert header.where == "tdm-reservation header: 0"
    [meta] = tdm_statements(from_file, ["0"], ["1"])
    assert meta.said["train-ai"] is False
    assert meta.where == '<meta name="tdm-reservation" content="1">'
    [kept] = tdm_statements(from_file, ["bogus"], [])
    assert kept == only_file
    assert tdm_statements(None, [], []) == []


def test_tdmrep_says_nothing_when_not_read() -> None:
    """A crawl for search alone does not read TDMRep (tdmrep=False)."""
    found = response_statements(
        headers={"tdm-reservation": ["1"]}, meta_tags=[], directives=[], image=False,
        tdmrep_rule=None, tdmrep=False,
    )  # fmt: skip
    assert found == []


# -- noai / noimageai (DeviantArt's convention) ---------------------------------------------


def test_noai_in_meta_and_bot_scoped_header() -> None:
    """noai and noimageai are read by the page-directive tokenizer: in <meta> content
    and X-Robots-Tag, with the header's botname: scopes."""
    assert parse_rules("noindex, noai").noai
    assert parse_rules("NOIMAGEAI").noimageai
    assert parse_header("examplebot: noai", user_agent="ExampleBot").noai
    assert not parse_header("otherbot: noai", user_agent="ExampleBot").noai
    assert parse_header("noimageai, otherbot: noindex", user_agent="ExampleBot").noimageai


@pytest.mark.parametrize(("noai", "noimageai", "image", "denied"), [
    (True, False, False, True),
    (False, True, False, False),  # noimageai on a page speaks of its images only
    (False, True, True, True),
    (False, False, True, False),
])  # fmt: skip
def test_noai_denies_training_and_ai_input_noimageai_only_on_images(
    noai: bool, noimageai: bool, image: bool, denied: bool
) -> None:
    found = response_statements(
        headers={}, meta_tags=[], directives=[("X-Robots-Tag", noai, noimageai)], image=image,
        tdmrep_rule=None, tdmrep=False,
    )  # fmt: skip
    if denied:
        [statement] = found
        assert statement.said == {"train-ai": False, "ai-input": False}
        assert statement.source == "noai"
    else:
        assert found == []


# -- headers -------------------------------------------------------------------------------------


def test_content_usage_header_lines_combine_into_one_dictionary() -> None:
    """RFC 9651 §4.2: several field lines are one comma-joined value, so a later
    line's key overrides an earlier line's (the last duplicate wins)."""
    [statement] = response_statements(
        headers={"content-usage": ["train-ai=n", "train-ai=y, search=n"]},
        meta_tags=[], directives=[], image=False, tdmrep_rule=None, tdmrep=False,
    )  # fmt: skip
    assert statement.said == {"train-ai": True, "search": False}
    assert statement.where == "Content-Usage header: train-ai=n, train-ai=y, search=n"


def test_header_values_past_the_bound_state_nothing() -> None:
    """A header value longer than MAX_FIELD is not read."""
    big = "train-ai=n, " + "x=1, " * MAX_FIELD
    assert content_usage(big) == {}
    assert content_signal(big.replace("train-ai=n", "ai-train=no")) == {}


# -- the mapping table of docs/usage.md is the data ---------------------------------------


def test_docs_mapping_table_is_the_data_of_usage_labels() -> None:
    """docs/usage.md's mapping table lists every row of scrapy_rep.robotstxt._usage_labels,
    with the same purposes and source, and nothing else."""
    from pathlib import Path

    from scrapy_rep.robotstxt import _usage_labels as labels

    mechanisms = {
        "Content-Usage": labels.CONTENT_USAGE,
        "Content-Signal": labels.CONTENT_SIGNAL,
        "TDMRep": (labels.TDMREP,),
        "robots meta / X-Robots-Tag": labels.ROBOTS_DIRECTIVES,
    }
    expected = [
        (mechanism, f"`{row.label}`", ", ".join(row.purposes) or "(not read)", row.source)
        for mechanism, rows in mechanisms.items()
        for row in rows
    ]
    page = (Path(__file__).parent.parent / "docs" / "usage.md").read_text(encoding="utf-8")
    table = page.split("### The mapping table", 1)[1].split("\n\n| mechanism |", 1)[1]
    rows = [line for line in table.split("\n\n", 1)[0].splitlines()[2:]]
    found = [tuple(cell.strip() for cell in row.strip("|").split("|")) for row in rows]
    assert found == expected


def test_ours_content_signal_before_the_groups_is_read_in_their_last_4_kib() -> None:
    """ours: the text before the first group is not kept, so that parsing costs what
    it did; only its last 4 KiB are, when they mention "signal": a Content-Signal
    line there counts (with its line number), one above 4 KiB of comments does not."""
    comments = "# " + "x" * 60 + "\n"
    near = comments * 200 + "Content-Signal: ai-train=no\n\nUser-agent: *\nAllow: /\n"
    decided = RobotsTxt.parse(near).decide_usage("/", user_agent=BOT)
    assert decided["train-ai"].lines == (UsageLine(201, "Content-Signal: ai-train=no"),)
    far = "Content-Signal: ai-train=no\n" + comments * 70 + "User-agent: *\nAllow: /\n"
    assert usage(far) == {}
    assert usage("CONTENT-SIGNAL: AI-TRAIN=NO\n" + comments * 10 + "User-agent: *\n") == {
        "train-ai": False
    }
