"""What robots.txt did to each origin of a crawl, told at INFO and written for audits.

The middleware and the fetcher call four methods; nothing else does:
:meth:`CrawlReport.fetched` (a robots.txt fetch ended), :meth:`~CrawlReport.forbidden`,
:meth:`~CrawlReport.dropped` (robots.txt unreachable) and :meth:`~CrawlReport.paced`
(a request spaced by the origin's delay; called for every such request, so it
is a dictionary lookup, a comparison and an increment).

While the crawl runs, one INFO line per origin and change: the first request
robots.txt forbids (with the deciding line), and each new delay the origin's
requests are spaced by. An unreachable robots.txt is the fetcher's WARNING;
here its dropped requests are only counted. At spider close, one INFO summary:
the ``REP_REPORT_TOP`` origins with the most requests affected, the rest in one
line. ``REP_REPORT`` names a file (``.json``: one array; ``.jsonl``: one object
per line) that gets one record per origin.

Memory is bounded: at most ``REP_CACHE_MAX_ORIGINS`` origin records are held.
Past that, the least recently active record is evicted (second chance: the
queue is in creation order, and a record active since it was last looked at
goes to the back instead; so ``paced`` needs no bookkeeping of its own). An
evicted record is written to the ``REP_REPORT`` file at once (marked
``"evicted": true``), added to the crawl's totals, and kept for the summary
only if it is among the top ``REP_REPORT_TOP`` so far. If its origin is met
again, a new record starts: the file then holds several records of that origin,
whose counts add up, and its INFO line may be told again.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import os
from collections import OrderedDict
from itertools import count
from typing import IO, TYPE_CHECKING, Any

from scrapy import signals

from scrapy_rep.origin import origin_text
from scrapy_rep.policy import delay_for

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Entry
    from scrapy_rep.robotstxt import Decision, RobotsTxt

logger = logging.getLogger("scrapy_rep.report")

MAX_RULES = 32
"""Distinct rules counted per origin; beyond, requests count under :data:`OTHER_RULES`."""
OTHER_RULES = (0, "(other rules)")
"""Key of the rules past :data:`MAX_RULES` (robots.txt lines are numbered from 1)."""
SHOWN_RULES = 3
"""Rules per origin in the close summary."""

Rule = tuple[int, str]
"""``(line, rule)`` as a :class:`~scrapy_rep.robotstxt.Decision` names it."""


class OriginRecord:
    """What robots.txt did to one origin (the unit of the report file)."""

    __slots__ = (
        "asked",
        "delay",
        "dropped",
        "dropped_reason",
        "dry_dropped",
        "dry_forbidden",
        "dry_rules",
        "evicted",
        "fetches",
        "forbidden",
        "origin",
        "outcome",
        "pace",
        "paced",
        "reason",
        "rules",
        "seen",
        "sitemaps",
        "source",
        "stale",
        "status",
        "told_delays",
        "told_dry",
        "told_forbidden",
    )

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.outcome: str | None = None  # None: not fetched since this record started
        self.status: int | None = None
        self.reason = ""
        self.stale = False
        self.fetches = 0
        self.delay = 0.0  # applied to the crawl's own user agent (after the cap)
        self.asked = 0.0  # what robots.txt asks for that agent
        self.source = ""  # "Crawl-delay: 5" / "Request-rate: 1/10s"
        self.sitemaps = 0
        self.forbidden = 0
        self.rules: dict[Rule, int] = {}
        self.dropped = 0
        self.dropped_reason = ""
        self.paced = 0
        self.pace = -1.0  # the delay of the latest paced() call (the hot path compares it)
        self.dry_forbidden = 0
        self.dry_rules: dict[Rule, int] = {}
        self.dry_dropped = 0
        self.told_forbidden = False
        self.told_dry = False
        self.told_delays: tuple[float, ...] = ()
        self.seen = 0  # activity when eviction last looked at this record
        self.evicted = False

    @property
    def affected(self) -> int:
        """Requests robots.txt changed something for (would have, under dry run)."""
        return self.forbidden + self.dropped + self.paced + self.dry_forbidden + self.dry_dropped

    @property
    def activity(self) -> int:
        return self.affected + self.fetches

    def add(self, older: OriginRecord) -> None:
        """Add the counts of an earlier (evicted) record of the same origin."""
        self.forbidden += older.forbidden
        self.dropped += older.dropped
        self.paced += older.paced
        self.dry_forbidden += older.dry_forbidden
        self.dry_dropped += older.dry_dropped
        self.fetches += older.fetches
        for mine, theirs in ((self.rules, older.rules), (self.dry_rules, older.dry_rules)):
            for rule, hits in theirs.items():
                _count_rule(mine, rule, hits)
        if self.outcome is None:
            self.outcome, self.status, self.reason = older.outcome, older.status, older.reason
            self.delay, self.asked, self.source = older.delay, older.asked, older.source
            self.sitemaps, self.stale = older.sitemaps, older.stale
        self.dropped_reason = self.dropped_reason or older.dropped_reason

    def as_json(self) -> dict[str, Any]:
        """The record as written to the REP_REPORT file (docs/report.md)."""
        return {
            "origin": origin_text(self.origin),
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
        }


class CrawlReport:
    """Per-origin account of what robots.txt changed in this crawl."""

    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.config = config
        self._ua = config.user_agent
        self._max = config.cache_max_origins
        self._top = config.report_top
        self._records: OrderedDict[Origin, OriginRecord] = OrderedDict()
        self.totals = Totals()
        # the best evicted records so far, for the summary: a min-heap of N
        self._evicted_top: list[tuple[int, int, OriginRecord]] = []
        self._order = count()
        self.file = ReportFile(config.report) if config.report else None
        crawler.signals.connect(self._spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self._spider_closed, signal=signals.spider_closed)

    def __len__(self) -> int:
        """Origin records held in memory (at most REP_CACHE_MAX_ORIGINS)."""
        return len(self._records)

    # -- the hooks -------------------------------------------------------------------

    def fetched(self, origin: Origin, entry: Entry) -> None:
        """A robots.txt fetch ended (or Redis answered for it) with ``entry``."""
        record = self._records.get(origin) or self._new(origin)
        record.fetches += 1
        record.outcome, record.status, record.reason = entry.outcome, entry.status, entry.reason
        record.stale = entry.stale
        robots = entry.robots
        if entry.delay != record.delay:
            record.told_delays = ()  # a new delay is told again, even one told before
        record.delay = entry.delay
        record.asked, record.source = _asked(robots, self._ua, self.config.max_crawl_delay)
        if robots is not None:
            record.sitemaps = len(robots.sitemaps)

    def forbidden(self, origin: Origin, decision: Decision, *, dry_run: bool) -> None:
        """A request was forbidden (``dry_run``: let through anyway)."""
        record = self._records.get(origin) or self._new(origin)
        rule = (decision.line or 0, decision.rule or "")
        if dry_run:
            record.dry_forbidden += 1
            _count_rule(record.dry_rules, rule)
            if not record.told_dry:
                record.told_dry = True
                logger.info(
                    "robots.txt of %s would forbid requests (dry run: let through): "
                    "%d so far, the first by line %d (%s); more are counted for the "
                    "summary at spider close",
                    _Text(origin),
                    record.dry_forbidden,
                    rule[0],
                    rule[1],
                )
            return
        record.forbidden += 1
        _count_rule(record.rules, rule)
        if not record.told_forbidden:
            record.told_forbidden = True
            logger.info(
                "robots.txt of %s forbids requests: %d so far, the first by line %d (%s); "
                "more are counted for the summary at spider close",
                _Text(origin),
                record.forbidden,
                rule[0],
                rule[1],
            )

    def dropped(self, origin: Origin, reason: str, *, dry_run: bool) -> None:
        """A request was dropped because robots.txt is unreachable (``REP_UNREACHABLE``).

        Not told here: the fetcher logs the outage once, as a WARNING."""
        record = self._records.get(origin) or self._new(origin)
        if dry_run:
            record.dry_dropped += 1
        else:
            record.dropped += 1
        record.dropped_reason = reason

    def paced(self, origin: Origin, delay: float) -> None:
        """A request was spaced by the origin's delay (Crawl-delay / Request-rate)."""
        record = self._records.get(origin)
        if record is not None and record.pace == delay:
            record.paced += 1
            return
        self._new_pace(origin, record, delay)

    def _new_pace(self, origin: Origin, record: OriginRecord | None, delay: float) -> None:
        if record is None:
            record = self._new(origin)
        record.paced += 1
        record.pace = delay
        if delay in record.told_delays:
            return
        record.told_delays += (delay,)
        logger.info(
            "robots.txt of %s slows it down: one request every %g s%s",
            _Text(origin),
            delay,
            _cause(record, delay),
        )

    # -- bounded records -------------------------------------------------------------

    def _new(self, origin: Origin) -> OriginRecord:
        records = self._records
        while len(records) >= self._max:
            self._evict()
        record = records[origin] = OriginRecord(origin)
        return record

    def _evict(self) -> None:
        """Evict the least recently active record (second chance, see the module doc)."""
        records = self._records
        while True:
            origin, record = records.popitem(last=False)
            activity = record.activity
            if activity == record.seen:
                break
            record.seen = activity
            records[origin] = record
        record.evicted = True
        self._finish(record)
        if self._top and record.affected:
            item = (record.affected, next(self._order), record)
            if len(self._evicted_top) < self._top:
                heapq.heappush(self._evicted_top, item)
            elif item[0] > self._evicted_top[0][0]:
                heapq.heapreplace(self._evicted_top, item)

    def _finish(self, record: OriginRecord) -> None:
        """A record leaves memory (evicted, or at close): to the file and the totals."""
        self.totals.add(record)
        if self.file is not None:
            self.file.write(record.as_json())

    # -- open and close -----------------------------------------------------------------

    def _spider_opened(self) -> None:
        if self.file is not None:
            self.file.open()  # at start, so that a bad path is told before the crawl

    def _spider_closed(self, reason: str = "") -> None:
        held = list(self._records.values())
        self._records.clear()
        for record in held:
            self._finish(record)
        if self.file is not None:
            self.file.close()  # first: a failing close is told before the summary
        logger.info("%s", _Summary(self, self._top_records(held)))

    def _top_records(self, held: list[OriginRecord]) -> list[tuple[OriginRecord, int]]:
        """The REP_REPORT_TOP origins with the most requests affected, each with the
        number of records (evicted and held) its counts were added up from."""
        if not self._top:
            return []
        merged: dict[Origin, tuple[OriginRecord, int]] = {}
        evicted = [item[2] for item in sorted(self._evicted_top, key=lambda item: item[1])]
        for record in evicted + [record for record in held if record.affected]:  # oldest first
            known = merged.get(record.origin)
            if known is not None:
                record.add(known[0])  # written to the file already: free to change
            merged[record.origin] = (record, 1 if known is None else known[1] + 1)
        ranked = sorted(merged.values(), key=lambda pair: pair[0].affected, reverse=True)
        return ranked[: self._top]


