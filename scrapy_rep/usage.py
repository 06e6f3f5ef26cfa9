"""Usage preferences: what a site says its content may be used for. Scrapy-free.

robots.txt says what a crawler may fetch; these statements say what the fetched
content may be used for, per *purpose* (``train-ai``, ``search``, ``ai-input``:
:mod:`scrapy_rep._usage_labels`). Each mechanism is read by its own rules, then
the statements are combined per purpose: any "no" wins, else any "yes", else
nothing is known (None). That is AIPREF's rule for combining statements
(draft-ietf-aipref-vocab-07 §5.1), used here across every mechanism.

- **Content-Usage** (IETF AIPREF, draft-ietf-aipref-attach-05): a robots.txt
  rule of the agent's group, with an optional path (the longest matching path
  wins; rules of equal length combine, the most restrictive winning), and a
  response header. The value is an RFC 9651 Structured Fields Dictionary read
  strictly: any syntax error (an uppercase key, a trailing comma) makes the
  statement say nothing; only the Tokens ``y`` and ``n`` count; the last of
  duplicate keys wins; parameters and unknown labels are ignored.
- **Content-Signal** (Cloudflare's Content Signals Policy): no text defines
  its syntax, so it is read leniently: comma-separated ``key=value`` items,
  keys and values in any case, ``yes``/``no``, an unreadable item ignored
  alone. In robots.txt it is scoped like Content-Usage (path included); a line
  above every group applies to every agent.
- **TDMRep** (W3C TDM Reservation Protocol): ``tdm-reservation`` ``1`` or
  ``0`` from ``/.well-known/tdmrep.json`` (the first rule whose location
  matches, in file order), then the response header, then the HTML meta tag:
  a later one supersedes, an absent one changes nothing.
- **noai / noimageai** in ``<meta name="robots">``, the crawler's own meta
  name and ``X-Robots-Tag`` (read by :mod:`scrapy_rep._page_directives`).

In robots.txt the usage lines do not change the groups that Allow and Disallow
rules are read from (as in Google's parser, so fetch verdicts stay as they
were); each usage line belongs to the run of user-agent lines above it, as
delay lines do (:mod:`scrapy_rep._delays`). Nothing here ever raises for what a
site sends: an unreadable statement says nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from scrapy_rep import _lines
from scrapy_rep import _usage_labels as labels
from scrapy_rep._delays import lines_of_runs_naming
from scrapy_rep._groups import Groups
from scrapy_rep._match import Matcher, matches
from scrapy_rep._url import normalize_pattern, url_path

__all__ = [
    "MAX_FIELD",
    "MAX_TDMREP_RULES",
    "PURPOSES",
    "SOURCES",
    "AgentUsage",
    "Statement",
    "TdmRep",
    "UsageDecision",
    "UsageLine",
    "Verdict",
    "combine",
    "content_signal",
    "content_usage",
    "parse_dictionary",
    "read_usage",
    "tdm_value",
]

PURPOSES: Final = labels.PURPOSES

# Where a statement comes from (the rep/usage/denied_by/<source> stats).
ROBOTSTXT: Final = "robotstxt"
CONTENT_USAGE_HEADER: Final = "content-usage"
CONTENT_SIGNAL_HEADER: Final = "content-signal"
TDMREP: Final = "tdmrep"
NOAI: Final = "noai"
SOURCES: Final = (ROBOTSTXT, CONTENT_USAGE_HEADER, CONTENT_SIGNAL_HEADER, TDMREP, NOAI)

MAX_FIELD: Final = 16_384
"""Characters of a header's value read; a longer value states nothing."""
MAX_TDMREP_RULES: Final = 1_000
"""Rules of a tdmrep.json kept; later ones are ignored."""
_SHOWN = 200  # characters of a value quoted in a reason

_CONTENT_USAGE = labels.purposes_of(labels.CONTENT_USAGE)
_CONTENT_SIGNAL = labels.purposes_of(labels.CONTENT_SIGNAL)
_SPACE = " \t"


