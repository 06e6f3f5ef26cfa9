"""robots.txt lines: splitting a line into key and value, and naming the key,
as Google's reference parser does where RFC 9309 is silent (docs/parser.md).

The whole-text scanners find candidate lines with one regular expression
each, so lines nobody asks about are never handled in Python; every candidate
is then checked with :func:`parse_line`.
"""

from __future__ import annotations

import re

USER_AGENT, ALLOW, DISALLOW, SITEMAP, CRAWL_DELAY, REQUEST_RATE, OTHER = range(7)
# Usage preferences (scrapy_rep.usage): read only when RobotsTxt.usage() asks.
CONTENT_USAGE, CONTENT_SIGNAL = 7, 8
KEY_NAMES = {
    USER_AGENT: "User-agent",
    ALLOW: "Allow",
    DISALLOW: "Disallow",
    SITEMAP: "Sitemap",
    CRAWL_DELAY: "Crawl-delay",
    REQUEST_RATE: "Request-rate",
    CONTENT_USAGE: "Content-Usage",
    CONTENT_SIGNAL: "Content-Signal",
}
"""How each key is written when a line is shown (``scrapy robots``, decisions)."""

MAX_LINE = 16_663  # Google's line buffer keeps this many bytes of a line (UTF-8)
# Lines longer than this many characters may be cut (a character is 1 to 4
# bytes in UTF-8): the quick readings leave them to parse_line().
LONG_LINE = MAX_LINE // 4
_SPACE = " \t\v\f"
_WORD_GAP = re.compile(r"[ \t]+")

_KEYS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (USER_AGENT, ("user-agent", "useragent", "user agent")),
    (ALLOW, ("allow",)),
    (DISALLOW, ("disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw")),
    (SITEMAP, ("sitemap", "site-map")),
    (CRAWL_DELAY, ("crawl-delay", "crawl delay", "crawldelay")),
    (REQUEST_RATE, ("request-rate", "request rate", "requestrate")),
    # AIPREF's literal only; Content-Signal, which no text defines, also in the
    # spellings deployed parsers accept (a key is read by its start: "Content-Signals").
    (CONTENT_USAGE, ("content-usage",)),
    (CONTENT_SIGNAL, ("content-signal", "content signal", "contentsignal")),
)

# Keys by their first four letters, for one lookup instead of a scan (the two
# usage keys share theirs: "cont").
_BY_START: dict[str, tuple[tuple[int, tuple[str, ...]], ...]] = {}
for _kind, _spellings in _KEYS:
    for _spelling in _spellings:
        _start = _spelling[:4]
        _known = dict(_BY_START.get(_start, ()))
        _known[_kind] = (*_known.get(_kind, ()), _spelling)
        _BY_START[_start] = tuple(_known.items())


def any_case(expression: str) -> str:
    """``expression`` with each letter matching in either case. Cheaper than
    re.IGNORECASE, which makes every character of a scan a case-folded compare."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in expression)


# The spellings of _KEYS, one expression per directive (fewer alternatives
# for the scanners to try on every line), in any case.
USER_AGENT_KEY = any_case("user[- ]?agent")
ALLOW_KEY = any_case("allow")
DISALLOW_KEY = any_case("di(?:s(?:s?all?ow|allaw)|asllow)")
SITEMAP_KEY = any_case("site-?map")
CRAWL_DELAY_KEY = any_case("crawl[- ]?delay")
REQUEST_RATE_KEY = any_case("request[- ]?rate")
CONTENT_USAGE_KEY = any_case("content-usage")
CONTENT_SIGNAL_KEY = any_case("content[- ]?signal")
RULE_KEY = f"{ALLOW_KEY}|{DISALLOW_KEY}"
# Scans the text after line ends were folded to "\n" and one "\n" was put in
# front: each match is "\n" followed by a whole Allow/Disallow line.
RULE_LINE = re.compile(rf"\n[ \t\v\f]*(?:{RULE_KEY})[^\n]*")


def key_kind(key: str) -> int:
    """The directive a key names (one of the module constants)."""
    lowered = key.lower()
    for kind, spellings in _BY_START.get(lowered[:4], ()):
        if lowered.startswith(spellings):
            return kind
    return OTHER


def _cut_line(line: str) -> str:
    """The line as Google reads it: its first MAX_LINE bytes in UTF-8."""
    if line.isascii():
        return line[:MAX_LINE]
    octets = line.encode("utf-8", "surrogateescape")
    if len(octets) <= MAX_LINE:
        return line
    return octets[:MAX_LINE].decode("utf-8", "surrogateescape")


def parse_line(line: str) -> tuple[int, str] | None:
    """``(kind, value)`` for a line that holds a directive, else ``None``."""
    if len(line) > LONG_LINE:
        line = _cut_line(line)
    comment = line.find("#")
    if comment >= 0:
        line = line[:comment]
    key, colon, value = line.partition(":")
    if colon:
        key = key.strip(_SPACE)
        value = value.strip(_SPACE)
    else:
        # A forgotten colon: accept "key value", but only as exactly two words.
        line = line.strip(_SPACE)
        gap = _WORD_GAP.search(line)
        if gap is None or "\t" in line[gap.end() :] or " " in line[gap.end() :]:
            return None
        key, value = line[: gap.start()], line[gap.end() :]
    if not key:
        return None
    return key_kind(key), value
