"""Conditional requests for robots.txt (RFC 9110 §13), Scrapy-free: what an
entry keeps of a response's validators, what it sends back, what a 304 means;
and how pin files are read."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from scrapy_rep.config import Config
from scrapy_rep.exceptions import InvalidSetting
from scrapy_rep.pins import read_pins, rule_changes, rule_lines
from scrapy_rep.policy import PARSED, UNREACHABLE, Entry, conditional_headers

pytestmark = pytest.mark.reactor_free

POLICY = Config(cache_min_ttl=0).policy
BODY = b"User-agent: *\nDisallow: /private\n"
DATE = "Wed, 21 Oct 2015 07:28:00 GMT"
URL = "https://example.com/robots.txt"


def parsed(**headers: str) -> Entry:
    return POLICY.on_response(
        200,
        BODY,
        url=URL,
        now=1000.0,
        etag=headers.get("etag"),
        last_modified=headers.get("last_modified"),
    )


@pytest.mark.parametrize(
    ("etag", "kept"),
    [
        ('"abc"', '"abc"'),
        ('W/"abc"', 'W/"abc"'),
        (' "abc" ', '"abc"'),
        ("abc", ""),  # not quoted: not an entity-tag
        ('"a"b"', ""),
        ('"a\x01"', ""),
        ('"' + "x" * 300 + '"', ""),  # past MAX_VALIDATOR: never sent back
    ],
)
def test_only_a_valid_bounded_etag_is_kept(etag: str, kept: str) -> None:
    entry = parsed(etag=etag)
    assert entry.etag == kept


def test_last_modified_must_be_an_http_date() -> None:
    assert parsed(last_modified=DATE).last_modified == DATE
    assert parsed(last_modified="yesterday").last_modified == ""


def test_the_etag_is_sent_back_rather_than_the_date_to_the_url_it_came_from() -> None:
    entry = parsed(etag='"v1"', last_modified=DATE)
    assert conditional_headers(entry) == (URL, {b"If-None-Match": b'"v1"'})
    only_date = parsed(last_modified=DATE)
    assert conditional_headers(only_date) == (URL, {b"If-Modified-Since": DATE.encode()})
    assert conditional_headers(parsed()) is None
    assert entry.sha256 == hashlib.sha256(BODY).hexdigest()


def test_a_304_keeps_the_rules_fresh_from_now() -> None:
    before = parsed(etag='"v1"')
    after = POLICY.on_response(
        304,
        b"",
        url=URL,
        now=5000.0,
        previous=before,
        cache_control="max-age=600",
        conditional=True,
    )
    assert after.outcome == PARSED
    assert after.robots is before.robots
    assert (after.fetched, after.expires) == (5000.0, 5600.0)
    assert (after.etag, after.sha256) == ('"v1"', before.sha256)


def test_a_304_without_validators_is_unreachable() -> None:
    before = parsed(etag='"v1"')
    for previous, conditional in ((before, False), (None, True)):
        entry = POLICY.on_response(
            304, b"", url=URL, now=5000.0, previous=previous, conditional=conditional
        )
        assert entry.outcome == UNREACHABLE
        assert entry.robots is None


def test_stale_rules_keep_their_validators() -> None:
    before = parsed(etag='"v1"')
    stale = POLICY.on_error("HTTP 503", now=2000.0, previous=before)
    assert stale.robots is before.robots
    assert conditional_headers(stale) == (URL, {b"If-None-Match": b'"v1"'})


SHA = hashlib.sha256(BODY).hexdigest()


def test_pin_files_in_three_forms(tmp_path: Path) -> None:
    as_json = tmp_path / "pins.json"
    as_json.write_text(json.dumps({"https://Example.com/": SHA.upper()}))
    assert read_pins(str(as_json)) == {"https://example.com": SHA}
    as_tsv = tmp_path / "pins.tsv"
    as_tsv.write_text(f"# pins\nhttp://a.example:8080\t{SHA}\n\nhttps://b.example {SHA}\n")
    assert read_pins(str(as_tsv)) == {"http://a.example:8080": SHA, "https://b.example": SHA}
    evidence = tmp_path / "evidence.jsonl"
    lines = [
        {"origin": "https://a.example", "url": "https://a.example/robots.txt", "sha256": "0" * 64},
        {"origin": "https://a.example", "sha256": "1" * 64, "parsed_sha256": SHA},
        {
            "origin": "https://a.example",
            "url": "https://a.example/.well-known/tdmrep.json",
            "sha256": "2" * 64,
        },
        {"origin": "https://b.example", "sha256": None, "outcome": "unreachable"},
    ]
    evidence.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert read_pins(str(evidence)) == {"https://a.example": SHA}


def test_a_pin_file_without_pins_stops_the_crawl_at_start(tmp_path: Path) -> None:
    empty = tmp_path / "pins.tsv"
    empty.write_text("not a pin\n")
    with pytest.raises(InvalidSetting, match="REP_PIN_FILE"):
        read_pins(str(empty))
    with pytest.raises(InvalidSetting, match="cannot read"):
        read_pins(str(tmp_path / "missing.json"))


def test_rule_changes_count_lines_added_and_removed() -> None:
    old = b"User-agent: *\nDisallow: /a\nAllow: /a/b\n"
    new = b"User-agent: *\ndisallow: /a\nDisallow: /c # new\nDisallow: /d\n"
    assert rule_changes(rule_lines(old), rule_lines(new)) == "+2 Disallow lines, -1 Allow line"
    assert rule_changes(rule_lines(old), rule_lines(old)) == "no rule line changed"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REP_PIN_ACTION", "stop"),
        ("REP_STATE_DIR", 5),
        ("REP_PIN_FILE", ["a"]),
        ("REP_HTTPCACHE_ROBOTSTXT", "sometimes"),
    ],
)
def test_invalid_state_and_pin_settings_stop_the_crawl_at_start(name: str, value: object) -> None:
    with pytest.raises(InvalidSetting, match=name):
        Config.from_settings({name: value})


def test_state_and_pin_settings_are_read(tmp_path: Path) -> None:
    config = Config.from_settings(
        {
            "REP_STATE_DIR": tmp_path,
            "REP_PIN_FILE": str(tmp_path / "pins.json"),
            "REP_PIN_ACTION": "STOP_ORIGIN",
            "REP_HTTPCACHE_ROBOTSTXT": "False",
        }
    )
    assert config.state_dir == str(tmp_path)
    assert config.pin_file == str(tmp_path / "pins.json")
    assert config.pin_action == "stop_origin"
    assert config.httpcache_robotstxt is False
    assert Config.from_settings({}).state_dir is None