# -- statements and their combination -------------------------------------------


@dataclass(frozen=True, slots=True)
class Statement:
    """What one source says, per purpose."""

    source: str
    """One of :data:`SOURCES`."""
    said: Mapping[str, bool]
    """``{purpose: allowed}`` for the purposes it speaks for."""
    where: str
    """Where it was read, for people: ``robots.txt line 3: Content-Usage: train-ai=n``."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The combined verdict for one purpose, and the statements that made it."""

    allowed: bool | None
    """False if any statement says no, else True if any says yes, else None."""
    reasons: tuple[Statement, ...] = ()


def combine(statements: Iterable[Statement], purposes: Sequence[str]) -> dict[str, Verdict]:
    """One :class:`Verdict` per purpose: any "no" wins, else any "yes", else None."""
    statements = tuple(statements)
    verdicts = {}
    for purpose in purposes:
        denied = tuple(s for s in statements if s.said.get(purpose) is False)
        if denied:
            verdicts[purpose] = Verdict(False, denied)
            continue
        allowed = tuple(s for s in statements if s.said.get(purpose) is True)
        verdicts[purpose] = Verdict(True, allowed) if allowed else Verdict(None)
    return verdicts


def _restrict(said: dict[str, bool], purpose: str, allowed: bool) -> None:
    """Add one purpose's value to ``said``, the most restrictive winning."""
    said[purpose] = said.get(purpose, True) and allowed


# -- RFC 9651 Structured Fields: the Dictionary, read strictly ---------------------

