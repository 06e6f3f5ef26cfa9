"""The crawl's one context: what scrapy-rep's components in one crawl share.

Held by the crawler, so it lives and dies with the crawl and no module keeps a
table of crawlers (docs/development.md). The first component Scrapy builds
makes it (:func:`crawl_context`); the layers above put their parts in it
(:func:`scrapy_rep._robots.robots_service`,
:func:`scrapy_rep.frontier.shared.frontier_of`,
:meth:`scrapy_rep.evidence.Evidence.of`): this module sits below them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_rep._slots import Waiting
from scrapy_rep.config import Config

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

_ON_CRAWLER = "_scrapy_rep_context"
"""The crawler's attribute that holds its context."""


class CrawlContext:
    """One crawl's shared state (see the module docstring)."""

    __slots__ = ("_waiting", "config", "crawler", "evidence", "frontier", "robots", "robots_off")

    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.config = config
        self._waiting: Waiting | None = None
        # Places filled by the layers above, which own their types: the robots
        # service (or, in robots_off, why this crawl has none), the frontier
        # queues' shared state, the evidence archive.
        self.robots: Any = None
        self.robots_off: str | None = None
        self.frontier: Any = None
        self.evidence: Any = None

    @property
    def waiting(self) -> Waiting:
        """The requests waiting outside the downloader's active set, every
        middleware's together (one ``REP_MAX_WAITING``)."""
        if self._waiting is None:
            self._waiting = Waiting(self.crawler, self.config.max_waiting)
        return self._waiting


def crawl_context(crawler: Crawler) -> CrawlContext:
    """The crawl's context, made on the first call with its settings read and
    checked (an unusable value raises InvalidSetting, on each call)."""
    context: CrawlContext | None = getattr(crawler, _ON_CRAWLER, None)
    if context is None:
        context = CrawlContext(crawler, Config.from_settings(crawler.settings))
        setattr(crawler, _ON_CRAWLER, context)
    return context
