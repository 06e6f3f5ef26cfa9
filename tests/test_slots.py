"""Crawl-delay as a download slot minimum (scrapy_rep._slots.SlotDelays).

Real crawls against real HTTP servers on 127.0.0.1 (tests/servers.py); the
servers record when the crawler sent every request (the moment its download
slot let it go, which is what a slot's delay spaces: sent_stamp.py), and the
tests check the gaps. A small
downloader middleware defined here calls ``SlotDelays.require`` the way
scrapy_rep's RobotsTxtMiddleware does, for requests carrying the meta key
``CRAWL_DELAY``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urljoin

import pytest
import pytest_twisted
import scrapy
import sent_stamp
from crawls import Event, spider_sleep
from packaging.version import Version
from pydispatch.dispatcher import getAllReceivers, liveReceivers
from scrapy import Request, Spider, signals
from scrapy.core.downloader import Downloader, Slot
from scrapy.crawler import Crawler
from scrapy.extensions.throttle import AutoThrottle
from scrapy.http import Response
from scrapy.utils.test import get_crawler
from servers import Reply, ScriptedServer, gaps

from scrapy_rep._slots import SlotDelays, internals_problems

pytestmark = pytest.mark.slow  # real-time delays

CRAWL_DELAY = "test_crawl_delay"
TOLERANCE = 0.05  # seconds: loopback and thread scheduling, far below any jitter
WARM_UP = "/_warm-up"

# Slot.jitter, DOWNLOAD_DELAY_JITTER and Downloader._delay/_jitter are Scrapy 2.19's;
# earlier versions have an on/off randomize_delay, which the crawl tests cover.
SCRAPY_2_19 = Version(scrapy.__version__) >= Version("2.19")
scrapy_2_19 = pytest.mark.skipif(not SCRAPY_2_19, reason="Scrapy < 2.19 has no Slot.jitter")
NO_JITTER = {"DOWNLOAD_DELAY_JITTER": 0.0} if SCRAPY_2_19 else {"RANDOMIZE_DOWNLOAD_DELAY": False}


def arrivals(site: ScriptedServer, prefix: str = "/") -> list[float]:
    """When the crawler sent the measured requests (as the server recorded
    them), in order."""
    return sorted(h.time for h in site.log() if h.path.startswith(prefix) and h.path != WARM_UP)


def assert_spaced(times: list[float], minimum: float, count: int) -> None:
    assert len(times) == count, f"expected {count} requests, the server saw {len(times)}"
    assert min(gaps(times)) >= minimum - TOLERANCE, (
        f"gaps {gaps(times)} undercut the {minimum} s minimum"
    )


# --- the crawl: a middleware standing in for RobotsTxtMiddleware, a spider -----------------------


class RequireCrawlDelay:
    """Calls SlotDelays.require(request, meta[CRAWL_DELAY]) from process_request."""

    def __init__(self, crawler: Crawler) -> None:
        self.slots = SlotDelays(crawler, max_slots=10_000)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RequireCrawlDelay:
        return cls(crawler)

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        delay = request.meta.get(CRAWL_DELAY)
        if delay is not None:
            self.slots.require(request, delay)


class WarmSpider(Spider):
    """Sends one request in a slot of its own before the measured ones.

    Scrapy sets up its download handler on the first request of a crawl; that
    delay is between the request's start and its arrival, and would shrink the
    first measured gap. Subclasses yield the measured requests from measured().
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.warmed_up = Event()

    def warm_up_url(self) -> str:
        raise NotImplementedError

    async def start(self) -> AsyncIterator[Request]:
        yield Request(
            urljoin(self.warm_up_url(), WARM_UP),
            meta={"download_slot": WARM_UP},
            callback=self.after_warm_up,
        )
        await self.warmed_up.wait()
        async for request in self.measured():
            yield request

    def after_warm_up(self, response: Response) -> None:
        self.warmed_up.set()

    async def measured(self) -> AsyncIterator[Request]:
        raise NotImplementedError
        yield


