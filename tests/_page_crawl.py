"""Crawl one page in a process of its own: what its directives did, the crawl's
peak memory and the longest time the reactor was blocked, as JSON.

Used by tests/test_page_directive_bounds.py: what reading a page's ``<meta>``
tags may cost is measured alone (one pytest process holds one reactor and the
other tests' memory). The spider yields ``follow`` URLs from the page (no
parsing of its own, so the page's cost is the middlewares'); with
``"scrapy_rep": false`` the same crawl runs on Scrapy alone.
Usage: python _page_crawl.py '{"page": URL, "follow": [URL, ...], "settings": {...}}'
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from crawls import peak_mb
from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess

TICK = 0.01  # seconds between the ticks a blocked reactor delays


class PageSpider(Spider):
    name = "page"
    page = ""
    follow: list[str] = []  # noqa: RUF012  (set by crawl(...))
    report: dict[str, Any] = {}  # noqa: RUF012

    async def start(self) -> Any:
        yield Request(self.page, callback=self.parse_page, dont_filter=True)

    def parse_page(self, response: Any) -> Any:
        meta = response.meta
        directives = meta.get("rep_directives")
        reasons = meta.get("rep_usage_reasons") or {}
        self.report.update(
            status=response.status,
            size=len(response.body),
            noindex=meta.get("rep_noindex"),
            nofollow=bool(directives and directives.nofollow),
            usage=meta.get("rep_usage"),
            usage_reasons=sum(len(found) for found in reasons.values()),
        )
        for url in self.follow:
            yield Request(url, callback=self.parse_next)

    def parse_next(self, response: Any) -> None:
        self.report.setdefault("followed", []).append(response.url)


class Stalls:
    """The longest gap between reactor ticks of TICK seconds."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.longest = 0.0

    def tick(self) -> None:
        now = time.monotonic()
        self.longest = max(self.longest, now - self.last - TICK)
        self.last = now


def main() -> None:
    job = json.loads(sys.argv[1])
    rep: dict[str, Any] = (
        {"ADDONS": {"scrapy_rep.Addon": 100}, "ROBOTSTXT_OBEY": True}
        if job.get("scrapy_rep", True)
        else {"ROBOTSTXT_OBEY": False}
    )
    settings = {
        **rep,
        "USER_AGENT": "ExampleBot/1.0 (+http://example.com/bot)",
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        **job["settings"],
    }
    process = CrawlerProcess(settings, install_root_handler=False)
    crawler = process.create_crawler(PageSpider)
    report: dict[str, Any] = {}
    stalls = Stalls()

    from twisted.internet import task

    def opened(spider: Spider) -> None:
        stalls.last = time.monotonic()
        task.LoopingCall(stalls.tick).start(TICK)

    from scrapy import signals

    crawler.signals.connect(opened, signal=signals.spider_opened)
    process.crawl(crawler, page=job["page"], follow=job.get("follow", []), report=report)
    process.start()
    stats = crawler.stats.get_stats() if crawler.stats else {}
    report.update(
        peak_mb=peak_mb(),
        blocked_s=round(stalls.longest, 3),
        stats={k: v for k, v in stats.items() if k.startswith("rep/")},
    )
    print(json.dumps(report, default=str))


if __name__ == "__main__":
    main()
