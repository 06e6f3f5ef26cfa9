"""What robots.txt did to each origin of a crawl, told at INFO and written for audits.

The middleware and the fetcher call the four hooks; ``paced`` runs for every
request spaced by a delay, so it is a lookup, a comparison and an increment.
At most ``REP_CACHE_MAX_ORIGINS`` records are held, evicted by second chance
over their creation order, so ``paced`` needs no bookkeeping of its own
(docs/report.md, "Memory"). Records and totals: ``_records``; the
``REP_REPORT`` file and the text: ``_output``.
"""

from __future__ import annotations

import heapq
import logging
from collections import OrderedDict
from itertools import count
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from scrapy import signals

from scrapy_rep.origin import origin_of
from scrapy_rep.report._listed import Listed
from scrapy_rep.report._output import OriginText, ReportFile, Summary, cause
from scrapy_rep.report._records import OriginRecord, Totals, asked_delay, count_rule

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler

    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Entry
    from scrapy_rep.robotstxt import Decision

__all__ = ["CrawlReport"]

logger = logging.getLogger("scrapy_rep.report")

_WOULD_FORBID = "would forbid requests (dry run: let through)"


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
        self._listed = Listed()  # and every unreachable origin, never folded away
        self.file = ReportFile(config.report) if config.report else None
        # set by scrapy_rep.challenges: more of the summary at close, each after it;
        # and at close, (origin, its stop-signal state) for the file's records
        self.sections: list[Callable[[], str | None]] = []
        self.stop_signals: Callable[[], list[tuple[str, dict[str, Any]]]] | None = None
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
        record.asked, record.source = asked_delay(robots, self._ua, self.config.max_crawl_delay)
        if robots is not None:
            record.sitemaps = len(robots.sitemaps)

    def forbidden(self, origin: Origin, decision: Decision, *, dry_run: bool) -> None:
        """A request was forbidden (``dry_run``: let through anyway)."""
        record = self._records.get(origin) or self._new(origin)
        rule = (decision.line or 0, decision.rule or "")
        if dry_run:
            record.dry_forbidden += 1
            count, rules, what = record.dry_forbidden, record.dry_rules, _WOULD_FORBID
        else:
            record.forbidden += 1
            count, rules, what = record.forbidden, record.rules, "forbids requests"
        count_rule(rules, rule)
        if count == 1:  # told once per origin (again only for a record rebuilt after eviction)
            logger.info(
                "robots.txt of %s %s: 1 so far, the first by line %d (%s); more are "
                "counted for the summary at spider close",
                OriginText(origin),
                what,
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
            OriginText(origin),
            delay,
            cause(record, delay),
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
        if self._listed.evicted(record):
            return  # an outage past the summary's bound: counted apart, not listed
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

    def _stop_signals(self, held: list[OriginRecord]) -> list[OriginRecord]:
        """Each origin's stop-signal state on its held record; the records
        made for origins that have none held (or a second slot's state)."""
        if self.stop_signals is None or self.file is None:
            return []
        by_text = {record.origin.text: record for record in held}
        alone = []
        for text, state in self.stop_signals():
            record = by_text.get(text)
            if record is None or record.stop_signal is not None:
                origin = origin_of(urlparse(text))
                if origin is None:
                    continue
                record = OriginRecord(origin)
                alone.append(record)
            record.stop_signal = state
        return alone

    # -- open and close -----------------------------------------------------------------

    def _spider_opened(self) -> None:
        if self.file is not None:
            self.file.open()  # at start, so that a bad path is told before the crawl

    def _spider_closed(self, reason: str = "") -> None:
        held = list(self._records.values())
        self._records.clear()
        alone = self._stop_signals(held)
        for record in held:
            self._finish(record)
        if self.file is not None:
            for record in alone:  # robots.txt did nothing to them: in the file only
                self.file.write(record.as_json())
            self.file.close()  # first: a failing close is told before the summary
        evicted = [item[2] for item in sorted(self._evicted_top, key=lambda item: item[1])]
        listed, unlisted = self._listed.choose(self._top, evicted, held)
        logger.info("%s", Summary(self.totals, listed, unlisted, self._max, self.file))
        for section in self.sections:
            text = section()
            if text:
                logger.info("%s", text)
