"""What scrapy-rep holds per origin stays bounded in a broad crawl (REP_CACHE_MAX_ORIGINS).

Two hundred origins, ten times the bound (``http://oN.test:PORT``, all
resolved to one local server) with a Crawl-delay each, some of them
unreachable: after the crawl,
every per-origin and per-slot table of the middleware is within its bound,
and nothing per request is left behind.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from crawls import PATIENT, loopback_names, run_crawl
from scrapy import signals
from scrapy.crawler import Crawler
from servers import Reply, ScriptedServer

from scrapy_rep._robots import robots_service

pytestmark = pytest.mark.slow  # hundreds of origins

ORIGINS = 200
BOUND = 20
UNREACHABLE_EVERY = 5  # 40 unreachable origins, past BACKOFF_BOUND
BACKOFF_BOUND = 16  # REP_BACKOFF_MAX_ORIGINS (a multiple of 8)


@pytest_twisted.ensureDeferred
async def test_a_broad_crawl_keeps_per_origin_state_within_rep_cache_max_origins(
    site: ScriptedServer,
) -> None:
    site.script(
        "/robots.txt",
        lambda hit: Reply(status=503) if hit % UNREACHABLE_EVERY == 0 else Reply(
            body=b"User-agent: *\nCrawl-delay: 0.01\nDisallow: /private\n"
        ),
    )  # fmt: skip
    urls = [f"http://o{i}.test:{site.port}/page" for i in range(ORIGINS)]
    held: dict[str, Any] = {}

    def measure(crawler: Crawler) -> None:
        def closed(spider: Any) -> None:
            robots = robots_service(crawler)
            assert robots is not None
            assert robots.pacing.delays is not None
            cache, fetcher, slots = robots.cache, robots.fetcher, robots.pacing.delays
            downloader = crawler.engine.downloader  # type: ignore[union-attr]
            held.update(
                rules=len(cache),
                backoffs=len(cache._backoffs),  # type: ignore[attr-defined]
                origin_keys=robots.keys._size,
                slot_minimums=len(slots._own_settings),
                per_slot_settings=len(downloader.per_slot_settings),
                fetches=len(fetcher._fetches),
                sizes=len(fetcher.download.files._sizes),
                out_of_active=len(fetcher.download.files._out),
                waiting=robots.waiting.count,
            )

        crawler.signals.connect(closed, signal=signals.spider_closed, weak=False)

    with loopback_names():
        result = await run_crawl(
            urls,
            {
                "REP_CACHE_MAX_ORIGINS": BOUND,
                "REP_BACKOFF_MAX_ORIGINS": BACKOFF_BOUND,
                "CONCURRENT_REQUESTS": 64,
                "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
                "LOG_LEVEL": "INFO",
                **PATIENT,
            },
            before=measure,
        )
    assert site.hits("/robots.txt") == ORIGINS  # each origin asked once
    assert len(result.responses) + len(result.failures) == ORIGINS  # none vanished
    assert len(result.failures) == ORIGINS // UNREACHABLE_EVERY  # the unreachable, dropped
    assert held["rules"] <= BOUND
    assert held["backoffs"] <= BACKOFF_BOUND
    assert held["origin_keys"] <= BOUND
    assert held["slot_minimums"] <= BOUND
    assert held["per_slot_settings"] <= BOUND
    assert held["fetches"] == held["sizes"] == held["out_of_active"] == held["waiting"] == 0