class WarmListSpider(WarmSpider):
    """Sends `requests`; the first response sends `then`."""

    name = "slots"
    requests: list[Request]
    then: list[Request]

    def __init__(
        self, requests: list[Request], then: list[Request] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.requests = requests
        self.then = then or []

    def warm_up_url(self) -> str:
        return self.requests[0].url

    async def measured(self) -> AsyncIterator[Request]:
        for request in self.requests:
            yield request

    def parse(self, response: Response) -> Iterator[Request]:
        then, self.then = self.then, []
        yield from then


def crawler_for(spidercls: type[Spider] = WarmListSpider, /, **settings: Any) -> Crawler:
    return get_crawler(
        spidercls,
        {
            **sent_stamp.SETTINGS,
            "DOWNLOADER_MIDDLEWARES": {RequireCrawlDelay: 100},
            "LOG_LEVEL": "INFO",
            "TELNETCONSOLE_ENABLED": False,  # as in crawls.py
            **settings,
        },
    )


def floored(url: str, delay: float, **meta: Any) -> Request:
    return Request(url, meta={CRAWL_DELAY: delay, **meta})


# --- Scrapy internals we rely on ---------------------------------------------------------------


@scrapy_2_19
def test_scrapy_internals_slot_delays_rely_on() -> None:
    """Fails when Scrapy changes the download slot internals that SlotDelays writes."""
    crawler = crawler_for(AUTOTHROTTLE_ENABLED=True)
    downloader = Downloader(crawler)
    try:
        assert internals_problems(object()) != [], "internals_problems checks nothing"
        assert internals_problems(downloader) == [], (
            "Scrapy's Downloader changed; scrapy_rep/_slots/ cannot apply Crawl-delay"
        )
        assert isinstance(downloader._delay, float), "Downloader._delay (default slot delay) moved"
        assert isinstance(downloader._jitter, float), "Downloader._jitter (default jitter) moved"
        assert hasattr(Slot, "jitter"), "Slot.jitter (Scrapy 2.19) is gone"

        # A slot created for a key reads delay and jitter from per_slot_settings:
        # that is how a minimum survives slot garbage collection.
        downloader.per_slot_settings["k"] = {"delay": 2.5, "jitter": 0.0}
        key, slot = downloader._get_slot(
            Request("http://example.com/", meta={"download_slot": "k"})
        )
        assert (key, slot.delay, slot.jitter) == ("k", 2.5, 0.0), (
            "Downloader._get_slot no longer creates slots from per_slot_settings"
        )
        assert slot.download_delay() == 2.5, "Slot.download_delay() with jitter 0 is not the delay"

        # The randomised delay stays within delay * (1 +/- jitter).
        slot.delay, slot.jitter = 2.0, 0.25
        draws = [slot.download_delay() for _ in range(2000)]
        assert min(draws) >= 1.5, "Slot.download_delay() changed its range"
        assert max(draws) <= 2.5, "Slot.download_delay() changed its range"

        # Garbage collection drops idle slots; the GC test calls this method directly.
        assert "age" in inspect.signature(downloader._slot_gc).parameters, (
            "Downloader._slot_gc(age) changed"
        )
        downloader._slot_gc(age=0)
        assert "k" not in downloader.slots, "Downloader._slot_gc(age=0) kept an idle slot"

        # AutoThrottle adjusts slot.delay from a response_downloaded handler,
        # where SlotDelays' own handler, connected later, re-clamps it.
        receivers = liveReceivers(
            getAllReceivers(crawler.signals.sender, signals.response_downloaded)
        )
        assert any(isinstance(getattr(r, "__self__", None), AutoThrottle) for r in receivers), (
            "AutoThrottle no longer listens to response_downloaded"
        )
    finally:
        downloader.close()


# --- behaviour in real crawls ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jitter", "minimum", "count"),
    [
        pytest.param(None, 1.0, 5, id="default-jitter-1s"),
        pytest.param(0.9, 0.5, 8, id="jitter-0.9-0.5s"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_jitter_never_undercuts_the_minimum(
    site: ScriptedServer, jitter: float | None, minimum: float, count: int
) -> None:
    settings = {} if jitter is None else {"DOWNLOAD_DELAY_JITTER": jitter}
    requests = [floored(site.url(f"/p{i}"), minimum) for i in range(count)]
    await crawler_for(**settings).crawl(requests=requests)
    assert_spaced(arrivals(site), minimum, count)


@pytest_twisted.ensureDeferred
async def test_minimum_applies_to_a_slot_that_already_exists(site: ScriptedServer) -> None:
    """Like robots.txt followed by pages: the first request creates the slot unfloored."""
    pages = [floored(site.url(f"/p{i}"), 0.5) for i in range(4)]
    crawler = crawler_for()
    await crawler.crawl(requests=[Request(site.url("/robots.txt"))], then=pages)
    assert_spaced(arrivals(site), 0.5, 5)


@pytest_twisted.ensureDeferred
async def test_autothrottle_cannot_decrease_below_the_minimum(site: ScriptedServer) -> None:
    minimum = 0.6
    crawler = crawler_for(
        AUTOTHROTTLE_ENABLED=True, AUTOTHROTTLE_START_DELAY=0.0, AUTOTHROTTLE_MAX_DELAY=5.0
    )
    # Premise: AutoThrottle does try to go below the minimum. This handler runs
    # after AutoThrottle's (extensions connect first) and before SlotDelays'
    # (connected at the first require()), so it sees AutoThrottle's choice.
    autothrottle_delays: list[float] = []

    def after_autothrottle(request: Request) -> None:
        slot = crawler.engine.downloader.slots[request.meta["download_slot"]]
        autothrottle_delays.append(slot.delay)

    crawler.signals.connect(after_autothrottle, signal=signals.response_downloaded)
    requests = [floored(site.url(f"/p{i}"), minimum) for i in range(5)]
    await crawler.crawl(requests=requests)

    assert min(autothrottle_delays) < minimum, (
        f"AutoThrottle did not decrease: {autothrottle_delays}"
    )
    assert_spaced(arrivals(site), minimum, 5)


@pytest_twisted.ensureDeferred
async def test_autothrottle_can_still_go_above_the_minimum(site: ScriptedServer) -> None:
    """Slow responses: AutoThrottle raises the delay to latency / target concurrency
    (0.25 s / 0.25 = 1 s), above the 0.4 s minimum, and that is kept."""
    crawler = crawler_for(
        AUTOTHROTTLE_ENABLED=True,
        AUTOTHROTTLE_START_DELAY=0.0,
        AUTOTHROTTLE_TARGET_CONCURRENCY=0.25,
        **NO_JITTER,
    )
    for i in range(4):
        site.script(f"/p{i}", Reply(body=b"slow", delay=0.25))
    requests = [floored(site.url(f"/p{i}"), 0.4) for i in range(4)]
    await crawler.crawl(requests=requests)
    times = arrivals(site)
    assert_spaced(times, 0.4, 4)
    assert max(gaps(times)) >= 0.8, f"AutoThrottle's slower pace was lost: gaps {gaps(times)}"


class GarbageCollectingSpider(WarmSpider):
    """Sends a first batch, waits until its slot is idle, runs the downloader's
    own slot garbage collection, then sends a second batch."""

    name = "slots-gc"

    def __init__(self, first: list[Request], second: list[Request], **kwargs: Any):
        super().__init__(**kwargs)
        self.first, self.second = first, second
        self.seen = 0
        self.all_seen = Event()
        self.slot_before: Slot | None = None
        self.collected = False
        self.slot_after: Slot | None = None

    def warm_up_url(self) -> str:
        return self.first[0].url

    async def measured(self) -> AsyncIterator[Request]:
        for request in self.first:
            yield request
        downloader = self.crawler.engine.downloader
        await self.all_seen.wait()
        self.slot_before = downloader.slots["127.0.0.1"]
        # _slot_gc drops slots with no active request whose last start plus
        # delay is `age` seconds ago; wait out the delay, then use age=0
        # instead of the periodic call's 60 s.
        await spider_sleep(self.slot_before.delay + 0.05)
        downloader._slot_gc(age=0)
        self.collected = "127.0.0.1" not in downloader.slots
        for request in self.second:
            yield request

    def parse(self, response: Response) -> None:
        self.seen += 1
        if self.seen == len(self.first):
            self.all_seen.set()
        self.slot_after = self.crawler.engine.downloader.slots.get("127.0.0.1")


@pytest_twisted.ensureDeferred
async def test_minimum_survives_slot_garbage_collection(site: ScriptedServer) -> None:
    """Not a mock: the real downloader's own GC method, with its idle age
    lowered from 60 s to 0 so the test does not wait a minute."""
    first = [floored(site.url(f"/a{i}"), 0.5) for i in range(2)]
    second = [floored(site.url(f"/b{i}"), 0.5) for i in range(4)]
    crawler = crawler_for(GarbageCollectingSpider)
    await crawler.crawl(first=first, second=second)
    spider = crawler.spider
    assert isinstance(spider, GarbageCollectingSpider)
    assert spider.collected, "the slot was not garbage-collected"
    assert spider.slot_after is not None
    assert spider.slot_after is not spider.slot_before
    assert_spaced(arrivals(site, "/b"), 0.5, 4)
    assert_spaced(arrivals(site), 0.5, 6)


@pytest_twisted.ensureDeferred
async def test_origins_sharing_a_slot_get_the_largest_delay(
    site: ScriptedServer, site2: ScriptedServer
) -> None:
    """Two origins (two ports) in download_slot "shared", Crawl-delays 0.2 and 0.7 s;
    the smaller one is required first and last."""
    shared = {"download_slot": "shared"}
    requests = [
        floored(site.url("/a0"), 0.2, **shared),
        floored(site2.url("/b0"), 0.7, **shared),
        floored(site.url("/a1"), 0.2, **shared),
        floored(site2.url("/b1"), 0.7, **shared),
        floored(site.url("/a2"), 0.2, **shared),
    ]
    await crawler_for().crawl(requests=requests)
    assert_spaced(sorted(arrivals(site) + arrivals(site2)), 0.7, 5)


@pytest_twisted.ensureDeferred
async def test_download_slot_meta_is_honoured(site: ScriptedServer) -> None:
    """The minimum goes to the request's download_slot, not to its host's slot."""
    custom = [floored(site.url(f"/custom{i}"), 0.6, download_slot="custom") for i in range(4)]
    plain = [Request(site.url(f"/plain{i}")) for i in range(4)]
    crawler = crawler_for()
    await crawler.crawl(requests=custom + plain)
    assert_spaced(arrivals(site, "/custom"), 0.6, 4)
    plain_gaps = gaps(arrivals(site, "/plain"))
    assert min(plain_gaps) < 0.3, f"the host's own slot was delayed too: {plain_gaps}"
    assert crawler.engine.downloader.slots["127.0.0.1"].delay == 0


class InspectingSpider(WarmListSpider):
    """Records the state of its slot from a callback."""

    def parse(self, response: Response) -> Iterator[Request]:
        slot = self.crawler.engine.downloader.slots[response.meta["download_slot"]]
        self.slot_state = (slot.delay, slot.jitter, [slot.download_delay() for _ in range(2000)])
        yield from super().parse(response)


def slot_state(crawler: Crawler) -> tuple[float, float, list[float]]:
    assert isinstance(crawler.spider, InspectingSpider)
    return crawler.spider.slot_state


@scrapy_2_19
@pytest_twisted.ensureDeferred
async def test_larger_download_delay_keeps_the_jitter_that_fits(site: ScriptedServer) -> None:
    """DOWNLOAD_DELAY 1.5 s above a 1 s Crawl-delay: the slot keeps 1.5 s and
    randomises it only down to 1 s (jitter 1/3 instead of the default 0.5)."""
    crawler = crawler_for(InspectingSpider, DOWNLOAD_DELAY=1.5)
    await crawler.crawl(requests=[floored(site.url("/p"), 1.0)])
    delay, jitter, draws = slot_state(crawler)
    assert delay == 1.5
    assert jitter == pytest.approx(1 / 3)
    assert min(draws) >= 1.0 - 1e-9
    assert max(draws) > 1.9  # randomisation kept above the minimum


@scrapy_2_19
@pytest_twisted.ensureDeferred
async def test_own_download_slots_settings_are_kept(site: ScriptedServer) -> None:
    """A DOWNLOAD_SLOTS entry keeps its concurrency and a larger delay of its own."""
    crawler = crawler_for(
        InspectingSpider,
        DOWNLOAD_SLOTS={"127.0.0.1": {"concurrency": 3, "delay": 2.0, "jitter": 0.1}},
    )
    await crawler.crawl(requests=[floored(site.url("/p"), 1.0)])
    downloader = crawler.engine.downloader
    assert downloader.per_slot_settings["127.0.0.1"] == {
        "concurrency": 3,
        "delay": 2.0,
        "jitter": 0.1,
    }
    delay, jitter, _ = slot_state(crawler)
    assert (delay, jitter) == (2.0, 0.1)
    assert downloader.slots["127.0.0.1"].concurrency == 3
