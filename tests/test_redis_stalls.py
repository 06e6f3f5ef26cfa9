"""A stalled event loop of the worker's own is no Redis outage (issue 26).

In pytest's process, on the asyncio reactor, against a real redis-server: the
loop is blocked (``time.sleep``, as a burst of start requests blocks it) while
a call is under way, so the call outlives ``REP_REDIS_TIMEOUT`` on the clock
though Redis answered at once. A Redis that is really slow (``DEBUG SLEEP``
from another client) still makes the worker fall back, with one WARNING.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
import pytest_twisted
import redis
from redis_server import RedisServer, shared
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred

from scrapy_rep.cluster import RedisLink, RedisUnavailable
from scrapy_rep.cluster.link import STALLED_ATTEMPTS
from scrapy_rep.cluster.stops import ClusterStops
from scrapy_rep.config import Config

pytestmark = pytest.mark.asyncio_only

TIMEOUT = 1.0  # REP_REDIS_TIMEOUT, its default
STALL = 1.6  # the loop blocked this long: a crawl's start was seen to block it 1.2-1.8 s
ECHO = "return ARGV[1]"
BUSY = STALLED_ATTEMPTS * TIMEOUT + 1
"""Seconds Redis is busy (``DEBUG SLEEP``): longer than every attempt of a call
(a loaded machine stalls the loop too, and a call may be made again)."""


def make_link(redis: RedisServer, prefix: str) -> tuple[RedisLink, Any]:
    crawler = get_crawler(settings_dict=shared(redis, prefix, REP_REDIS_TIMEOUT=TIMEOUT))
    crawler.stats.open_spider()
    return RedisLink(Config.from_settings(crawler.settings), crawler.stats), crawler.stats


def on_asyncio(coro: Any) -> Deferred[Any]:
    """Run ``coro`` as an asyncio task (redis.asyncio's calls need one)."""
    return Deferred.fromFuture(asyncio.ensure_future(coro))


async def calls_across_a_stall(link: RedisLink, count: int) -> list[Any]:
    """``count`` calls started together, then the loop blocked for ``STALL``."""
    script = link.script(ECHO)
    tasks = [asyncio.ensure_future(link.call(script, [], [n])) for n in range(count)]
    for _ in range(3):  # let them connect and send
        await asyncio.sleep(0)
    time.sleep(STALL)  # noqa: ASYNC251 (the stall under test)
    return await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("connected", [False, True], ids=["connecting", "connected"])
@pytest_twisted.ensureDeferred
async def test_calls_that_span_a_stall_of_the_workers_own_loop_are_no_outage(
    redis_server: RedisServer,
    redis_prefix: str,
    caplog: pytest.LogCaptureFixture,
    connected: bool,
) -> None:
    link, stats = make_link(redis_server, redis_prefix)

    async def scenario() -> list[Any]:
        try:
            if connected:  # connections open already: the stall spans reads
                await asyncio.gather(*(link.call(link.script(ECHO), [], [n]) for n in range(8)))
            return await calls_across_a_stall(link, 8)
        finally:
            await link.close()

    with caplog.at_level(logging.DEBUG, logger="scrapy_rep"):
        replies = await on_asyncio(scenario())
    assert [int(r) for r in replies] == list(range(8)), replies
    assert link.up
    assert stats.get_value("rep/redis/outages") is None
    if not connected:  # the connects did time out on the clock (replies already
        # read when the loop resumes may beat their timeouts)
        assert stats.get_value("rep/redis/stalled", 0) >= 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_a_redis_slower_than_the_timeout_is_still_an_outage(
    own_redis: RedisServer, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The loop is free; Redis is busy (``DEBUG SLEEP``) past the timeout."""
    own_redis.stop()
    own_redis.options = ["--enable-debug-command", "local"]
    own_redis.start()
    link, stats = make_link(own_redis, redis_prefix)
    script = link.script(ECHO)

    async def scenario() -> float:
        try:
            assert int(await link.call(script, [], [1])) == 1  # connected
            # (a client that waits it out: one that timed out would send it again)
            client = redis.Redis(host="127.0.0.1", port=own_redis.port, socket_timeout=BUSY + 5)
            sleeper = threading.Thread(
                target=lambda: client.execute_command("DEBUG", "SLEEP", BUSY)
            )
            sleeper.start()
            await asyncio.sleep(0.1)  # the sleep is under way
            started = time.monotonic()
            with pytest.raises(RedisUnavailable):
                await link.call(script, [], [2])
            took = time.monotonic() - started
            sleeper.join()
            return took
        finally:
            await link.close()

    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        took = await on_asyncio(scenario())
    # One timeout (made again only if this loaded machine stalled the loop meanwhile)
    again = stats.get_value("rep/redis/stalled", 0)
    assert took < (again + 1) * TIMEOUT + 0.5, (took, again)
    assert not link.up
    assert stats.get_value("rep/redis/outages") == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "Timeout" in warnings[0], warnings


@pytest_twisted.ensureDeferred
async def test_a_worker_whose_loop_stalls_as_it_subscribes_still_learns_the_stops(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """A worker joining after a site was stopped reads the stop when its spider
    opens, before its first request. Its loop blocked past the wait (twice
    ``REP_REDIS_TIMEOUT``) while it subscribes is its own slowness: the wait is
    not used up by it, and the stop is known when ``start`` returns."""
    earlier, _ = make_link(redis_server, redis_prefix)
    link, stats = make_link(redis_server, redis_prefix)
    config = Config.from_settings(
        get_crawler(settings_dict=shared(redis_server, redis_prefix)).settings
    )
    learnt: dict[str, Any] = {}

    async def scenario() -> None:
        stopper = ClusterStops(earlier, config, stats)
        joiner = ClusterStops(link, config, stats)
        try:
            await stopper._publish("127.0.0.9", {"origin": "http://127.0.0.9", "probes": 3})
            asyncio.get_running_loop().call_soon(time.sleep, 2 * TIMEOUT + 0.5)  # the stall
            await joiner.start(learnt.__setitem__)
        finally:
            stopper.close()
            joiner.close()
            await earlier.close()
            await link.close()

    await on_asyncio(scenario())
    assert learnt == {"127.0.0.9": {"origin": "http://127.0.0.9", "probes": 3}}
