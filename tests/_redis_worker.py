"""One Scrapy worker process of the multi-process Redis tests (tests/test_redis_cluster.py).

    python _redis_worker.py '{"name": "w1", "urls": [...], "settings": {...}}'

Crawls ``urls`` with scrapy-rep (its add-on), every request carrying the
header ``X-Worker: <name>``, and prints one JSON line when done: the URLs it
got responses for, the ones that failed (exception class name), when it
received each host's first 429/503 answer, its ``rep/`` stats and finish
reason. With ``"scrapy_redis": true`` it schedules through scrapy-redis's
scheduler and dupefilter (settings must hold their keys);
with ``"loopback": true`` every ``*.test`` host name resolves to 127.0.0.1
(one local server stands for many origins); with ``"stall": seconds`` the
spider blocks the event loop that long halfway through its start requests;
with ``"dont_filter": true`` its requests skip the dupefilter; with
``"scheduled": path`` it makes that file once its last start request is
scheduled (the engine asked for the next one).
The report also says when the worker learned each host's pause from another
worker (the INFO line ``... paused by another worker``, when it was logged),
and when it began a pause of its own (``paused``: its INFO line).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import sent_stamp
from scrapy import Request, Spider, signals
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response
from scrapy.resolver import CachingThreadedResolver
from scrapy.settings import default_settings
from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

BASE_SETTINGS: dict[str, Any] = {
    **sent_stamp.SETTINGS,
    "ADDONS": {"scrapy_rep.Addon": 100},
    "ROBOTSTXT_OBEY": True,
    "USER_AGENT": "ExampleBot/1.0 (+http://example.com/bot)",
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": False,
    "REMOTE_CONTROL_ENABLED": False,
    # Timeouts far past any stall of a loaded machine: no worker test is about
    # one, and a healthy download cut by one (a server thread that read its
    # request 5 s late beside a second suite) failed a test that was not; a
    # test that holds an answer releases it itself.
    "REP_FETCH_TIMEOUT": 60.0,
    "REP_FETCH_RETRIES": 0,
    "RETRY_ENABLED": False,
    "DOWNLOAD_TIMEOUT": 60,
    "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
}
SCRAPY_REDIS_SETTINGS: dict[str, Any] = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    # The first worker to finish must not flush the queue the others still use.
    "SCHEDULER_PERSIST": True,
}


# Scrapy 2.15 renamed DNS_RESOLVER
RESOLVER_SETTING = (
    "TWISTED_DNS_RESOLVER" if hasattr(default_settings, "TWISTED_DNS_RESOLVER") else "DNS_RESOLVER"
)


class LoopbackResolver(CachingThreadedResolver):
    """``*.test`` names are 127.0.0.1; others resolve as usual."""

    def getHostByName(self, name: str, timeout: Any = ()) -> Deferred[str]:
        if name.endswith(".test"):
            return succeed("127.0.0.1")
        return super().getHostByName(name, timeout)


class WorkerSpider(Spider):
    name = "rep-worker"

    def __init__(
        self,
        urls: list[str],
        stall: float = 0.0,
        dont_filter: bool = False,
        scheduled: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.urls = urls
        self.scheduled = scheduled
        self.stall = stall
        self.dont_filter = dont_filter
        self.responses: list[str] = []
        self.failures: dict[str, str] = {}

    async def start(self) -> AsyncIterator[Request]:
        for n, url in enumerate(self.urls):
            if self.stall and n == len(self.urls) // 2:
                # The robots.txt lookups of the first half start (connections
                # to Redis open), then the event loop blocks, as a burst of
                # work at crawl start blocks it.
                await asyncio.sleep(0.02)
                time.sleep(self.stall)  # noqa: ASYNC251
            yield Request(
                url, callback=self.parse, errback=self.failed, dont_filter=self.dont_filter
            )
        if self.scheduled:
            Path(self.scheduled).touch()  # noqa: ASYNC240 (one empty file, once)

    def parse(self, response: Response) -> None:
        self.responses.append(response.url)

    def failed(self, failure: Failure) -> None:
        request = getattr(failure, "request", None)
        url = request.url if request is not None else "?"
        self.failures[url] = type(failure.value).__name__


class PausesLearned(logging.Handler):
    """When this worker learned each host's pause from another worker, and
    when it began one of its own (its INFO line, logged once the middleware
    has read the answer and written the pause)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.hosts: dict[str, float] = {}  # host -> when the INFO line was logged
        self.own: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        found = re.match(r"https?://([^:/ ]+)", message)
        if found is None:
            return
        if "paused by another worker" in message:
            self.hosts.setdefault(found.group(1), record.created)
        elif ": no request to it for" in message:
            self.own.setdefault(found.group(1), record.created)


def main() -> None:
    config = json.loads(sys.argv[1])
    settings = {**BASE_SETTINGS, **config.get("settings", {})}
    settings["DEFAULT_REQUEST_HEADERS"] = {"X-Worker": config["name"]}
    if config.get("scrapy_redis"):
        settings = {**SCRAPY_REDIS_SETTINGS, **settings}
    if config.get("loopback"):
        settings[RESOLVER_SETTING] = "__main__.LoopbackResolver"
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(WorkerSpider)
    slowed: dict[str, float] = {}  # host -> when its first 429/503 answer came

    def downloaded(response: Response, request: Request) -> None:
        if response.status in (429, 503):
            slowed.setdefault(urlparse(request.url).hostname or "", time.time())

    crawler.signals.connect(downloaded, signal=signals.response_downloaded)
    opened: list[float] = []  # when the spider opened (and shared state subscribed)

    def spider_opened() -> None:
        opened.append(time.time())

    crawler.signals.connect(spider_opened, signal=signals.spider_opened)
    learned = PausesLearned()
    logging.getLogger("scrapy_rep.slowdown").addHandler(learned)
    process.crawl(
        crawler,
        urls=config["urls"],
        stall=config.get("stall", 0.0),
        dont_filter=config.get("dont_filter", False),
        scheduled=config.get("scheduled", ""),
    )
    process.start()
    spider = crawler.spider
    stats = crawler.stats.get_stats()
    print(
        json.dumps(
            {
                "name": config["name"],
                "responses": spider.responses,
                "failures": spider.failures,
                "slowed": slowed,
                "learned": learned.hosts,
                "paused": learned.own,
                "opened": opened[0] if opened else None,
                "stats": {k: v for k, v in stats.items() if k.startswith("rep/")},
                "finish_reason": stats.get("finish_reason"),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
