"""Finding the groups of a robots.txt body (all :meth:`RobotsTxt.parse` does):
its text, the user agents each group names, where its lines are, the Sitemap lines.

As in Google's reference parser, a user-agent line that follows an Allow or
Disallow line starts a new group; no other line ends one. The text before the
first group is not kept, but for its last 4 KiB when they mention "signal":
Content-Signal lines there apply to every agent (:mod:`scrapy_rep.usage`).
"""

from __future__ import annotations

import re
import sys
from array import array
from urllib.parse import urljoin

from scrapy_rep.robotstxt import _lines

GLOBAL = "*"
_TOKEN = re.compile(r"[A-Za-z_-]*")
_BOM = b"\xef\xbb\xbf"

# What find_groups() keeps, found in one scan: each user-agent line (its key,
# whether a colon follows, the token it names: "*" or a leading [A-Za-z_-] run),
# each sitemap line, and each rule line (whether a colon follows its key). After
# a rule line the scan jumps to the next user-agent or sitemap line.
_GROUP_LINE = re.compile(
    rf"\n[ \t\v\f]*(?:(?P<agent_key>{_lines.USER_AGENT_KEY})[^:#\n]*(?P<agent_colon>:?)[ \t\v\f]*"
    rf"(?:(?P<star>\*)(?![^ \t\v\f#\n])|(?P<token>[A-Za-z_-]*))[^#\n]*"
    rf"|(?P<sitemap>{_lines.SITEMAP_KEY})[^\n]*"
    rf"|(?:{_lines.RULE_KEY})[^:#\n]*(?P<rule_colon>:?)[^\n]*)"
)
_NEXT_HEAD = re.compile(rf"\n[ \t\v\f]*(?:{_lines.USER_AGENT_KEY}|{_lines.SITEMAP_KEY})")
PREAMBLE_KEPT = 4096
"""Characters before the first group looked at for Content-Signal lines."""


class Groups:
    """The groups of one body: group ``i`` is ``text[bounds[i]:bounds[i + 1]]``,
    from the "\\n" before its first line, and names the tokens ``agents[i]``."""

    __slots__ = ("agents", "bounds", "first_line", "preamble", "preamble_line", "text")

    def __init__(
        self,
        text: str,
        bounds: array[int],
        agents: list[tuple[str, ...]],
        first_line: int,
        preamble: str = "",
        preamble_line: int = 0,
    ) -> None:
        self.text = text  # from the first group on
        self.bounds = bounds
        self.agents = agents
        self.first_line = first_line  # the line number of the first group's first line
        # The lines before the first group that may hold Content-Signal lines
        # (from a "\n", or ""), and the number of the first of them.
        self.preamble = preamble
        self.preamble_line = preamble_line

    def line_number(self, offset: int) -> int:
        """The 1-based line number of the line that starts at ``text[offset]``."""
        return self.first_line + self.text.count("\n", 1, offset)


NO_GROUPS = Groups("", array("q"), [], 1)


def body_text(body: bytes | str, max_size: int) -> tuple[str, bool]:
    """The text of a body's first ``max_size`` bytes, without a line cut there,
    with one "\\n" in front and every line end folded to "\\n"; and whether
    the body was longer."""
    data = _to_bytes(body)
    truncated = len(data) > max_size
    if truncated:
        data = _cut(data, max_size)
    if data.startswith(b"\xef"):  # Google skips a UTF-8 BOM, even a partial one
        for size in (3, 2, 1):
            if data.startswith(_BOM[:size]):
                data = data[size:]
                break
    text = data.decode("utf-8", "surrogateescape")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "\n" + text, truncated


def parsed_bytes(body: bytes | str, max_size: int) -> bytes:
    """The bytes of ``body`` that :func:`body_text` reads: all of them, or the
    first ``max_size`` without a line cut there. Parsed again with the same
    ``max_size``, they give the same rules (the evidence archive's ``parsed_sha256``)."""
    data = _to_bytes(body)
    return _cut(data, max_size) if len(data) > max_size else data


def _to_bytes(body: bytes | str) -> bytes:
    if isinstance(body, str):
        try:
            return body.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return body.encode("utf-8", "surrogatepass")
    return bytes(body)


def _cut(data: bytes, max_size: int) -> bytes:
    """The first ``max_size`` bytes, without a last line that was cut short."""
    if data[max_size : max_size + 1] in (b"\n", b"\r"):
        return data[:max_size]
    head = data[:max_size]
    return head[: max(head.rfind(b"\n"), head.rfind(b"\r")) + 1]


