"""Run one crawl in a process of its own and print what happened and its peak memory, as JSON.

Used by tests/test_hostile_servers.py and test_hostile_downloads.py: a crawl that could inflate a
compression bomb or keep a header flood must be measured alone (one pytest
process holds one reactor and all the other tests' memory).
Usage: python _measured_crawl.py '{"urls": [...], "settings": {...}}'
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import sent_stamp
from crawls import peak_mb
from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess
from twisted.python.failure import Failure
from twisted.web._newclient import HTTPClientParser


class Recorder(Spider):
    name = "measured"
    urls: list[str] = []  # noqa: RUF012  (set by crawl(urls=...))
    seen: dict[str, str] = {}  # noqa: RUF012

    async def start(self) -> Any:
        for url in self.urls:
            yield Request(url, callback=self.parse, errback=self.failed, dont_filter=True)

    def parse(self, response: Any) -> None:
        self.seen[response.request.url] = f"HTTP {response.status}"

    def failed(self, failure: Failure) -> None:
        request = getattr(failure, "request", None)
        self.seen[request.url if request else "?"] = type(failure.value).__name__


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage()[:300])


def main() -> None:
    job = json.loads(sys.argv[1])
    errors = _Errors()
    logging.getLogger().addHandler(errors)
    settings = {
        **sent_stamp.SETTINGS,
        "ADDONS": {"scrapy_rep.Addon": 100},
        "ROBOTSTXT_OBEY": True,
        "USER_AGENT": "ExampleBot/1.0 (+http://example.com/bot)",
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "REMOTE_CONTROL_ENABLED": False,
        **job["settings"],
    }
    process = CrawlerProcess(settings, install_root_handler=False)
    crawler = process.create_crawler(Recorder)
    process.crawl(crawler, urls=job["urls"], seen={})
    process.start()
    stats = crawler.stats.get_stats() if crawler.stats else {}
    report = {
        "peak_mb": peak_mb(),
        "seen": crawler.spider.seen if crawler.spider else {},
        "stats": {k: v for k, v in stats.items() if k.startswith(("rep/", "httpcompression"))},
        "errors": errors.messages,
        "patched": getattr(HTTPClientParser.dataReceived, "_rep_limited", False),
    }
    print(json.dumps(report, default=str))


if __name__ == "__main__":
    main()
