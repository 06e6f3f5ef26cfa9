"""Robots meta tag and X-Robots-Tag directives (Google's robots meta documentation)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapy_rep._page_directives import (
    NO_DIRECTIVES,
    Directives,
    header_directives,
    parse_date,
    parse_header,
    parse_rules,
    robots_meta_tags,
)

# no Scrapy code runs: neither the reactor nor Scrapy's version changes anything
pytestmark = [pytest.mark.reactor_free, pytest.mark.scrapy_free]

UTC = timezone.utc


# -- rules of one tag ------------------------------------------------------------------


def test_no_rules_restrict_nothing() -> None:
    """index, follow and all are the default: they restrict nothing."""
    for content in ("", "index", "follow", "all", "index, follow", "INDEX,FOLLOW"):
        assert parse_rules(content) == NO_DIRECTIVES


@pytest.mark.parametrize(
    ("content", "noindex", "nofollow"),
    [
        ("noindex", True, False),
        ("nofollow", False, True),
        ("noindex,nofollow", True, True),
        ("noindex, follow", True, False),
        ("index,nofollow", False, True),
        ("NoIndex , NOFOLLOW", True, True),
        ("  noindex\t,\n nofollow  ", True, True),
        (",,noindex,,", True, False),
    ],
)
def test_comma_list_case_and_whitespace(content: str, noindex: bool, nofollow: bool) -> None:
    """Rules are a comma-separated list, case-insensitive, whitespace tolerant."""
    rules = parse_rules(content)
    assert (rules.noindex, rules.nofollow) == (noindex, nofollow)


def test_none_means_noindex_nofollow() -> None:
    rules = parse_rules("None")
    assert rules.noindex
    assert rules.nofollow
    assert rules.none
    assert not parse_rules("noindex").none


def test_restriction_wins_over_permission_in_one_tag() -> None:
    """ "noindex, index": the more restrictive rule applies."""
    assert parse_rules("index, noindex, follow, nofollow").none


def test_other_restrictions_are_read() -> None:
    rules = parse_rules("noarchive, nosnippet, noimageindex, notranslate")
    assert rules.noarchive
    assert rules.nosnippet
    assert rules.noimageindex
    assert rules.notranslate
    assert not rules.noindex
    assert not rules.nofollow
    assert parse_rules("nocache").noarchive  # Bing's spelling


def test_unknown_rules_and_display_hints_are_ignored() -> None:
    rules = parse_rules("max-snippet: 20, max-image-preview: large, noodle, nofollow, x: y")
    assert rules == Directives(nofollow=True)


def test_lenient_spaces_or_semicolons_between_rules() -> None:
    """Beyond Google's documentation: "noindex nofollow" and "noindex;nofollow" mean both."""
    assert parse_rules("noindex nofollow").none
    assert parse_rules("noindex;nofollow").none


def test_a_bot_prefix_in_a_meta_tag_is_not_a_scope() -> None:
    """Only X-Robots-Tag has "botname:" scopes; in a meta tag it is an unknown rule."""
    assert parse_rules("otherbot: nofollow") == NO_DIRECTIVES


# -- unavailable_after ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2030-09-21", datetime(2030, 9, 21, tzinfo=UTC)),
        ("2030-09-21T15:00:00Z", datetime(2030, 9, 21, 15, tzinfo=UTC)),
        ("2030-09-21T15:00:00+02:00", datetime(2030, 9, 21, 13, tzinfo=UTC)),
        ("2030-09-21 15:00", datetime(2030, 9, 21, 15, tzinfo=UTC)),
        ("Sat, 21 Sep 2030 15:00:00 GMT", datetime(2030, 9, 21, 15, tzinfo=UTC)),  # RFC 822/1123
        ("21 Sep 2030 15:00:00 PST", datetime(2030, 9, 21, 23, tzinfo=UTC)),  # RFC 822, zone name
        ("Saturday, 21-Sep-30 15:00:00 GMT", datetime(2030, 9, 21, 15, tzinfo=UTC)),  # RFC 850
        ("Sat Sep 21 15:00:00 2030", datetime(2030, 9, 21, 15, tzinfo=UTC)),  # asctime
    ],
)
def test_unavailable_after_date_formats(text: str, expected: datetime) -> None:
    assert parse_date(text) == expected
    assert parse_rules(f"unavailable_after: {text}").unavailable_after == expected