_KEY = re.compile(r"[a-z*][a-z0-9_.*-]*")
_TOKEN = re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*")
_NUMBER = re.compile(r"-?([0-9]+)(?:\.([0-9]*))?")
_STRING = re.compile(r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*"')
_BYTES = re.compile(r":[A-Za-z0-9+/=]*:")
_BOOLEAN = re.compile(r"\?[01]")
_DISPLAY = re.compile(r'%"((?:[\x20\x21\x23\x24\x26-\x7e]|%[0-9a-f]{2})*)"')
_PERCENT = re.compile(r"%([0-9a-f]{2})")
_OWS = re.compile(r"[ \t]*")
_SP = re.compile(r" *")


class _Invalid(Exception):
    """The field value is not a Structured Fields Dictionary."""


def parse_dictionary(text: str) -> dict[str, str | None] | None:
    """An RFC 9651 Dictionary (§4.2.2): ``{key: Token}``, None for members that
    are no Token (inner lists, strings, numbers, booleans...); None when the
    text does not parse. Parameters are checked and dropped; a key given twice
    keeps its last value. Linear in the text, whatever it holds."""
    if not text.isascii():
        return None
    try:
        return _Dictionary(text).members()
    except _Invalid:
        return None


class _Dictionary:
    __slots__ = ("at", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = _SP.match(text).end()  # type: ignore[union-attr]  # matches any text

    def members(self) -> dict[str, str | None]:
        text = self.text
        found: dict[str, str | None] = {}
        while self.at < len(text):
            key = self._take(_KEY)
            if text.startswith("=", self.at):
                self.at += 1
                if text.startswith("(", self.at):
                    self._inner_list()
                    value = None
                else:
                    value = self._bare_item()
                    self._parameters()
            else:  # a bare key is the Boolean true
                value = None
                self._parameters()
            found[key] = value  # a duplicate keeps the last value
            self.at = _OWS.match(text, self.at).end()  # type: ignore[union-attr]
            if self.at >= len(text):
                break
            if text[self.at] != ",":
                raise _Invalid
            self.at = _OWS.match(text, self.at + 1).end()  # type: ignore[union-attr]
            if self.at >= len(text):
                raise _Invalid  # a trailing comma
        return found

    def _take(self, pattern: re.Pattern[str]) -> str:
        match = pattern.match(self.text, self.at)
        if match is None:
            raise _Invalid
        self.at = match.end()
        return match.group()

    def _bare_item(self) -> str | None:
        """The item's Token, or None for an item of another type."""
        char = self.text[self.at : self.at + 1]
        if char == "-" or char.isdigit():
            self._number()
        elif char == '"':
            self._take(_STRING)
        elif char.isalpha() or char == "*":
            return self._take(_TOKEN)
        elif char == ":":
            self._take(_BYTES)
        elif char == "?":
            self._take(_BOOLEAN)
        elif char == "@":  # a Date: an Integer
            self.at += 1
            if self._number():
                raise _Invalid
        elif char == "%":
            self._display_string()
        else:
            raise _Invalid
        return None

    def _number(self) -> bool:
        """An Integer or a Decimal (§4.2.4); True for a Decimal."""
        match = self._take(_NUMBER)
        whole, dot, fraction = match.lstrip("-").partition(".")
        if not dot:
            if len(whole) > 15:
                raise _Invalid
            return False
        if len(whole) > 12 or not 1 <= len(fraction) <= 3:
            raise _Invalid
        return True

    def _display_string(self) -> None:
        match = _DISPLAY.match(self.text, self.at)
        if match is None:
            raise _Invalid
        self.at = match.end()
        try:  # the escapes must make UTF-8
            _PERCENT.sub(lambda m: chr(int(m[1], 16)), match[1]).encode("latin-1").decode()
        except UnicodeError:
            raise _Invalid from None

    def _parameters(self) -> None:
        text = self.text
        while text.startswith(";", self.at):
            self.at = _SP.match(text, self.at + 1).end()  # type: ignore[union-attr]
            self._take(_KEY)
            if text.startswith("=", self.at):
                self.at += 1
                self._bare_item()

    def _inner_list(self) -> None:
        text = self.text
        self.at += 1  # "("
        while self.at < len(text):
            self.at = _SP.match(text, self.at).end()  # type: ignore[union-attr]
            if text.startswith(")", self.at):
                self.at += 1
                self._parameters()
                return
            self._bare_item()
            self._parameters()
            if self.at >= len(text) or text[self.at] not in " )":
                raise _Invalid
        raise _Invalid


# -- the two statement formats -----------------------------------------------------


def content_usage(value: str) -> dict[str, bool]:
    """``{purpose: allowed}`` of a Content-Usage statement (AIPREF vocab):
    empty when it does not parse or names no known label with ``y``/``n``."""
    if len(value) > MAX_FIELD:
        return {}
    members = parse_dictionary(value.strip(_SPACE))
    said: dict[str, bool] = {}
    if not members:
        return said
    for label, token in members.items():
        allowed = labels.CONTENT_USAGE_VALUES.get(token) if token is not None else None
        if allowed is not None:
            for purpose in _CONTENT_USAGE.get(label, ()):
                _restrict(said, purpose, allowed)
    return said


def content_signal(value: str) -> dict[str, bool]:
    """``{purpose: allowed}`` of a Content-Signal value, read leniently: items
    split on commas, key and value trimmed and in any case, ``yes``/``no``; an
    item that cannot be read is ignored, the last readable one of a key wins."""
    if len(value) > MAX_FIELD:
        return {}
    by_label: dict[str, bool] = {}
    for item in value.split(","):
        key, equals, text = item.partition("=")
        if not equals:
            continue
        allowed = labels.CONTENT_SIGNAL_VALUES.get(text.strip(_SPACE).lower())
        if allowed is not None:
            by_label[key.strip(_SPACE).lower()] = allowed
    said: dict[str, bool] = {}
    for label, allowed in by_label.items():
        for purpose in _CONTENT_SIGNAL.get(label, ()):
            _restrict(said, purpose, allowed)
    return said


def shown(value: str) -> str:
    """A value as quoted in a reason: one line, at most 200 characters."""
    value = " ".join(value.split())
    return value if len(value) <= _SHOWN else value[: _SHOWN - 1] + "…"


# -- robots.txt: Content-Usage and Content-Signal lines ----------------------------


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


_KEY_NAMES = {_lines.CONTENT_USAGE: "Content-Usage", _lines.CONTENT_SIGNAL: "Content-Signal"}
_SIGNAL_LINE = re.compile(rf"\n[ \t\v\f]*{_lines.CONTENT_SIGNAL_KEY}[^\n]*")
_USAGE_KINDS = frozenset(_KEY_NAMES)


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
            purpose: UsageDecision(allowed, tuple(sorted(lines, key=_line_number)))
            for purpose, (allowed, lines) in found.items()
        }


def _line_number(line: UsageLine) -> int:
    return line.line


NO_USAGE: Final = AgentUsage([], [])


def read_usage(groups: Groups, indexes: Sequence[int], token: str) -> AgentUsage:
    """The usage lines of the runs of groups ``indexes`` that name ``token`` (the
    agent's own, or "*" when no group names it), and the Content-Signal lines
    above every group."""
    usage: list[_Rule] = []
    signal: list[_Rule] = []
    preamble = groups.preamble
    number, counted = groups.preamble_line - 1, 0
    for match in _SIGNAL_LINE.finditer(preamble):
        parsed = _lines.parse_line(match.group()[1:])
        if parsed is not None and parsed[0] == _lines.CONTENT_SIGNAL:
            number += preamble.count("\n", counted, match.start() + 1)
            counted = match.start() + 1
            signal.append(_rule(_lines.CONTENT_SIGNAL, parsed[1], number))
    number, counted = groups.first_line - 1, 0
    text = groups.text
    for index in indexes:
        for kind, value, offset in lines_of_runs_naming(groups, index, token, _USAGE_KINDS):
            number += text.count("\n", counted, offset)
            counted = offset
            (usage if kind == _lines.CONTENT_USAGE else signal).append(_rule(kind, value, number))
    if not usage and not signal:
        return NO_USAGE
    return AgentUsage(usage, signal)


def _rule(kind: int, value: str, number: int) -> _Rule:
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
    read = content_usage if kind == _lines.CONTENT_USAGE else content_signal
    return _Rule(pattern, read(statement), UsageLine(number, f"{_KEY_NAMES[kind]}: {value}"))


# -- TDMRep ----------------------------------------------------------------------------


def tdm_value(value: str) -> bool | None:
    """A ``tdm-reservation`` value as "allowed": ``0`` True, ``1`` False, else None."""
    return labels.TDMREP_VALUES.get(value.strip(" \t\r\n"))


def tdm_values(values: Iterable[str]) -> bool | None:
    """Several header lines or meta tags: "1" if any says it, else "0" if any does."""
    found = {tdm_value(value) for value in values} - {None}
    if not found:
        return None
    return False not in found


class TdmRep:
    """The rules of an origin's ``/.well-known/tdmrep.json``: for a URL, the
    first rule whose ``location`` matches its path, in file order."""

    __slots__ = ("_count", "_locations", "_matcher", "cut")

    def __init__(self, rules: Sequence[tuple[str, bool]], cut: bool = False) -> None:
        """``rules``: ``(location, allowed)`` in file order."""
        self._count = len(rules)
        self._locations = [location for location, _ in rules]
        self.cut = cut  # rules past MAX_TDMREP_RULES were left out
        # The first rule in file order has the highest rank; the low bit says "allowed".
        ranked = [
            (((self._count - index) << 1) | allowed, normalize_pattern(location), location)
            for index, (location, allowed) in enumerate(rules)
            if location
        ]
        self._matcher = Matcher.ranked(ranked) if ranked else None

    @classmethod
    def parse(cls, body: bytes | str) -> tuple[TdmRep | None, str]:
        """The rules of a tdmrep.json body, or None and why it has none. A
        rule without a usable ``location`` or ``tdm-reservation`` is skipped."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError, TypeError):  # (UnicodeDecodeError is a ValueError)
            return None, "not JSON"
        if not isinstance(data, list):
            return None, "not a JSON array"
        rules: list[tuple[str, bool]] = []
        cut = False
        for item in data:
            if not isinstance(item, dict):
                continue
            location = item.get("location")
            reservation = item.get("tdm-reservation")
            if isinstance(reservation, int) and not isinstance(reservation, bool):
                reservation = str(reservation)
            allowed = tdm_value(reservation) if isinstance(reservation, str) else None
            if isinstance(location, str) and location and allowed is not None:
                if len(rules) == MAX_TDMREP_RULES:
                    cut = True
                    break
                rules.append((location, allowed))
        return cls(rules, cut), ""

    def decide(self, url: str) -> tuple[bool, str] | None:
        """``(allowed, which rule)`` for a URL or path, None when no rule matches."""
        if self._matcher is None:
            return None
        rank = self._matcher.best(url_path(url))
        if not rank:
            return None
        index = self._count - (rank >> 1)
        value = "0" if rank & 1 else "1"
        where = f"tdmrep.json rule {index + 1} (location {shown(self._locations[index])})"
        return bool(rank & 1), f"{where}: tdm-reservation {value}"

    def __len__(self) -> int:
        return self._count


# -- a response's own statements ---------------------------------------------------------


def response_statements(
    *,
    headers: Mapping[str, Sequence[str]],
    meta_tags: Sequence[tuple[str, str]],
    directives: Sequence[tuple[str, bool, bool]],
    image: bool,
    tdmrep_rule: tuple[bool, str] | None,
    tdmrep: bool,
) -> list[Statement]:
    """What a response says, as statements.

    ``headers``: lowercase name -> values (``content-usage``, ``content-signal``,
    ``tdm-reservation``); ``meta_tags``: ``(name, content)`` of its
    ``<meta name="tdm-reservation">`` tags; ``directives``: ``(where, noai,
    noimageai)`` per meta tag or header that speaks to the crawler; ``image``:
    the response is an image (``noimageai`` applies); ``tdmrep_rule``: what the
    origin's tdmrep.json says of the URL; ``tdmrep``: read TDMRep at all.
    """
    statements: list[Statement] = []
    values = headers.get("content-usage")
    if values:
        joined = ", ".join(values)  # field lines combine into one (RFC 9651 §4.2)
        said = content_usage(joined)
        if said:
            where = f"Content-Usage header: {shown(joined)}"
            statements.append(Statement(CONTENT_USAGE_HEADER, said, where))
    values = headers.get("content-signal")
    if values:
        joined = ", ".join(values)
        said = content_signal(joined)
        if said:
            where = f"Content-Signal header: {shown(joined)}"
            statements.append(Statement(CONTENT_SIGNAL_HEADER, said, where))
    if tdmrep:
        statement = _tdmrep_statement(headers.get("tdm-reservation", ()), meta_tags, tdmrep_rule)
        if statement is not None:
            statements.append(statement)
    for where, noai, noimageai in directives:
        if noai or (noimageai and image):
            said = dict.fromkeys(_NOAI_PURPOSES[noai], False)
            statements.append(Statement(NOAI, said, f"{where} {'noai' if noai else 'noimageai'}"))
    return statements


_DIRECTIVES = labels.purposes_of(labels.ROBOTS_DIRECTIVES)
_NOAI_PURPOSES = {True: _DIRECTIVES["noai"], False: _DIRECTIVES["noimageai"]}


def _tdmrep_statement(
    header: Sequence[str],
    meta_tags: Sequence[tuple[str, str]],
    rule: tuple[bool, str] | None,
) -> Statement | None:
    """TDMRep's own precedence: tdmrep.json, then the header, then the meta tag;
    a later one supersedes, an absent one changes nothing."""
    allowed, where = rule if rule is not None else (None, "")
    found = tdm_values(header)
    if found is not None:
        allowed, where = found, f"tdm-reservation header: {shown(', '.join(header))}"
    contents = [content for name, content in meta_tags if name == "tdm-reservation"]
    found = tdm_values(contents)
    if found is not None:
        value = "0" if found else "1"
        allowed, where = found, f'<meta name="tdm-reservation" content="{value}">'
    if allowed is None:
        return None
    return Statement(TDMREP, dict.fromkeys(labels.TDMREP.purposes, allowed), where)
