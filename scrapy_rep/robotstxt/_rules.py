"""What applies to one user agent: its groups' rules indexed for matching, its
delays, and (to explain a decision) the line a rule came from. RFC 9309
§2.2.1: the groups naming the agent's token apply, combined; else those
naming "*"; else no rule.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from scrapy_rep.robotstxt import _lines
from scrapy_rep.robotstxt._delay_lines import NO_DELAYS, AgentDelays, read_delays
from scrapy_rep.robotstxt._groups import GLOBAL, Groups
from scrapy_rep.robotstxt._match import NO_PATTERNS, Matcher
from scrapy_rep.robotstxt._url import (
    PLAIN_IN_PATH,
    decode_reserved,
    has_bare_percent,
    normalize_pattern,
)

if TYPE_CHECKING:
    from scrapy_rep.robotstxt._usage_lines import AgentUsage

_KIND_NAMES = {True: _lines.KEY_NAMES[_lines.ALLOW], False: _lines.KEY_NAMES[_lines.DISALLOW]}
_SPACE = " \t\v\f"

# A group's rule and delay lines, read in one pass: the line up to its
# comment, the key, whether a colon follows, and the value as a plain prefix
# (most rules), a pattern normalising leaves as it is, or anything else.
_PLAIN_CHARS = re.escape(PLAIN_IN_PATH.decode().replace("#", ""))
_DIRECTIVE = re.compile(
    rf"\n(?P<line>[ \t\v\f]*(?:(?P<allow>{_lines.ALLOW_KEY})|(?P<disallow>{_lines.DISALLOW_KEY})"
    rf"|(?P<crawl_delay>{_lines.CRAWL_DELAY_KEY})|{_lines.REQUEST_RATE_KEY})"
    rf"[^:#\n]*(?P<colon>:?)[ \t\v\f]*"
    rf"(?:(?P<prefix>[{_PLAIN_CHARS}]*)[ \t\v\f]*(?=#|$)"
    rf"|(?P<pattern>[{_PLAIN_CHARS}*]*\$?)[ \t\v\f]*(?=#|$)"
    r"|(?P<value>[^#\n]*)))",
    re.MULTILINE,
)
# findall()'s tuple order (cheaper than a match object per line), checked here
# so that the unpacking below cannot drift from the expression.
_DIRECTIVE_PARTS = (
    "line", "allow", "disallow", "crawl_delay", "colon", "prefix", "pattern", "value"
)  # fmt: skip
if tuple(_DIRECTIVE.groupindex) != _DIRECTIVE_PARTS:  # pragma: no cover
    raise AssertionError(f"_DIRECTIVE groups are {tuple(_DIRECTIVE.groupindex)}")


class AgentRules:
    """What applies to one user agent: its rules, delays and the groups used,
    and what explaining its decisions learnt about where its rules are written."""

    __slots__ = (
        "agents",
        "bare",
        "delay_lines",
        "delays",
        "escaped",
        "explained",
        "groups",
        "matcher",
        "rule_offsets",
        "usage",
    )

    def __init__(
        self,
        agents: tuple[str, ...],
        matcher: Matcher | None,
        delays: AgentDelays = NO_DELAYS,
        groups: tuple[int, ...] = (),
        escaped: Matcher | None = None,
        bare: frozenset[str] | None = None,
    ) -> None:
        self.agents = agents  # user-agent tokens of the groups read
        self.groups = groups  # indexes of the groups read
        self.matcher = matcher
        # For second_reading(): the rules it reads otherwise, as it reads them,
        # and the patterns of those with a bare '%' (None when there are none).
        self.escaped = escaped
        self.bare = bare
        self.delays = delays
        # RobotsTxt.delays(), built on its first call (line numbers cost a scan).
        self.delay_lines: Any = None
        # For rule_line(), built on its first call: where the first rule line of
        # each pattern starts ([Disallow, Allow]), and the answers given.
        self.rule_offsets: tuple[dict[str, int], dict[str, int]] | None = None
        self.explained: dict[tuple[str, bool], tuple[int | None, str]] | None = None
        # Content-Usage / Content-Signal lines, read on the first RobotsTxt.usage() call.
        self.usage: AgentUsage | None = None


ALLOW_ALL: Final = AgentRules((), None)
DISALLOW_ALL: Final = AgentRules((), Matcher([("", "/")]))


def read_rules(groups: Groups, user_agent: str) -> AgentRules:
    """Read and index the groups that apply to ``user_agent``."""
    token = user_agent.lower()
    chosen = [index for index, tokens in enumerate(groups.agents) if token in tokens]
    if not chosen:
        token = GLOBAL
        chosen = [index for index, tokens in enumerate(groups.agents) if token in tokens]
    prefixes: list[tuple[str, str]] = []  # (Allow key or "", plain prefix)
    patterns: list[tuple[bool, str]] = []  # (allow, any other normalised pattern)
    with_escapes: list[tuple[bool, str]] = []  # those of them with a '%'
    with_delays: list[int] = []  # the groups with a Crawl-delay or Request-rate line
    text, bounds = groups.text, groups.bounds
    for index in chosen:
        for line, allow, disallow, crawl_delay, colon, prefix, pattern, value in _DIRECTIVE.findall(
            text, bounds[index], bounds[index + 1]
        ):
            if colon and len(line) <= _lines.LONG_LINE:
                if prefix and (allow or disallow):  # "Disallow: /path", the common case
                    prefixes.append((allow, prefix))
                    continue
                kind = (
                    _lines.ALLOW
                    if allow
                    else _lines.DISALLOW
                    if disallow
                    else _lines.CRAWL_DELAY
                    if crawl_delay
                    else _lines.REQUEST_RATE
                )
                value = prefix or pattern or value.rstrip(_SPACE)  # (the one that matched)
            else:  # no colon (maybe a two-word line) or a line Google would cut
                parsed = _lines.parse_line(line)
                if parsed is None:
                    continue
                kind, value = parsed
                pattern = ""
            if kind == _lines.ALLOW or kind == _lines.DISALLOW:
                if pattern:  # plain characters, '*' and '$': no '%'
                    patterns.append((kind == _lines.ALLOW, pattern))
                elif value:  # (an empty value is no rule)
                    rule = (kind == _lines.ALLOW, normalize_pattern(value))
                    patterns.append(rule)
                    if "%" in rule[1]:
                        with_escapes.append(rule)
            elif kind in (_lines.CRAWL_DELAY, _lines.REQUEST_RATE) and (
                not with_delays or with_delays[-1] != index
            ):
                with_delays.append(index)
    if len(chosen) == 1:
        agents = groups.agents[chosen[0]]
    else:
        agents = tuple(dict.fromkeys(agent for index in chosen for agent in groups.agents[index]))
    return AgentRules(
        agents,
        Matcher(prefixes, patterns) if prefixes or patterns else None,
        read_delays(groups, with_delays, token) if with_delays else NO_DELAYS,
        tuple(chosen),
        *_read_second_way(with_escapes),
    )


def _read_second_way(
    patterns: list[tuple[bool, str]],
) -> tuple[Matcher | None, frozenset[str] | None]:
    """Of the rules whose pattern holds a '%': a matcher of those the second
    reading reads otherwise, ranked by their length in the first; and the
    patterns of those that hold a bare '%'."""
    escaped = []  # (rank, pattern read the second way, pattern read the first way)
    for allow, pattern in patterns:
        decoded = decode_reserved(pattern)
        if decoded != pattern:
            escaped.append(((len(pattern) << 1) | allow, decoded, pattern))
    if not escaped:
        return None, None
    bare = frozenset(pattern for _, _, pattern in escaped if has_bare_percent(pattern))
    return Matcher.ranked(escaped), bare or None


class Reading(NamedTuple):
    """What decides a path in the second reading (see :func:`second_reading`)."""

    rank: int  # of the deciding rule, 0 when none matches
    matcher: Matcher  # the matcher that holds it
    path: str  # the path as the second reading reads it
    left_out: AbstractSet[str]  # patterns of `matcher` the second reading leaves out

    def pattern(self) -> str:
        """The deciding rule's pattern as written in normal form (for a rank)."""
        return self.matcher.pattern_for(self.path, self.rank, self.left_out)


