"""Which origins the close summary lists: the ``REP_REPORT_TOP`` most affected,
and every unreachable one (an outage an operator must see, never folded into
"the other N origins"; past :data:`UNREACHABLE_LISTED`, in one line of their own).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from scrapy_rep.report._records import OriginRecord, Totals

if TYPE_CHECKING:
    from scrapy_rep.origin import Origin

UNREACHABLE_LISTED = 100
"""Unreachable origins listed one by one in the summary (and evicted records kept for it)."""


def unreachable(record: OriginRecord) -> bool:
    """Its robots.txt was unreachable at the last fetch, or requests were dropped for it."""
    return record.outcome == "unreachable" or bool(record.dropped or record.dry_dropped)


class Listed:
    """The records the summary lists, gathered while records leave memory."""

    def __init__(self) -> None:
        self.kept: list[OriginRecord] = []  # evicted unreachable records, for the summary
        self.unlisted = Totals()  # unreachable records past UNREACHABLE_LISTED

    def evicted(self, record: OriginRecord) -> bool:
        """Keep an evicted unreachable record for the summary; True when it is
        past the bound and only counted (then it must not be listed either)."""
        if not unreachable(record):
            return False
        if len(self.kept) < UNREACHABLE_LISTED:
            self.kept.append(record)
            return False
        self.unlisted.add(record)
        return True

    def choose(
        self, top: int, evicted_top: list[OriginRecord], held: list[OriginRecord]
    ) -> tuple[list[tuple[OriginRecord, int]], Totals]:
        """The records to list, each with the number of records (evicted and
        held) its counts add up; and the totals of the unreachable ones not listed."""
        merged: dict[Origin, tuple[OriginRecord, int]] = {}
        seen: set[int] = set()
        for record in evicted_top + self.kept + held:  # oldest first
            if id(record) in seen or not (record.affected or unreachable(record)):
                continue
            seen.add(id(record))
            known = merged.get(record.origin)
            if known is not None:
                record.add(known[0])  # written to the file already: free to change
            merged[record.origin] = (record, 1 if known is None else known[1] + 1)
        ranked = sorted(
            (pair for pair in merged.values() if pair[0].affected),
            key=lambda pair: pair[0].affected,
            reverse=True,
        )[:top]
        listed = {id(pair[0]) for pair in ranked}
        outages = [
            pair for pair in merged.values() if unreachable(pair[0]) and id(pair[0]) not in listed
        ]
        unlisted = replace(self.unlisted)
        for record, parts in outages[UNREACHABLE_LISTED:]:
            unlisted.add(record)
            unlisted.records += parts - 1
        return ranked + outages[:UNREACHABLE_LISTED], unlisted
