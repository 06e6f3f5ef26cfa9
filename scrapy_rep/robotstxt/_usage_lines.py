"""robots.txt's usage lines: which Content-Usage and Content-Signal lines apply, and say what.

Each line belongs to the run of user-agent lines above it, as delay lines do
(:mod:`._delay_lines`); a Content-Signal line above every group applies to
every agent. How they combine: docs/usage.md. Scrapy-free.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

from scrapy_rep.robotstxt import _lines
from scrapy_rep.robotstxt._delay_lines import lines_of_runs_naming
from scrapy_rep.robotstxt._groups import Groups
from scrapy_rep.robotstxt._match import Matcher, matches
from scrapy_rep.robotstxt._url import normalize_pattern
from scrapy_rep.robotstxt._usage_formats import content_signal, content_usage

_SPACE = " \t"


@dataclass(frozen=True, slots=True)
class UsageLine:
    """A Content-Usage or Content-Signal line of robots.txt."""

    line: int
    """Its 1-based line number."""
    text: str
    """Its key and value, e.g. "Content-Usage: /open/ train-ai=y"."""


@dataclass(frozen=True, slots=True)
class UsageDecision:
    """What robots.txt says about one purpose for one URL, and the lines that say it."""

    allowed: bool
    lines: tuple[UsageLine, ...]


_SIGNAL_LINE = re.compile(rf"\n[ \t\v\f]*{_lines.CONTENT_SIGNAL_KEY}[^\n]*")
_USAGE_KINDS = frozenset((_lines.CONTENT_USAGE, _lines.CONTENT_SIGNAL))


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: str  # normalised; "" for a line without a path
    said: dict[str, bool]
    line: UsageLine


class _Mechanism:
    """The lines of one mechanism that apply to an agent: the longest matching
    path wins, lines of equal length combine (AIPREF attach §3.1)."""

    __slots__ = ("_by_length", "_defaults", "_matcher")

    def __init__(self, rules: list[_Rule]) -> None:
        self._defaults = [rule for rule in rules if not rule.pattern]
        by_length: dict[int, list[_Rule]] = {}
        for rule in rules:
            if rule.pattern:
                by_length.setdefault(len(rule.pattern), []).append(rule)
        self._by_length = by_length
        # Ranked as Disallow rules are: length first, so best() finds the length.
        patterns = [(False, rule.pattern) for rule in rules if rule.pattern]
        self._matcher = Matcher((), patterns) if patterns else None

    def applying(self, path: str) -> list[_Rule]:
        if self._matcher is not None:
            rank = self._matcher.best(path)
            if rank:
                longest = [r for r in self._by_length[rank >> 1] if matches(r.pattern, path)]
                if longest:
                    return longest
        return self._defaults


class AgentUsage:
    """The usage lines that apply to one agent, by mechanism."""

    __slots__ = ("_mechanisms",)

    def __init__(self, usage: list[_Rule], signal: list[_Rule]) -> None:
        self._mechanisms = tuple(_Mechanism(rules) for rules in (usage, signal) if rules)

    def decide(self, path: str) -> dict[str, UsageDecision]:
        """What the lines say about a normalised path, per purpose: within a
        mechanism the applying lines combine, and across the two any "no" wins."""
        found: dict[str, tuple[bool, list[UsageLine]]] = {}
        for mechanism in self._mechanisms:
            for rule in mechanism.applying(path):
                for purpose, allowed in rule.said.items():
                    known = found.get(purpose)
                    if known is None or (known[0] and not allowed):
                        found[purpose] = (allowed, [rule.line])
                    elif known[0] == allowed:
                        known[1].append(rule.line)
        return {
            purpose: UsageDecision(allowed, tuple(sorted(lines, key=attrgetter("line"))))
            for purpose, (allowed, lines) in found.items()
        }


NO_USAGE: Final = AgentUsage([], [])


def read_usage(groups: Groups, indexes: Sequence[int], token: str) -> AgentUsage:
    """The usage lines of the runs of groups ``indexes`` that name ``token`` (the
    agent's own, or "*" when no group names it), and the Content-Signal lines
    above every group."""
    readers = {_lines.CONTENT_USAGE: content_usage, _lines.CONTENT_SIGNAL: content_signal}
    usage: list[_Rule] = []
    signal: list[_Rule] = []
    preamble = groups.preamble
    number, counted = groups.preamble_line - 1, 0
    for match in _SIGNAL_LINE.finditer(preamble):
        parsed = _lines.parse_line(match.group()[1:])
        if parsed is not None and parsed[0] == _lines.CONTENT_SIGNAL:
            number += preamble.count("\n", counted, match.start() + 1)
            counted = match.start() + 1
            signal.append(_rule(_lines.CONTENT_SIGNAL, parsed[1], number, content_signal))
    number, counted = groups.first_line - 1, 0
    text = groups.text
    for index in indexes:
        for kind, value, offset in lines_of_runs_naming(groups, index, token, _USAGE_KINDS):
            number += text.count("\n", counted, offset)
            counted = offset
            rule = _rule(kind, value, number, readers[kind])
            (usage if kind == _lines.CONTENT_USAGE else signal).append(rule)
    if not usage and not signal:
        return NO_USAGE
    return AgentUsage(usage, signal)


def _rule(kind: int, value: str, number: int, read: Callable[[str], dict[str, bool]]) -> _Rule:
    """One line's rule: its path (a value starting with "/" starts with a path,
    ended by the first space or tab) and its statement."""
    pattern, statement = "", value
    if value.startswith("/"):
        end = len(value)
        for space in _SPACE:
            at = value.find(space)
            if 0 <= at < end:
                end = at
        pattern, statement = normalize_pattern(value[:end]), value[end:]
    return _Rule(pattern, read(statement), UsageLine(number, f"{_lines.KEY_NAMES[kind]}: {value}"))
