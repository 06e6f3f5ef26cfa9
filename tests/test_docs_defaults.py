"""The README and coming-from-scrapy.md name every default that differs from Scrapy's.

A user moving from Scrapy's middleware reads one list to learn what their crawl will do
differently. Every setting of the reference is either in that list (in the README and in
the table of coming-from-scrapy.md, the same names in both) or below, with the reason
its default changes nothing a crawl with Scrapy's middleware would do.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# no Scrapy code runs: neither the reactor nor Scrapy's version changes anything
pytestmark = [pytest.mark.reactor_free, pytest.mark.scrapy_free]

REPO = Path(__file__).resolve().parents[1]
SETTING = re.compile(r"`(REP_[A-Z0-9_]+)\b")  # a code span that starts with the name

# Settings whose default leaves the crawl as Scrapy's middleware would, and why.
SAME_AS_SCRAPY = {
    "REP_DRY_RUN": "off by default",
    "REP_DEFER_MAX": 'used only with REP_UNREACHABLE = "defer"',
    "REP_PURPOSES": "empty by default: usage preferences are not read",
    "REP_USAGE_ACTION": "used only with REP_PURPOSES",
    "REP_REPORT": "unset by default: no file",
    "REP_EVIDENCE": "unset by default: no archive",
    "REP_EVIDENCE_MAX_FILE_SIZE": "used only with REP_EVIDENCE",
    "REP_EVIDENCE_REQUIRED": "used only with REP_EVIDENCE",
    "REP_PROVENANCE_FIELD": "unset by default: items are left as they are",
    "REP_REDIS_PREFIX": "only shapes the Redis keys of a shared crawl",
    "REP_REDIS_TIMEOUT": "only bounds the Redis calls of a shared crawl",
    "REP_REDIS_RETRY": "only paces reconnecting to Redis in a shared crawl",
    "REP_REDIS_KEEP": "only how long shared state outlives its expiry in Redis",
    "REP_STATE_DIR": "unset by default: nothing kept across crawls",
    "REP_HTTPCACHE_ROBOTSTXT": "True by default: robots.txt goes through HttpCacheMiddleware",
    "REP_PIN_FILE": "unset by default: no pins",
    "REP_PIN_ACTION": "used only with REP_PIN_FILE",
}


def reference_settings() -> set[str]:
    text = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `(REP_[A-Z0-9_]+)` \|", text, re.MULTILINE))


def section(text: str, start: str, end: str) -> str:
    begin = text.index(start)
    return text[begin : text.index(end, begin)]


def coming_from_scrapy_table() -> set[str]:
    text = (REPO / "docs" / "coming-from-scrapy.md").read_text(encoding="utf-8")
    return set(SETTING.findall(section(text, "## Every default that differs", "\n## ")))


def readme_list() -> set[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return set(SETTING.findall(section(text, "Every default\nthat differs", "\n## ")))


def test_the_reference_lists_settings() -> None:
    assert {"REP_SLOWDOWN", "REP_UNREACHABLE", "REP_META_ROBOTS"} <= reference_settings()


def test_coming_from_scrapy_names_every_default_that_differs() -> None:
    missing = reference_settings() - set(SAME_AS_SCRAPY) - coming_from_scrapy_table()
    assert not missing, f"add to coming-from-scrapy.md's table (or SAME_AS_SCRAPY): {missing}"


def test_the_readme_names_the_same_defaults() -> None:
    assert readme_list() == coming_from_scrapy_table()


def test_exempt_settings_exist_and_are_not_listed_as_differing() -> None:
    assert set(SAME_AS_SCRAPY) <= reference_settings()
    assert not set(SAME_AS_SCRAPY) & coming_from_scrapy_table()
