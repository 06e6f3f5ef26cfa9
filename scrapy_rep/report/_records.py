"""The crawl report's records: what robots.txt did to one origin, the crawl's totals, rule counts.

A record that leaves memory is added to the :class:`Totals`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy_rep.policy import delay_for

if TYPE_CHECKING:
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Outcome
    from scrapy_rep.robotstxt import RobotsTxt

MAX_RULES = 32
"""Distinct rules counted per origin; beyond, requests count under :data:`OTHER_RULES`."""
OTHER_RULES = (0, "(other rules)")
"""Key of the rules past :data:`MAX_RULES` (robots.txt lines are numbered from 1)."""

Rule = tuple[int, str]
"""``(line, rule)`` as a :class:`~scrapy_rep.robotstxt.Decision` names it."""
COUNTS = ("forbidden", "dropped", "paced", "dry_forbidden", "dry_dropped")
"""The request counts a record and the totals share."""


@dataclass(slots=True, eq=False)
class OriginRecord:
    """What robots.txt did to one origin (the unit of the report file)."""

    origin: Origin
    outcome: Outcome | None = None  # None: not fetched since this record started
    status: int | None = None
    reason: str = ""
    stale: bool = False
    fetches: int = 0
    delay: float = 0.0  # applied to the crawl's own user agent (after the cap)
    asked: float = 0.0  # what robots.txt asks for that agent
    source: str = ""  # "Crawl-delay: 5" / "Request-rate: 1/10s"
    sitemaps: int = 0
    forbidden: int = 0
    rules: dict[Rule, int] = field(default_factory=dict)
    dropped: int = 0
    dropped_reason: str = ""
    paced: int = 0
    pace: float = -1.0  # the delay of the latest paced() call (the hot path compares it)
    dry_forbidden: int = 0
    dry_rules: dict[Rule, int] = field(default_factory=dict)
    dry_dropped: int = 0
    told_delays: tuple[float, ...] = ()
    seen: int = 0  # activity when eviction last looked at this record
    evicted: bool = False
    # the origin's stop-signal state, set at close (scrapy_rep.challenges)
    stop_signal: dict[str, Any] | None = None

    @property
    def affected(self) -> int:
        """Requests robots.txt changed something for (would have, under dry run)."""
        return self.forbidden + self.dropped + self.paced + self.dry_forbidden + self.dry_dropped

    @property
    def activity(self) -> int:
        return self.affected + self.fetches

    def add(self, older: OriginRecord) -> None:
        """Add the counts of an earlier (evicted) record of the same origin."""
        for name in (*COUNTS, "fetches"):
            setattr(self, name, getattr(self, name) + getattr(older, name))
        for mine, theirs in ((self.rules, older.rules), (self.dry_rules, older.dry_rules)):
            for rule, hits in theirs.items():
                count_rule(mine, rule, hits)
        if self.outcome is None:
            self.outcome, self.status, self.reason = older.outcome, older.status, older.reason
            self.delay, self.asked, self.source = older.delay, older.asked, older.source
            self.sitemaps, self.stale = older.sitemaps, older.stale
        self.dropped_reason = self.dropped_reason or older.dropped_reason
        self.stop_signal = self.stop_signal or older.stop_signal

    def as_json(self) -> dict[str, Any]:
        """The record as written to the REP_REPORT file (docs/report.md)."""
        return {
            "origin": self.origin.text,
            "outcome": self.outcome,
            "status": self.status,
            "reason": self.reason,
            "stale": self.stale,
            "fetches": self.fetches,
            "delay": self.delay,
            "asked_delay": self.asked,
            "delay_source": self.source,
            "sitemaps": self.sitemaps,
            "forbidden": self.forbidden,
            "forbidden_rules": _rules_json(self.rules),
            "dropped": self.dropped,
            "dropped_reason": self.dropped_reason,
            "paced": self.paced,
            "dry_run": {
                "forbidden": self.dry_forbidden,
                "forbidden_rules": _rules_json(self.dry_rules),
                "dropped": self.dry_dropped,
            },
            "evicted": self.evicted,
            "stop_signal": self.stop_signal,
        }


@dataclass(slots=True)
class Totals:
    """Counts over every record that left memory (evicted, or finished at close)."""

    records: int = 0
    evicted: int = 0
    affected_origins: int = 0
    forbidden: int = 0
    dropped: int = 0
    paced: int = 0
    dry_forbidden: int = 0
    dry_dropped: int = 0

    def add(self, record: OriginRecord) -> None:
        self.records += 1
        self.evicted += record.evicted
        self.affected_origins += record.affected > 0
        for name in COUNTS:
            setattr(self, name, getattr(self, name) + getattr(record, name))


def count_rule(rules: dict[Rule, int], rule: Rule, hits: int = 1) -> None:
    """Add ``hits`` to ``rule``'s count; past :data:`MAX_RULES` rules, to :data:`OTHER_RULES`."""
    if rule not in rules and len(rules) >= MAX_RULES:
        rule = OTHER_RULES
    rules[rule] = rules.get(rule, 0) + hits


def _rules_json(rules: dict[Rule, int]) -> list[dict[str, Any]]:
    ranked = sorted(rules.items(), key=lambda item: (-item[1], item[0]))
    return [{"line": line or None, "rule": rule, "count": hits} for (line, rule), hits in ranked]


def asked_delay(robots: RobotsTxt | None, agent: str, cap: float) -> tuple[float, str]:
    """What robots.txt asks of ``agent`` (seconds) and the line kind that asks it."""
    if robots is None:
        return 0.0, ""
    asked = delay_for(robots, agent, cap)[1]
    if not asked:
        return 0.0, ""
    rate = robots.request_rate(user_agent=agent)
    if rate is not None and rate[0] > 0 and rate[1] / rate[0] == asked:
        return asked, f"Request-rate: {rate[0]}/{rate[1]:g}s"
    return asked, f"Crawl-delay: {asked:g}"
