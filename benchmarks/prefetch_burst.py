"""New origins met at once: robots.txt downloads in flight and peak memory.

``python benchmarks/prefetch_burst.py --mode queue`` serves ``--origins``
small sites (benchmarks/_site.py, in its own process, each its own loopback
address) and crawls ``--pages`` pages of each in this process: one seed page
yields every other request in one callback, one run of pushes as a page
full of new links makes (``--start``: as start requests instead). ``--mode
queue`` keeps scrapy-rep's frontier queue, ``noqueue`` sets
``REP_FRONTIER = False``. Prints one JSON line: pages, the most robots.txt
downloads in Scrapy's downloader at once (from reaching it to leaving it),
peak RSS of this process, seconds, robots.txt requests served.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from _site import Site, raise_open_files_limit
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler, CrawlerProcess
from scrapy.http import Response
from twisted.python.failure import Failure


class Burst(Spider):
    name = "prefetch-burst"

    def __init__(self, urls: list[str], seed: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls, self.seed_first = urls, seed
        self.pages = self.failed = 0
        self.inside: set[Request] = set()
        self.most_robots = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Burst:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.reached, signal=signals.request_reached_downloader)
        crawler.signals.connect(spider.left, signal=signals.request_left_downloader)
        return spider

    async def start(self) -> AsyncIterator[Request]:
        if self.seed_first:
            yield Request(self.urls[0], callback=self.seed, errback=self.error)
            return
        for url in self.urls:
            yield Request(url, callback=self.parse, errback=self.error, dont_filter=True)

    def seed(self, response: Response) -> Iterator[Request]:
        self.pages += 1
        for url in self.urls[1:]:
            yield Request(url, callback=self.parse, errback=self.error, dont_filter=True)

    def parse(self, response: Response) -> None:
        self.pages += 1

    def error(self, failure: Failure) -> None:
        self.failed += 1

    def reached(self, request: Request) -> None:
        if request.url.endswith("/robots.txt"):
            self.inside.add(request)
            self.most_robots = max(self.most_robots, len(self.inside))

    def left(self, request: Request) -> None:
        self.inside.discard(request)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=2000)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--mode", choices=("queue", "noqueue"), default="queue")
    parser.add_argument("--start", action="store_true", help="all pages as start requests")
    args = parser.parse_args()
    raise_open_files_limit()
    site = Site(args.origins)
    paths = ["/", *(f"/p/{n}" for n in range(1, args.pages))]
    urls = [origin + path for path in paths for origin in site.info["origins"]]
    settings = {
        "ROBOTSTXT_OBEY": True,
        "ADDONS": {"scrapy_rep.Addon": 100},
        "REP_META_ROBOTS": False,
        "REP_FRONTIER": args.mode == "queue",
        "CONCURRENT_REQUESTS": 100,
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "RETRY_ENABLED": False,
        "USER_AGENT": "BenchBot/1.0 (+http://127.0.0.1/bot.html)",
    }
    started = time.monotonic()
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(Burst)
    process.crawl(crawler, urls=urls, seed=not args.start)
    process.start()
    seconds = time.monotonic() - started
    served = site.control("/__stats")
    site.stop()
    spider = crawler.spider
    assert isinstance(spider, Burst)
    print(
        json.dumps(
            {
                "mode": args.mode,
                "origins": args.origins,
                "pages": spider.pages,
                "failed": spider.failed,
                "most_robots_in_flight": spider.most_robots,
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "seconds": round(seconds, 1),
                "robots_served": served["robots_requests"],
                "stats": {
                    k: v
                    for k, v in crawler.stats.get_stats().items()
                    if k.startswith(("rep/frontier", "rep/waited"))
                },
            }
        )
    )


if __name__ == "__main__":
    main()
