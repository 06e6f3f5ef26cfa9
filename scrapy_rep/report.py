"""What robots.txt did to each origin of a crawl, told at INFO and written for audits.

(Interface only; the implementation follows.) The middleware and the fetcher
call these methods; nothing else does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Entry
    from scrapy_rep.robotstxt import Decision


class CrawlReport:
    """Per-origin account of what robots.txt changed in this crawl."""

    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.config = config

    def fetched(self, origin: Origin, entry: Entry) -> None:
        """A robots.txt fetch ended (or Redis answered for it) with ``entry``."""

    def forbidden(self, origin: Origin, decision: Decision, *, dry_run: bool) -> None:
        """A request was forbidden (``dry_run``: let through anyway)."""

    def dropped(self, origin: Origin, reason: str, *, dry_run: bool) -> None:
        """A request was dropped because robots.txt is unreachable (``REP_UNREACHABLE``)."""

    def paced(self, origin: Origin, delay: float) -> None:
        """A request was spaced by the origin's delay (Crawl-delay / Request-rate)."""