def second_reading(rules: AgentRules, path: str, first_rank: int) -> Reading:
    """What decides ``path`` in the second reading of RFC 9309 §2.2.2
    (``first_rank``: ``rules.matcher.best(path)``). The rules it reads otherwise
    (rules.escaped) hold an escape no path so read holds, so the first
    matcher finds the best of the others; those with a bare '%' could match
    the start of any escape, so they are left out (rules.bare)."""
    matcher = rules.matcher
    assert matcher is not None
    wide = decode_reserved(path)
    left_out = rules.bare or NO_PATTERNS
    if rules.bare is not None:
        rank = matcher.best_without(wide, left_out)
    else:
        rank = first_rank if wide == path else matcher.best(wide)
    escaped = rules.escaped
    if escaped is not None:
        escaped_rank = escaped.best(wide)
        if escaped_rank > rank:
            return Reading(escaped_rank, escaped, wide, NO_PATTERNS)
    return Reading(rank, matcher, wide, left_out)


def rule_line(
    groups: Groups, rules: AgentRules, pattern: str, allow: bool
) -> tuple[int | None, str]:
    """Line number and text ("Disallow: /x") of the first rule of ``rules``'
    groups that makes this pattern with this kind (cached per agent)."""
    key = (pattern, allow)
    if rules.explained is None or rules.rule_offsets is None:
        rules.explained, rules.rule_offsets = {}, _rule_offsets(groups, rules.groups)
    known = rules.explained.get(key)
    if known is not None:
        return known
    offset = rules.rule_offsets[allow].get(pattern)
    known = (None, f"{_KIND_NAMES[allow]}: {pattern}")  # not expected: no such line
    if offset is not None:
        text = groups.text
        end = text.find("\n", offset)
        parsed = _lines.parse_line(text[offset : len(text) if end < 0 else end])
        value = pattern if parsed is None else parsed[1]  # (it was read as this rule)
        known = (groups.line_number(offset), f"{_KIND_NAMES[allow]}: {value}")
    rules.explained[key] = known
    return known


def _rule_offsets(
    groups: Groups, indexes: tuple[int, ...]
) -> tuple[dict[str, int], dict[str, int]]:
    """Where the first rule line of each normalised pattern starts in the groups
    ``indexes``, for Disallow and Allow rules (one pass: explaining stays linear)."""
    offsets: tuple[dict[str, int], dict[str, int]] = ({}, {})
    text, bounds = groups.text, groups.bounds
    for index in indexes:
        for match in _lines.RULE_LINE.finditer(text, bounds[index], bounds[index + 1]):
            parsed = _lines.parse_line(match.group()[1:])
            if parsed is None or not parsed[1]:
                continue
            kind, value = parsed
            if kind == _lines.ALLOW or kind == _lines.DISALLOW:
                table = offsets[kind == _lines.ALLOW]
                table.setdefault(normalize_pattern(value), match.start() + 1)
    return offsets