def agent_token(value: str) -> str:
    """The token a User-agent line names: "*" or its leading [A-Za-z_-] run."""
    if value[:1] == GLOBAL and value[1:2] in ("", " ", "\t", "\v", "\f"):
        return GLOBAL
    return _TOKEN.match(value).group().lower()  # type: ignore[union-attr]  # matches any text


def find_groups(text: str) -> tuple[Groups, list[str]]:
    """The groups of ``text`` (from :func:`body_text`), and the sitemap lines met on the way."""
    bounds: list[int] = []  # where each group starts (the "\n" before its first line)
    agents: list[dict[str, None]] = []  # each group's tokens, in order
    sitemap_lines: list[str] = []
    rule_seen = False  # since the last user-agent line
    position = 0
    while (match := _GROUP_LINE.search(text, position)) is not None:
        start, position = match.span()
        if match["sitemap"]:
            sitemap_lines.append(match.group()[1:])
            continue
        if match["agent_key"] is None:  # a rule line: its group goes on up to the next head line
            head = _NEXT_HEAD.search(text, position)
            position = len(text) if head is None else head.start()
            if not rule_seen:
                rule_seen = bool(
                    match["rule_colon"] and match.start("rule_colon") - start <= _lines.LONG_LINE
                ) or _has_rule(text, start, position)
            continue
        if match["agent_colon"] and position - start <= _lines.LONG_LINE:
            token = match["star"] or match["token"].lower()
        else:  # no colon (maybe a two-word line) or a line Google would cut
            parsed = _lines.parse_line(match.group()[1:])
            if parsed is None or parsed[0] != _lines.USER_AGENT:
                continue
            token = agent_token(parsed[1])
        if rule_seen or not bounds:
            bounds.append(start)
            agents.append({})
            rule_seen = False
        if token:
            agents[-1].setdefault(sys.intern(token))
    base = bounds[0] if bounds else len(text)
    preamble, preamble_line = _preamble(text, base) if base > 1 else ("", 0)
    if not bounds:
        if preamble:
            return Groups("", array("q"), [], 1, preamble, preamble_line), sitemap_lines
        return NO_GROUPS, sitemap_lines
    # Keep only the text from the first group on, offsets shifted to match.
    bounds.append(len(text))
    groups = Groups(
        text[base:],
        array("q", [bound - base for bound in bounds]),
        list(map(tuple, agents)),
        text.count("\n", 0, base + 1),
        preamble,
        preamble_line,
    )
    return groups, sitemap_lines


def _preamble(text: str, base: int) -> tuple[str, int]:
    """The last whole lines before the first group (at most PREAMBLE_KEPT
    characters, from a "\\n") if they mention "signal" in any case, and the
    number of the first; else ("", 0). A cheap test: most files have none."""
    cut = 0
    if base > PREAMBLE_KEPT:
        cut = text.find("\n", base - PREAMBLE_KEPT, base)
        if cut < 0:
            return "", 0
    kept = text[cut:base]
    if "signal" not in kept.lower():
        return "", 0
    return kept, text.count("\n", 0, cut + 1)


def _has_rule(text: str, start: int, end: int) -> bool:
    """Whether an Allow/Disallow line lies in ``text[start:end]``."""
    for match in _lines.RULE_LINE.finditer(text, start, end):
        parsed = _lines.parse_line(match.group()[1:])
        if parsed is not None and parsed[0] in (_lines.ALLOW, _lines.DISALLOW):
            return True
    return False


# Invalid UTF-8 in a body reads as lone surrogates (surrogateescape), which no URL can hold.
_SURROGATES = re.compile("[\ud800-\udfff]+")


def _percent_encode(run: re.Match[str]) -> str:
    """A run of lone surrogates as the percent-escapes of the bytes they stand for."""
    octets = bytearray()
    for char in run[0]:
        try:
            octets += char.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a str body's own lone surrogate, not an undecodable byte
            octets += char.encode("utf-8", "surrogatepass")
    return "%" + octets.hex("%").upper()


def sitemaps(lines: list[str], url: str | None) -> tuple[str, ...]:
    """The locations that ``lines`` name, resolved against ``url``, deduplicated; bytes
    that are not UTF-8 percent-encoded as they were."""
    found: dict[str, None] = {}
    for line in lines:
        parsed = _lines.parse_line(line)
        if parsed is None or parsed[0] != _lines.SITEMAP or not parsed[1]:
            continue
        location = _SURROGATES.sub(_percent_encode, parsed[1])
        if url is not None and "://" not in location:
            try:
                location = urljoin(url, location)
            except ValueError:  # e.g. broken IPv6 brackets: no URL to give
                continue
        found[location] = None
    return tuple(found)
