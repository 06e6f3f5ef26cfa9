"""Extensions of the example project."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class StatsFile:
    """Write the crawl's finish reason and stats to a JSON file at close.

    Enabled by the ``STATS_FILE`` setting (the demo passes it with -s). What
    robots.txt did to each origin is not here: scrapy-rep writes it itself to
    ``REP_REPORT``; the demo reads both.
    """

    def __init__(self, crawler: Crawler, path: str) -> None:
        self.crawler = crawler
        self.path = path
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StatsFile:
        path = crawler.settings.get("STATS_FILE")
        if not path:
            raise NotConfigured("STATS_FILE is not set")
        return cls(crawler, path)

    def spider_closed(self, spider: Any, reason: str) -> None:
        assert self.crawler.stats is not None
        stats = {"reason": reason, "stats": self.crawler.stats.get_stats()}
        with open(self.path, "w", encoding="utf-8") as file:
            json.dump(stats, file, indent=1, default=str)
