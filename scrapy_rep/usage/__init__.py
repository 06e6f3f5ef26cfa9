"""Usage preferences: what a site says its content may be used for. Scrapy-free.

Each mechanism (docs/usage.md) is read by its own rules, then the statements
are combined per purpose: any "no" wins, else any "yes", else None (AIPREF's
rule, draft-ietf-aipref-vocab-07 §5.1, across every mechanism). Nothing here
raises for what a site sends: an unreadable statement says nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from scrapy_rep.robotstxt import _usage_labels as labels
from scrapy_rep.robotstxt._match import Matcher
from scrapy_rep.robotstxt._url import normalize_pattern, url_path
from scrapy_rep.robotstxt._usage_formats import (
    MAX_FIELD,
    content_signal,
    content_usage,
    parse_dictionary,
    shown,
)
from scrapy_rep.robotstxt._usage_lines import AgentUsage, UsageDecision, UsageLine, read_usage

__all__ = [
    "MAX_FIELD",
    "MAX_TDMREP_RULES",
    "PURPOSES",
    "SOURCES",
    "AgentUsage",
    "Source",
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

Source = Literal["robotstxt", "content-usage", "content-signal", "tdmrep", "noai"]
"""Where a statement comes from (the rep/usage/denied_by/<source> stats)."""
SOURCES: Final[tuple[Source, ...]] = get_args(Source)

MAX_TDMREP_RULES: Final = 1_000
"""Rules of a tdmrep.json kept; later ones are ignored."""


# -- statements and their combination -------------------------------------------


@dataclass(frozen=True, slots=True)
class Statement:
    """What one source says, per purpose."""

    source: Source
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
    """One :class:`Verdict` per purpose: any "no" wins, else any "yes", else None.
    Its reasons name each place once: a page repeating a tag 100 times states
    one thing (they agree on the purpose, so the verdict is the same)."""
    statements = tuple(statements)
    verdicts = {}
    for purpose in purposes:
        denied = _once(s for s in statements if s.said.get(purpose) is False)
        if denied:
            verdicts[purpose] = Verdict(False, denied)
            continue
        allowed = _once(s for s in statements if s.said.get(purpose) is True)
        verdicts[purpose] = Verdict(True, allowed) if allowed else Verdict(None)
    return verdicts


def _once(statements: Iterable[Statement]) -> tuple[Statement, ...]:
    """The first statement read at each place (``where``), in order."""
    first: dict[str, Statement] = {}
    for statement in statements:
        first.setdefault(statement.where, statement)
    return tuple(first.values())


# -- TDMRep ----------------------------------------------------------------------------


def tdm_value(value: str) -> bool | None:
    """A ``tdm-reservation`` value as "allowed": ``0`` True, ``1`` False, else None."""
    return labels.TDMREP_VALUES.get(value.strip(" \t\r\n"))


def tdm_values(values: Iterable[str]) -> bool | None:
    """Several header lines or meta tags: "1" if any says it, else "0" if any does."""
    found = {tdm_value(value) for value in values} - {None}
    return (False not in found) if found else None


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
        rank = self._matcher.best(url_path(url)) if self._matcher is not None else 0
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
    """What a response says, as statements: ``headers`` by lowercase name, its
    ``<meta name="tdm-reservation">`` tags, ``(where, noai, noimageai)`` per
    meta tag or header speaking to the crawler, and what tdmrep.json says."""
    statements: list[Statement] = []
    for source, name, read in _HEADERS:
        joined = ", ".join(headers.get(source, ()))  # field lines are one (RFC 9651 §4.2)
        said = read(joined) if joined else None
        if said:
            statements.append(Statement(source, said, f"{name} header: {shown(joined)}"))
    if tdmrep:
        statement = _tdmrep_statement(headers.get("tdm-reservation", ()), meta_tags, tdmrep_rule)
        if statement is not None:
            statements.append(statement)
    for where, noai, noimageai in directives:
        if noai or (noimageai and image):
            said = dict.fromkeys(_NOAI_PURPOSES[noai], False)
            statements.append(Statement("noai", said, f"{where} {'noai' if noai else 'noimageai'}"))
    return statements


_HEADERS: tuple[tuple[Source, str, Callable[[str], dict[str, bool]]], ...] = (
    ("content-usage", "Content-Usage", content_usage),
    ("content-signal", "Content-Signal", content_signal),
)
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
    return Statement("tdmrep", dict.fromkeys(labels.TDMREP.purposes, allowed), where)
