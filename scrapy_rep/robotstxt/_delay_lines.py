"""Crawl-delay and Request-rate: which lines apply to a user agent, and the
most cautious of them (docs/parser.md, "Delays", states the rule).

Google's parser ignores both lines, so they end no group of rules; each
belongs to the nearest *run* of user-agent lines above it (a run ends at the
first Allow, Disallow, delay or usage line), and an agent reads those of the
runs that name its token, else of those that name "*".
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Final

from scrapy_rep.robotstxt import _lines
from scrapy_rep.robotstxt._groups import Groups, agent_token

_DELAY = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_RATE = re.compile(r"(\d+)\s*/\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)(?![A-Za-z])", re.I)
# A request count of more digits is no rate anyone asks for: unusable, as an
# infinite Crawl-delay is (and int() refuses strings of over 4,300 digits).
_MAX_COUNT_DIGITS = 18
_RATE_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DELAY_KINDS = frozenset((_lines.CRAWL_DELAY, _lines.REQUEST_RATE))
# The lines that end a run (Allow and Disallow lines end the group as well).
_RUN_ENDS = frozenset(
    {_lines.CRAWL_DELAY, _lines.REQUEST_RATE, _lines.CONTENT_USAGE, _lines.CONTENT_SIGNAL}
)
# The lines that make runs and belong to them, each checked with parse_line().
_RUN_LINE = re.compile(
    rf"\n[ \t\v\f]*(?:{_lines.USER_AGENT_KEY}|{_lines.CRAWL_DELAY_KEY}"
    rf"|{_lines.REQUEST_RATE_KEY}|{_lines.CONTENT_USAGE_KEY}|{_lines.CONTENT_SIGNAL_KEY})[^\n]*"
)


class AgentDelays:
    """The Crawl-delay and Request-rate that apply to one agent, and where the
    deciding lines start in the groups' text (-1: none)."""

    __slots__ = ("crawl_delay", "crawl_delay_at", "request_rate", "request_rate_at")

    def __init__(self) -> None:
        self.crawl_delay: float | None = None
        self.crawl_delay_at = -1
        self.request_rate: tuple[int, float] | None = None
        self.request_rate_at = -1


NO_DELAYS: Final = AgentDelays()


def parse_delay(value: str) -> float | None:
    """Seconds of a Crawl-delay value, or None when it is no usable number."""
    if not _DELAY.fullmatch(value):
        return None  # non-numeric, negative, NaN and inf all end here
    delay = float(value)
    return delay if math.isfinite(delay) else None


def parse_rate(value: str) -> tuple[int, float] | None:
    """``(requests, seconds)`` of a Request-rate value, or None when unusable."""
    match = _RATE.match(value)
    if match is None:
        return None
    count = match[1].lstrip("0")
    if len(count) > _MAX_COUNT_DIGITS:
        return None
    requests = int(count or "0")
    # casefold(): re.I also lets in the long s (U+017F), which lower() keeps as it is.
    unit = _RATE_UNITS.get(match[3].casefold())
    if unit is None:
        return None
    seconds = float(match[2]) * unit
    if requests <= 0 or not seconds > 0 or not math.isfinite(seconds):
        return None
    return requests, seconds


def read_delays(groups: Groups, indexes: list[int], token: str) -> AgentDelays:
    """The delays for ``token`` (the agent's, or "*" when no group names it) from
    the groups ``indexes``, in file order."""
    delays = AgentDelays()
    most = 0.0  # the largest seconds per request of a Request-rate so far
    for index in indexes:
        for kind, value, offset in lines_of_runs_naming(groups, index, token, _DELAY_KINDS):
            if kind == _lines.CRAWL_DELAY:
                seconds = parse_delay(value)
                if seconds is not None and (
                    delays.crawl_delay is None or seconds > delays.crawl_delay
                ):
                    delays.crawl_delay, delays.crawl_delay_at = seconds, offset
            else:
                rate = parse_rate(value)
                if rate is not None and (delays.request_rate is None or rate[1] / rate[0] > most):
                    delays.request_rate, delays.request_rate_at = rate, offset
                    most = rate[1] / rate[0]
    return delays


def lines_of_runs_naming(
    groups: Groups, index: int, token: str, kinds: frozenset[int]
) -> Iterator[tuple[int, str, int]]:
    """``(kind, value, offset)`` of each line of one of ``kinds`` (delay or usage
    lines) in group ``index`` whose run names ``token``."""
    text, bounds = groups.text, groups.bounds
    in_run = names = False
    for match in _RUN_LINE.finditer(text, bounds[index], bounds[index + 1]):
        parsed = _lines.parse_line(match.group()[1:])
        if parsed is None:
            continue
        kind, value = parsed
        if kind == _lines.USER_AGENT:
            if not in_run:  # the first of a run
                in_run, names = True, False
            names = names or agent_token(value) == token
        elif kind in _RUN_ENDS:
            in_run = False
            if names and kind in kinds:
                yield kind, value, match.start() + 1


def delay_line(groups: Groups, offset: int) -> tuple[int, str]:
    """Line number and text ("Crawl-delay: 10") of the delay line at ``offset``."""
    text = groups.text
    end = text.find("\n", offset)
    parsed = _lines.parse_line(text[offset : len(text) if end < 0 else end])
    kind, value = parsed if parsed is not None else (_lines.OTHER, "")  # (read as a delay line)
    return groups.line_number(offset), f"{_lines.KEY_NAMES.get(kind, '?')}: {value}"
