"""Run one crawl on Twisted's epoll reactor and print what happened, as JSON.

Used by tests/test_middleware_waiting.py in a subprocess (one pytest process
has one reactor). Usage: python _epoll_crawl.py ORIGIN COUNT
(ORIGIN is a server whose robots.txt disallows /private).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import sent_stamp
from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess
from twisted.python.failure import Failure


class Waiters(Spider):
    name = "epoll-waiters"
    origin = ""
    count = 0

    async def start(self) -> Any:
        for i in range(self.count):
            yield Request(f"{self.origin}/private/{i}", errback=self.failed)
        yield Request(f"{self.origin}/public", errback=self.failed)

    def parse(self, response: Any) -> None:
        pass

    def failed(self, failure: Failure) -> None:
        pass


def main() -> None:
    origin, count = sys.argv[1], int(sys.argv[2])
    process = CrawlerProcess(
        {
            **sent_stamp.SETTINGS,
            "TWISTED_REACTOR": "twisted.internet.epollreactor.EPollReactor",
            "ADDONS": {"scrapy_rep.Addon": 100},
            "ROBOTSTXT_OBEY": True,
            "USER_AGENT": "ExampleBot/1.0",
            "CONCURRENT_REQUESTS": 64,
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
            "REMOTE_CONTROL_ENABLED": False,
            "REP_FETCH_RETRIES": 0,
        },
        install_root_handler=False,
    )
    crawler = process.create_crawler(Waiters)
    process.crawl(crawler, origin=origin, count=count)
    process.start()
    from twisted.internet import reactor

    stats = crawler.stats.get_stats() if crawler.stats else {}
    print(
        json.dumps(
            {
                "reactor": type(reactor).__name__,
                "stats": {k: v for k, v in stats.items() if k.startswith("rep/")},
                "finish_reason": stats.get("finish_reason"),
            }
        )
    )


if __name__ == "__main__":
    main()
