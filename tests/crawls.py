"""Run real Scrapy crawls in tests (import as ``from crawls import ...``).

``await run_crawl(urls, settings)`` crawls ``urls`` (strings or Requests) with
scrapy-rep enabled through its add-on and returns what happened to each
request: responses by URL, failures (exceptions) by URL, and the stats.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import children
import sent_stamp
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IResolverSimple
from twisted.python.failure import Failure
from zope.interface import implementer

from scrapy_rep import _clock

USER_AGENT = "ExampleBot/1.0 (+http://example.com/bot)"


@implementer(IResolverSimple)
class _LoopbackResolver:
    def __init__(self, fallback: IResolverSimple) -> None:
        self.fallback = fallback

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:
        if name.endswith(".test"):
            return succeed("127.0.0.1")
        return self.fallback.getHostByName(name, timeout)


@contextmanager
def loopback_names() -> Iterator[None]:
    """Every ``*.test`` host name resolves to 127.0.0.1 meanwhile, so that one
    local server stands for thousands of origins (``http://o1.test:PORT``, ...).
    (Scrapy installs DNS_RESOLVER only when a CrawlerProcess starts.)"""
    from twisted.internet import reactor

    previous = reactor.resolver  # type: ignore[attr-defined]
    reactor.installResolver(_LoopbackResolver(previous))  # type: ignore[attr-defined]
    try:
        yield
    finally:
        reactor.installResolver(previous)  # type: ignore[attr-defined]


BASE_SETTINGS: dict[str, Any] = {
    **sent_stamp.SETTINGS,
    "ADDONS": {"scrapy_rep.Addon": 100},
    "ROBOTSTXT_OBEY": True,
    "USER_AGENT": USER_AGENT,
    "LOG_LEVEL": "DEBUG",
    "TELNETCONSOLE_ENABLED": False,
    "REP_FETCH_TIMEOUT": 10.0,
    "REP_FETCH_RETRIES": 0,
    "RETRY_ENABLED": False,
    "DOWNLOAD_TIMEOUT": 20,
}


PATIENT: dict[str, Any] = {"REP_FETCH_TIMEOUT": 30.0, "DOWNLOAD_TIMEOUT": 60}
"""For broad crawls whose test is not about timeouts: a busy machine may take
seconds to accept hundreds of connections at once, and an answer that comes
late must not count as unreachable."""


@dataclass
class CrawlResult:
    crawler: Crawler
    responses: dict[str, Response] = field(default_factory=dict)
    failures: dict[str, Failure] = field(default_factory=dict)
    failed_at: dict[str, float] = field(default_factory=dict)
    """When each failure reached its errback (time.monotonic())."""
    downloaded: list[tuple[str, int, float]] = field(default_factory=list)
    """(url, status, ``_clock.now()``) of each response as the downloader got it
    (``response_downloaded``: when scrapy-rep's slow-down learns of a 429/503),
    in scrapy-rep's time, as the send stamps (sent_stamp.py)."""

    @property
    def stats(self) -> dict[str, Any]:
        assert self.crawler.stats is not None
        return self.crawler.stats.get_stats()

    def rep_stats(self) -> dict[str, Any]:
        return {k: v for k, v in self.stats.items() if k.startswith("rep/")}

    def failed_with(self, url: str) -> type[BaseException] | None:
        failure = self.failures.get(url)
        return None if failure is None else type(failure.value)


class ListSpider(Spider):
    """Requests every URL of ``urls``; ``follow(response)`` may yield more."""

    name = "rep-test"

    def __init__(
        self,
        urls: list[str | Request],
        result: CrawlResult,
        follow: Callable[[Response], list[Request]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.urls = urls
        self.result = result
        self.follow = follow

    async def start(self) -> AsyncIterator[Request]:
        for url in self.urls:
            request = url if isinstance(url, Request) else Request(url, dont_filter=True)
            yield request.replace(callback=self.parse, errback=self.failed)

    def parse(self, response: Response) -> Any:
        self.result.responses[response.request.url if response.request else response.url] = response
        if self.follow is not None:
            for request in self.follow(response):
                yield request.replace(callback=self.parse, errback=self.failed)

    def failed(self, failure: Failure) -> None:
        request = getattr(failure, "request", None)
        url = request.url if request is not None else "?"
        self.result.failures[url] = failure
        self.result.failed_at[url] = time.monotonic()


def _later(seconds: float) -> Deferred[None]:
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    return deferLater(reactor, seconds)  # type: ignore[arg-type]


async def sleep(seconds: float) -> None:
    """Let time pass in a test coroutine (pytest-twisted runs them as Deferreds)."""
    await _later(seconds)


async def spider_sleep(seconds: float) -> None:
    """Let time pass in a spider's coroutine (an asyncio task on the asyncio
    reactor, a Deferred on Twisted's own)."""
    await maybe_deferred_to_future(_later(seconds))


class Event:
    """``asyncio.Event`` for spiders' coroutines, on any reactor (asyncio's needs
    a running asyncio loop, which Twisted's own reactor has not)."""

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[Deferred[None]] = []

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(None)

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if not self._set:
            waiter: Deferred[None] = Deferred()
            self._waiters.append(waiter)
            await maybe_deferred_to_future(waiter)


async def run_crawl(
    urls: list[str | Request],
    settings: dict[str, Any] | None = None,
    *,
    follow: Callable[[Response], list[Request]] | None = None,
    before: Callable[[Crawler], None] | None = None,
) -> CrawlResult:
    crawler = get_crawler(ListSpider, {**BASE_SETTINGS, **(settings or {})})
    result = CrawlResult(crawler)

    def downloaded(response: Response, request: Request, spider: Any = None) -> None:
        result.downloaded.append((request.url, response.status, _clock.now()))

    crawler.signals.connect(downloaded, signal=signals.response_downloaded, weak=False)
    if before is not None:
        before(crawler)
    # a Deferred wrapping the coroutine: pytest-twisted runs test coroutines as Deferreds
    await deferred_from_coro(crawler.crawl_async(urls=urls, result=result, follow=follow))
    return result


def stat_of(crawlers: list[Crawler], name: str) -> int:
    """The stat ``name`` of the crawl under way (``run_crawl(before=crawlers.append)``;
    0 before it starts): what a test waits on while the crawl runs."""
    stats = crawlers[0].stats if crawlers else None
    return int(stats.get_value(name, 0)) if stats is not None else 0


def peak_mb() -> float:
    """This process's peak resident memory. VmHWM where there is one: ru_maxrss
    keeps, across exec, the peak of the process it was forked (or vforked) from:
    a pytest process's own memory."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_reporting(*args: str, timeout: float = 60) -> tuple[dict[str, Any], str]:
    """Run ``python *args`` in a process of its own, which must succeed and print
    a JSON report as its last line: (that report, what it logged on stderr)."""
    run = children.run(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return report, run.stderr