@pytest.mark.parametrize("text", ["", "soon", "2030-13-45", "32 Foo 2030", "Wednesday", "99999"])
def test_bad_dates_are_ignored(text: str) -> None:
    assert parse_date(text) is None
    rules = parse_rules(f"unavailable_after: {text}, nofollow")
    assert rules == Directives(nofollow=True)


def test_comma_inside_a_date_does_not_split_it() -> None:
    """RFC 850 and RFC 822 dates contain a comma after the weekday."""
    rules = parse_header(
        "unavailable_after: Wednesday, 03-Nov-21 15:00:00 GMT, nofollow", user_agent="ExampleBot"
    )
    assert rules.unavailable_after == datetime(2021, 11, 3, 15, tzinfo=UTC)
    assert rules.nofollow


def test_expired_only_once_the_date_is_past() -> None:
    rules = parse_rules("unavailable_after: 2030-01-01T00:00:00Z")
    assert not rules.expired(datetime(2029, 12, 31, 23, 59, tzinfo=UTC))
    assert rules.expired(datetime(2030, 1, 1, tzinfo=UTC))
    assert not NO_DIRECTIVES.expired()


def test_the_earliest_date_wins() -> None:
    rules = parse_rules("unavailable_after: 2031-01-01, unavailable_after: 2030-06-01")
    assert rules.unavailable_after == datetime(2030, 6, 1, tzinfo=UTC)


# -- several tags ----------------------------------------------------------------------


def test_tags_combine_to_the_most_restrictive() -> None:
    tags = [("robots", "noindex, follow"), ("robots", "index, nofollow")]
    combined = NO_DIRECTIVES
    for _, content in tags:
        combined = combined.merge(parse_rules(content))
    assert combined.none


def test_meta_tags_are_picked_by_lowercased_name() -> None:
    """<meta name="robots"> speaks to every crawler, <meta name="EXAMPLEBOT"> to
    ExampleBot alone; names compare case-insensitively, and exactly."""
    html = (
        '<head><meta name="ROBOTS" content="noindex"><meta name=" ExampleBot " '
        'content="nofollow"><meta name="examplebot-news" content="none">'
        '<meta name="otherbot" content="noarchive"></head>'
    )
    mine = robots_meta_tags(html, names={"robots", "examplebot"})
    assert mine == [("robots", "noindex"), ("examplebot", "nofollow")]


def test_merge_keeps_every_restriction() -> None:
    a = Directives(noindex=True, unavailable_after=datetime(2031, 1, 1, tzinfo=UTC))
    b = Directives(nofollow=True, unavailable_after=datetime(2030, 1, 1, tzinfo=UTC))
    assert a.merge(b) == Directives(
        noindex=True, nofollow=True, unavailable_after=datetime(2030, 1, 1, tzinfo=UTC)
    )
    assert a.merge(NO_DIRECTIVES) == a == NO_DIRECTIVES.merge(a)


# -- X-Robots-Tag ----------------------------------------------------------------------


def test_header_without_prefix_applies_to_every_crawler() -> None:
    assert parse_header("noindex, nofollow", user_agent="ExampleBot").none
    assert parse_header("none", user_agent=None).none


def test_header_bot_prefix_applies_only_to_that_bot() -> None:
    value = "examplebot: noindex, otherbot: nofollow"
    assert parse_header(value, user_agent="ExampleBot") == Directives(noindex=True)
    assert parse_header(value, user_agent="OTHERBOT") == Directives(nofollow=True)
    assert parse_header(value, user_agent="ThirdBot") == NO_DIRECTIVES


def test_header_scope_runs_to_the_next_prefix() -> None:
    """ "otherbot: noindex, nofollow": both rules are otherbot's."""
    assert parse_header("otherbot: noindex, nofollow", user_agent="ExampleBot") == NO_DIRECTIVES
    assert parse_header("otherbot: noindex, nofollow", user_agent="otherbot").none


