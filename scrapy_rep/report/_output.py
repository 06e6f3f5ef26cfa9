"""The crawl report's output: the REP_REPORT file, and the text of the INFO lines and close summary.

:class:`OriginText` and :class:`Summary` are formatted only if their line is emitted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, replace
from typing import IO, TYPE_CHECKING, Any

from scrapy_rep.report._records import COUNTS, Totals

if TYPE_CHECKING:
    from scrapy_rep.origin import Origin
    from scrapy_rep.report._records import OriginRecord, Rule

# The report's one logger name (docs/reference.md).
logger = logging.getLogger("scrapy_rep.report")

SHOWN_RULES = 3
"""Rules per origin in the close summary."""


class ReportFile:
    """The REP_REPORT file: written as records leave memory; on the first error,
    one ERROR and no more writing (the crawl and the summary go on)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines = path.lower().endswith(".jsonl")
        self.records = 0
        self.failed = False
        self.closed = False  # a record evicted after spider close must not reopen ("w") it
        self._file: IO[str] | None = None

    def open(self) -> None:
        if self._file is not None or self.failed or self.closed:
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
        self.closed = True
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
            "Cannot write the report file REP_REPORT = %r (%s); the crawl "
            "goes on and its summary is still logged at spider close",
            self.path,
            exc.strerror or exc,
        )
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):  # the ERROR above says it all
                file.close()


class OriginText:
    """An origin formatted only if the log record is emitted."""

    __slots__ = ("origin",)

    def __init__(self, origin: Origin) -> None:
        self.origin = origin

    def __str__(self) -> str:
        return self.origin.text


@dataclass(frozen=True)
class Summary:
    """The close summary, formatted only if INFO is emitted."""

    totals: Totals
    top: list[tuple[OriginRecord, int]]  # the REP_REPORT_TOP origins, then the unreachable ones
    unlisted: Totals  # unreachable origins past the listed ones
    bound: int  # REP_CACHE_MAX_ORIGINS
    report_file: ReportFile | None

    def __str__(self) -> str:
        totals = self.totals
        # past the bound an origin may have several records: say records, not origins
        noun = "origin record" if totals.evicted else "origin"
        lines = [
            f"Crawl report: robots.txt changed what happened to "
            f"{totals.affected_origins} of {_plural(totals.records, noun)} "
            f"({_counts(totals)})"
        ]
        if totals.evicted:
            bound = self.bound
            lines.append(
                f"  more origins than REP_CACHE_MAX_ORIGINS = {bound}: {totals.evicted} records "
                "left memory early; an origin met again after that has another record"
            )
        rest = replace(totals)
        for record, parts in self.top:
            lines += _origin_lines(record)
            rest.records -= parts
            if record.affected:  # else an unreachable origin nothing was done to
                rest.affected_origins -= parts
            for name in COUNTS:
                setattr(rest, name, getattr(rest, name) - getattr(record, name))
        unlisted = self.unlisted
        if unlisted.records:  # outages are never folded into "the other ..."
            for name in Totals.__slots__:
                setattr(rest, name, getattr(rest, name) - getattr(unlisted, name))
            lines.append(
                f"  {_plural(unlisted.records, 'more ' + noun)} with robots.txt unreachable: "
                f"{_counts(unlisted)}"
                + (" (each in the REP_REPORT file)" if self.report_file is not None else "")
            )
        if rest.records:
            what = _counts(rest) if rest.affected_origins else "none affected"
            others = "the other" if self.top or unlisted.records else "all"
            lines.append(f"  {others} {_plural(rest.records, noun)}: {what}")
        report_file = self.report_file
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
    lines = [f"  {record.origin.text}  {said}"]
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
            + cause(record, record.pace)
        )
    return lines


def cause(record: OriginRecord, delay: float) -> str:
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
    parts = [f"{getattr(totals, name)} {name}" for name in ("forbidden", "dropped", "paced")]
    if totals.dry_forbidden or totals.dry_dropped:
        parts.append(
            f"dry run: {totals.dry_forbidden} would be forbidden, "
            f"{totals.dry_dropped} would be dropped"
        )
    requests = _plural(totals.forbidden + totals.dropped + totals.paced, "request")
    return f"{requests}: {', '.join(parts)}"


def _plural(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
