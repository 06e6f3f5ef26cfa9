"""The frontier's Crawl-delay as the site sees it, on a busy machine.

scrapy_rep.PolitePriorityQueue holds a Crawl-delay slot from the moment it
hands a request out until that request has really been sent (its answer
began), and counts the next turn from then (frontier/turns.py). Counted from
the hand-out instead, a busy event loop that sends one request late and the
next on time brings them closer together at the site than its Crawl-delay.

The crawl here is kept busy two ways: a thread beside it keeps taking
Python's GIL for tens of milliseconds at a time (as CPU-bound work in the
same process does), so the crawler's event loop and the test server's threads
run late by random amounts; and the event loop itself computes for
``BUSY_AFTER_LET_GO`` seconds right after the download slot lets every other
page go (``BusyHandler``): that page reaches the site late, the next one on
time, every run. A real crawl of one site against a real server
(frontier_sites.py): when the crawler's download slot let each page go
(sent_stamp.py) and when each page reached the server.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from typing import Any
from urllib.parse import urlsplit

import pytest
from crawls import BASE_SETTINGS, PATIENT, loopback_names
from frontier_sites import BroadSpider, Sites
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from sent_stamp import SETTINGS as STAMPING
from sent_stamp import StampingHandler, let_go_at

from scrapy_rep.frontier import queue
from scrapy_rep.frontier.shared import frontier_of

pytestmark = pytest.mark.slow  # real-time delays

CRAWL_DELAY = 0.5
PAGES = 8
HOST = "paced.test"
HOLD_GIL = (0.005, 0.08)
"""Seconds the busy thread holds the GIL at a time (drawn between these)."""
BUSY_AFTER_LET_GO = 0.2
"""Seconds the event loop computes after the slot lets an odd page go."""
NEVER = 600.0
"""A recheck of full slots that no crawl here lasts long enough to see."""


class BusyHandler(StampingHandler):
    """The suite's download handler (stamping when the slot let the request
    go), with the event loop kept busy before odd pages are sent."""

    async def download_request(self, request: Request) -> Response:  # type: ignore[override]
        path = urlsplit(request.url).path
        if path.startswith("/p") and int(path[2:]) % 2:
            until = time.perf_counter() + BUSY_AFTER_LET_GO
            while time.perf_counter() < until:
                pass
        return await super().download_request(request)


@contextmanager
def gil_hog() -> Iterator[None]:
    """A thread beside the crawl that holds the GIL in long stretches: one C
    call (``sum`` over a range) lets no other thread run until it returns."""
    started = time.perf_counter()
    sum(range(200_000))
    per_item = (time.perf_counter() - started) / 200_000
    stop = threading.Event()
    rng = random.Random(26)

    def hog() -> None:
        while not stop.is_set():
            sum(range(int(rng.uniform(*HOLD_GIL) / per_item)))
            time.sleep(rng.uniform(0, 0.01))  # and lets go now and then

    thread = threading.Thread(target=hog, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


async def crawl_paced_site(
    sites: Sites, settings: dict[str, Any] | None = None
) -> tuple[Crawler, dict[str, float]]:
    """Crawl PAGES pages of one site: the crawler, and when its download slot
    let each page go, by path."""
    urls: list[str | Request] = [sites.url(HOST, f"/p{page}") for page in range(PAGES)]
    answered: dict[str, float] = {}
    failed: dict[str, str] = {}
    sent: dict[str, float] = {}

    def downloaded(response: Response, request: Request) -> None:
        at = let_go_at(request)
        if at is not None and urlsplit(request.url).path != "/robots.txt":
            sent[urlsplit(request.url).path] = at

    crawler = get_crawler(
        BroadSpider,
        {
            **BASE_SETTINGS,
            "LOG_LEVEL": "INFO",
            **PATIENT,
            "DOWNLOAD_HANDLERS": {"http": f"{__name__}.BusyHandler"},
            **(settings or {}),
        },
    )
    crawler.signals.connect(downloaded, signal=signals.response_downloaded, weak=False)
    await deferred_from_coro(crawler.crawl_async(urls=urls, answered=answered, failed=failed))
    assert not failed, failed
    assert len(answered) == PAGES
    return crawler, sent


async def test_crawl_delay_counts_from_when_the_previous_request_was_sent() -> None:
    """Crawl-delay: 0.5 and a busy process: every page is sent at least 0.5 s
    after the previous one reached the site, so the site sees the gaps it asked
    for (on arrival, by the server's clock), however late each one went."""
    robots = f"User-agent: *\nCrawl-delay: {CRAWL_DELAY}\n"
    with Sites(robots=robots, page_delay=0.01) as sites, loopback_names():
        with gil_hog():
            crawler, sent = await crawl_paced_site(sites)
        arrived = {
            hit.path: hit.time for hit in sites.hits if hit.host == HOST and hit.path in sent
        }
    assert sorted(sent) == sorted(arrived) == sorted(f"/p{page}" for page in range(PAGES))
    order = sorted(sent, key=sent.__getitem__)
    # Sent in the order they arrived (one at a time: the slot is held meanwhile).
    assert order == sorted(arrived, key=arrived.__getitem__)
    print(
        "sent gaps",
        [round(sent[b] - sent[a], 3) for a, b in pairwise(order)],
        "arrival gaps",
        [round(arrived[b] - arrived[a], 3) for a, b in pairwise(order)],
    )
    after_arrival = [sent[later] - arrived[earlier] for earlier, later in pairwise(order)]
    assert min(after_arrival) >= CRAWL_DELAY, (
        f"sent {[round(gap, 3) for gap in after_arrival]} s after the previous page arrived"
    )
    on_arrival = [arrived[later] - arrived[earlier] for earlier, later in pairwise(order)]
    assert min(on_arrival) >= CRAWL_DELAY, f"the site saw {[round(g, 3) for g in on_arrival]}"
    stats: dict[str, Any] = crawler.stats.get_stats() if crawler.stats else {}
    assert stats["rep/frontier/ready"] == PAGES


async def test_a_full_slot_goes_on_as_soon_as_its_download_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CONCURRENT_REQUESTS_PER_DOMAIN = 1: the slot is full while each page is
    under way, and is looked at again when the download ends (Scrapy's
    downloader reports it: scrapy_rep._slots.departures), not after
    FULL_RECHECK or at the engine's 5 s heartbeat. A Scrapy whose downloader
    stops reporting it fails here."""
    # The recheck out of reach: only a reported departure can reopen the slot,
    # so all the pages come however slowly this machine sends them.
    monkeypatch.setattr(queue, "FULL_RECHECK", NEVER)
    robots = "User-agent: *\nAllow: /\n"
    with Sites(robots=robots, page_delay=0.05) as sites, loopback_names():
        crawler, sent = await crawl_paced_site(
            sites,
            # no busy handler; unreported, the 2nd page would wait out the timeout
            {"CONCURRENT_REQUESTS_PER_DOMAIN": 1, "CLOSESPIDER_TIMEOUT": 30, **STAMPING},
        )
        assert max(sites.max_in_flight.values()) == 1
    assert frontier_of(crawler).departures.watching
    assert sorted(sent) == [f"/p{page}" for page in range(PAGES)]