def test_header_rules_before_a_prefix_apply_to_all() -> None:
    rules = parse_header("noarchive, otherbot: noindex", user_agent="ExampleBot")
    assert rules == Directives(noarchive=True)


def test_header_prefix_with_unavailable_after() -> None:
    rules = parse_header(
        "ExampleBot: unavailable_after: Sat, 21 Sep 2030 15:00:00 GMT", user_agent="examplebot"
    )
    assert rules.unavailable_after == datetime(2030, 9, 21, 15, tzinfo=UTC)
    assert parse_header("otherbot: unavailable_after: 2030-01-01", user_agent="examplebot") == (
        NO_DIRECTIVES
    )


def test_header_valued_rules_are_not_bot_names() -> None:
    """max-snippet: 20 is a rule, and an unknown "key: 3" does not hide the rules after it."""
    assert parse_header("max-snippet: 20, nofollow", user_agent="ExampleBot").nofollow
    assert parse_header("max-future-hint: 3, nofollow", user_agent="ExampleBot").nofollow


def test_several_headers_combine() -> None:
    values = ["examplebot: noindex", "otherbot: none", "nofollow"]
    assert header_directives(values, user_agent="examplebot").none
    assert header_directives([], user_agent="examplebot") == NO_DIRECTIVES


# -- finding the tags in HTML ----------------------------------------------------------


def test_meta_tags_in_the_head() -> None:
    html = (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        '<META NAME="Robots" CONTENT="noindex">'
        "<meta name=examplebot content=nofollow>"
        "<meta content='none' name='otherbot'/>"
        "</head><body><p>x</p></body></html>"
    )
    assert robots_meta_tags(html) == [
        ("robots", "noindex"),
        ("examplebot", "nofollow"),
        ("otherbot", "none"),
    ]


def test_meta_tags_in_the_body_comments_or_scripts_do_not_count() -> None:
    html = (
        "<html><head><title>t</title>"
        "<!-- <meta name=robots content=noindex> -->"
        "<script>document.write('<meta name=robots content=nofollow>')</script>"
        "</head><body><meta name=robots content=none></body></html>"
    )
    assert robots_meta_tags(html) == []


def test_meta_tags_without_head_or_with_broken_markup() -> None:
    assert robots_meta_tags("<meta name=robots content=nofollow><p>hi") == [("robots", "nofollow")]
    assert robots_meta_tags('<head><meta name="robots" content="noindex"<title>x') == [
        ("robots", "noindex")
    ]
    assert robots_meta_tags("") == []
    assert robots_meta_tags("<meta") == []
    assert robots_meta_tags("<meta name=robots>") == []  # no content: nothing said
    # lxml refuses str with an XML encoding declaration; we hand it bytes
    assert robots_meta_tags(
        '<?xml version="1.0" encoding="iso-8859-1"?><meta name="robots" content="none">'
    ) == [("robots", "none")]


def test_entities_in_content_are_decoded() -> None:
    assert robots_meta_tags('<meta name="robots" content="noindex&#44;nofollow">') == [
        ("robots", "noindex,nofollow")
    ]


@given(st.text())
def test_never_raises_on_any_text(text: str) -> None:
    for found in robots_meta_tags(text), robots_meta_tags(f"<head><meta {text}>"):
        assert isinstance(found, list)
    assert isinstance(parse_header(text, user_agent="examplebot"), Directives)
    assert isinstance(parse_rules(text), Directives)
    parse_date(text)


def test_future_and_past_relative_to_now() -> None:
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert parse_rules(f"unavailable_after: {past}").expired()
    assert not parse_rules(f"unavailable_after: {future}").expired()


def test_meta_tags_filtered_by_name() -> None:
    html = (
        '<head><meta name="viewport" content="width=device-width">'
        '<meta name="ROBOTS" content="noindex"><meta name="otherbot" content="none"></head>'
    )
    assert robots_meta_tags(html, names={"robots", "examplebot"}) == [("robots", "noindex")]
    assert robots_meta_tags(html, names={"examplebot"}) == []
    assert len(robots_meta_tags(html)) == 3
