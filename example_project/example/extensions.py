"""Extensions of the example project."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.httpobj import urlparse_cached

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class RobotsReport:
    """Write what each robots.txt said, and the crawl's stats, to a JSON file.

    Enabled by the ``ROBOTS_REPORT_FILE`` setting (the demo passes it with -s).
    Listens to scrapy-rep's ``robotstxt_parsed`` signal, and to Scrapy's own
    ``robots_parsed`` so that a crawl with Scrapy's middleware reports too;
    and to scrapy-rep's ``request_forbidden``, which names every request
    robots.txt forbade, with the deciding line, even one without an errback.
    """

    def __init__(self, crawler: Crawler, path: str) -> None:
        self.crawler = crawler
        self.path = path
        self.user_agent = crawler.settings.get("ROBOTSTXT_USER_AGENT") or "*"
        # origin URL -> what its robots.txt says for our user agent
        self.robots: dict[str, dict[str, Any]] = {}
        self.forbidden: list[dict[str, Any]] = []  # requests robots.txt forbade
        crawler.signals.connect(self.scrapy_robots_parsed, signal=signals.robots_parsed)
        try:
            from scrapy_rep import signals as rep_signals
        except ImportError:
            pass
        else:
            crawler.signals.connect(self.rep_robots_parsed, signal=rep_signals.robotstxt_parsed)
            crawler.signals.connect(
                self.rep_request_forbidden, signal=rep_signals.request_forbidden
            )
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotsReport:
        path = crawler.settings.get("ROBOTS_REPORT_FILE")
        if not path:
            raise NotConfigured("ROBOTS_REPORT_FILE is not set")
        return cls(crawler, path)

    def rep_robots_parsed(self, robots: Any, origin: Any, **kwargs: Any) -> None:
        self.robots[_origin_url(origin)] = {
            "crawl_delay": robots.crawl_delay(user_agent=self.user_agent),
            "request_rate": robots.request_rate(user_agent=self.user_agent),
            "sitemaps": list(robots.sitemaps),
        }

    def rep_request_forbidden(self, request: Any, decision: Any, **kwargs: Any) -> None:
        self.forbidden.append({"url": request.url, "line": decision.line, "rule": decision.rule})

    def scrapy_robots_parsed(self, robotparser: Any, request: Any, **kwargs: Any) -> None:
        parts = urlparse_cached(request)
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin in self.robots or not hasattr(robotparser, "crawl_delay"):
            return
        self.robots[origin] = {"crawl_delay": robotparser.crawl_delay(self.user_agent)}

    def spider_closed(self, spider: Any, reason: str) -> None:
        assert self.crawler.stats is not None
        report = {
            "reason": reason,
            "robots": self.robots,
            "forbidden": self.forbidden,
            "stats": self.crawler.stats.get_stats(),
        }
        with open(self.path, "w", encoding="utf-8") as file:
            json.dump(report, file, indent=1, default=str)


def _origin_url(origin: Any) -> str:
    """scrapy-rep names an origin by a URL or a (scheme, host, port) tuple."""
    if isinstance(origin, tuple) and len(origin) == 3:
        scheme, host, port = origin
        return f"{scheme}://{host}:{port}"
    return str(origin).rstrip("/")
