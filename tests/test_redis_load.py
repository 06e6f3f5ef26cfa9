"""Shared state stays on under load: a burst of calls waits for a connection,
it is no outage (Redis is fine; the worker is busy).

Real crawls in pytest's process against a real redis-server; many origins
(``http://oN.test:PORT``) on one local server.
"""

from __future__ import annotations

import logging

import pytest
import pytest_twisted
from crawls import PATIENT, loopback_names, run_crawl
from redis_server import RedisServer, shared
from servers import Reply, ScriptedServer

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only]

ORIGINS = 300


@pytest_twisted.ensureDeferred
async def test_hundreds_of_new_origins_at_once_keep_shared_state_on(
    site: ScriptedServer,
    redis_server: RedisServer,
    redis_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Scrapy-rep 0.1.0.dev0: the 32nd call at once found the connection pool
    empty (the slow-down subscriber holds one), took it for an outage and
    switched shared state off for 30 s with a WARNING blaming Redis."""
    site.script("/robots.txt", Reply(body=b"User-agent: *\nDisallow: /private\n", delay=0.2))
    urls = [f"http://o{i}.test:{site.port}/page" for i in range(ORIGINS)]
    settings = {
        **shared(redis_server, redis_prefix),
        "CONCURRENT_REQUESTS": 512,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "REP_MAX_FETCHES": 512,
        **PATIENT,
        "LOG_LEVEL": "INFO",
    }
    with caplog.at_level(logging.WARNING), loopback_names():
        result = await run_crawl(urls, settings)
    assert len(result.responses) == ORIGINS
    stats = result.stats
    assert "rep/redis/outages" not in stats, [r.getMessage() for r in caplog.records]
    assert "rep/redis/errors" not in stats
    assert stats["rep/redis/robots/published"] == ORIGINS  # one fetch each, all shared
    assert not [r for r in caplog.records if "unavailable" in r.getMessage()]