class Totals:
    """Counts over every record that left memory (evicted, or finished at close)."""

    __slots__ = (
        "affected_origins",
        "dropped",
        "dry_dropped",
        "dry_forbidden",
        "evicted",
        "forbidden",
        "paced",
        "records",
    )

    def __init__(self) -> None:
        self.records = 0
        self.evicted = 0
        self.affected_origins = 0
        self.forbidden = 0
        self.dropped = 0
        self.paced = 0
        self.dry_forbidden = 0
        self.dry_dropped = 0

    def add(self, record: OriginRecord) -> None:
        self.records += 1
        self.evicted += record.evicted
        self.affected_origins += record.affected > 0
        self.forbidden += record.forbidden
        self.dropped += record.dropped
        self.paced += record.paced
        self.dry_forbidden += record.dry_forbidden
        self.dry_dropped += record.dry_dropped


class ReportFile:
    """The REP_REPORT file: written as records leave memory; on the first error,
    one ERROR and no more writing (the crawl and the summary go on)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines = path.lower().endswith(".jsonl")
        self.records = 0
        self.failed = False
        self._file: IO[str] | None = None

    def open(self) -> None:
        if self._file is not None or self.failed:
            return
        try:
            folder = os.path.dirname(self.path)
            if folder:
                os.makedirs(folder, exist_ok=True)
            self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 (kept open)
            if not self.lines:
                self._file.write("[")
        except OSError as exc:
            self._fail(exc)

    def write(self, record: dict[str, Any]) -> None:
        self.open()
        if self._file is None:
            return
        text = json.dumps(record, ensure_ascii=False)
        try:
            if self.lines:
                self._file.write(text + "\n")
            else:
                self._file.write(("\n" if not self.records else ",\n") + text)
        except OSError as exc:
            self._fail(exc)
            return
        self.records += 1

    def close(self) -> None:
        self.open()  # a crawl without records still leaves a valid (empty) report
        file, self._file = self._file, None
        if file is None:
            return
        try:
            if not self.lines:
                file.write("\n]\n")
            file.close()
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self.failed = True
        logger.error(
            "scrapy-rep: cannot write the report file REP_REPORT = %r (%s); the crawl "
            "goes on and its summary is still logged at spider close",
            self.path,
            exc.strerror or exc,
        )
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):  # the ERROR above says it all
                file.close()


class _Text:
    """An origin formatted only if the log record is emitted."""

    __slots__ = ("origin",)

    def __init__(self, origin: Origin) -> None:
        self.origin = origin

    def __str__(self) -> str:
        return origin_text(self.origin)


class _Summary:
    """The close summary, formatted only if INFO is emitted."""

    def __init__(self, report: CrawlReport, top: list[tuple[OriginRecord, int]]) -> None:
        self.report = report
        self.top = top

    def __str__(self) -> str:
        totals = self.report.totals
        # past the bound an origin may have several records: say records, not origins
        noun = "origin record" if totals.evicted else "origin"
        lines = [
            f"scrapy-rep report: robots.txt changed what happened to "
            f"{totals.affected_origins} of {_plural(totals.records, noun)} "
            f"({_counts(totals)})"
        ]
        if totals.evicted:
            bound = self.report.config.cache_max_origins
            lines.append(
                f"  more origins than REP_CACHE_MAX_ORIGINS = {bound}: {totals.evicted} records "
                "left memory early; an origin met again after that has another record"
            )
        rest = Totals()
        for name in Totals.__slots__:
            setattr(rest, name, getattr(totals, name))
        for record, parts in self.top:
            lines += _origin_lines(record)
            rest.records -= parts  # every part of a listed origin was affected
            rest.affected_origins -= parts
            rest.forbidden -= record.forbidden
            rest.dropped -= record.dropped
            rest.paced -= record.paced
            rest.dry_forbidden -= record.dry_forbidden
            rest.dry_dropped -= record.dry_dropped
        if rest.records:
            what = _counts(rest) if rest.affected_origins else "none affected"
            others = "the other" if self.top else "all"
            lines.append(f"  {others} {_plural(rest.records, noun)}: {what}")
        report_file = self.report.file
        if report_file is not None:
            lines.append(
                f"  REP_REPORT = {report_file.path!r} could not be written (see the ERROR above)"
                if report_file.failed
                else f"  every origin is in REP_REPORT = {report_file.path!r} "
                f"({_plural(report_file.records, 'record')})"
            )
        return "\n".join(lines)


def _origin_lines(record: OriginRecord) -> list[str]:
    if record.outcome is None:
        said = "robots.txt not fetched again since its record was evicted"
    else:
        said = f"robots.txt {record.outcome}"
        if record.status is not None or record.reason:
            said += f" ({record.reason or f'HTTP {record.status}'})"
        if record.stale:
            said += ", its last good rules kept"
    if record.sitemaps:
        said += f", {_plural(record.sitemaps, 'sitemap')}"
    lines = [f"  {origin_text(record.origin)}  {said}"]
    if record.forbidden:
        lines.append(f"      forbidden {record.forbidden}: {_top_rules(record.rules)}")
    if record.dry_forbidden:
        lines.append(
            f"      would be forbidden (dry run) {record.dry_forbidden}: "
            f"{_top_rules(record.dry_rules)}"
        )
    for label, number in (("dropped", record.dropped), ("would be dropped", record.dry_dropped)):
        if number:
            why = record.dropped_reason
            lines.append(f"      {label} {number}: robots.txt unreachable ({why})")
    if record.paced:
        lines.append(
            f"      paced {record.paced}: one request every {record.pace:g} s"
            + _cause(record, record.pace)
        )
    return lines


def _cause(record: OriginRecord, delay: float) -> str:
    """`` (Crawl-delay: 5)``, with the cap when it applied; empty when the delay is
    not the crawl's own user agent's (a request may name another with rep_user_agent)."""
    if delay != record.delay or not record.source:
        return ""
    if record.asked > delay:
        return " (" + record.source + ", capped at REP_MAX_CRAWL_DELAY)"
    return " (" + record.source + ")"


def _top_rules(rules: dict[Rule, int]) -> str:
    ranked = sorted(rules.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(
        f"{rule} x{hits}" if line == 0 else f"line {line} ({rule}) x{hits}"
        for (line, rule), hits in ranked[:SHOWN_RULES]
    )
    more = len(ranked) - SHOWN_RULES
    return shown + (f", {_plural(more, 'more rule')}" if more > 0 else "")


def _counts(totals: Totals) -> str:
    parts = [
        f"{totals.forbidden} forbidden",
        f"{totals.dropped} dropped",
        f"{totals.paced} paced",
    ]
    if totals.dry_forbidden or totals.dry_dropped:
        parts.append(
            f"dry run: {totals.dry_forbidden} would be forbidden, "
            f"{totals.dry_dropped} would be dropped"
        )
    return _plural(totals.forbidden + totals.dropped + totals.paced, "request") + (
        ": " + ", ".join(parts)
    )


def _plural(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _count_rule(rules: dict[Rule, int], rule: Rule, hits: int = 1) -> None:
    if rule not in rules and len(rules) >= MAX_RULES:
        rule = OTHER_RULES
    rules[rule] = rules.get(rule, 0) + hits


def _rules_json(rules: dict[Rule, int]) -> list[dict[str, Any]]:
    ranked = sorted(rules.items(), key=lambda item: (-item[1], item[0]))
    return [{"line": line or None, "rule": rule, "count": hits} for (line, rule), hits in ranked]


def _asked(robots: RobotsTxt | None, agent: str, cap: float) -> tuple[float, str]:
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
