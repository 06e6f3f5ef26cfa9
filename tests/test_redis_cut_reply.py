"""A pop whose reply is cut after Redis ran it: its request is not lost.

scrapy-rep's queue (``SCHEDULER_QUEUE_CLASS = "scrapy_rep.RedisPoliteQueue"``)
takes a request out of Redis in one script (``POP``). When the connection
breaks after Redis ran it and before the worker read the reply (Redis killed
with ``kill -9`` just after it wrote its append-only file, a network cut),
the request has left Redis without reaching the worker. A proxy
(tests/redis_proxy.py) between one worker and a real Redis cuts the first
such reply that carries a request, once the crawl is under way:

- at once, Redis reachable again right away: redis-py sends the script again
  by itself (its default ``Retry``), the worker sees no failure;
- Redis unreachable for longer than redis-py's retries last (10 tries,
  backoff capped at 1 s: 5.3 s at most): the pop fails in the worker (an
  outage, counted and told once), which tries again after ``REP_REDIS_RETRY``.

Either way every page is fetched exactly once and the worker ends
``finished``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import pytest
from redis_proxy import CuttingProxy, Reply
from redis_server import RedisServer
from test_redis_cluster import finish, start_workers
from test_redis_frontier import (
    ManySites,
    assert_every_page_once,
    frontier_settings,
    interleaved,
    queue_worker,
)

from scrapy_rep.frontier._redis_scripts import POP, PUSH

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free]  # worker subprocesses

RETRIES_LAST = 5.3
"""Seconds redis-py 5+ goes on retrying a command whose connection failed, at
most (its default ``Retry``: 10 tries, jittered backoff 0.02 s doubling, each
at most 1 s)."""


def carries_request(reply: Reply) -> bool:
    """A POP reply handing out a request: ``[slot, request, spacing, count...]``."""
    return isinstance(reply, list) and bool(reply) and bool(reply[0])


@pytest.fixture
def sites() -> Any:
    served = ManySites()
    yield served
    served.close()


@pytest.mark.parametrize(
    ("down", "outages"),
    [(0.0, 0), (RETRIES_LAST + 0.7, 1)],
    ids=["redis-py-resends", "worker-pop-fails"],
)
def test_a_pop_whose_reply_is_cut_loses_no_request(
    sites: ManySites, own_redis: RedisServer, redis_prefix: str, down: float, outages: int
) -> None:
    hosts = [f"d{n}.test" for n in range(2)] + [f"a{n}.test" for n in range(20)]
    pages = {h: 3 if h.startswith("d") else 2 for h in hosts}
    urls = interleaved(hosts, pages, sites)
    proxy = CuttingProxy(own_redis.port, hashlib.sha1(POP.encode()).hexdigest(), carries_request)
    settings = frontier_settings(
        own_redis, redis_prefix, REDIS_URL=proxy.url, REDIS_PARAMS={"socket_timeout": 2}
    )
    config = queue_worker("w0", urls, settings, scheduled=sites.scheduled_marker("w0"))
    # A quarter of the pages answered, the others wait at the site until the
    # proxy is armed: the cut comes mid-crawl, every start request scheduled.
    sites.held_after = len(urls) // 4

    def arm() -> None:
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                pages_done = sum(1 for h in sites.hits if h.path != "/robots.txt")
                if sites.starts_scheduled and pages_done >= len(urls) // 4:
                    proxy.arm(down)
                    return
                time.sleep(0.02)
        finally:
            sites.resume.set()

    armer = threading.Thread(target=arm)
    try:
        worker = start_workers([config])
        armer.start()
        [report] = finish(worker, timeout=120)
        armer.join()
    finally:
        sites.resume.set()
        proxy.close()

    assert proxy.cuts, "no pop reply was cut"
    # every page fetched, and once (finish() checked that the worker ended "finished")
    assert_every_page_once(sites, urls, report)
    stats = report["stats"]
    # the request of the cut reply was handed to the worker by the next pop
    assert stats.get("rep/redis/frontier/replayed") == 1, stats
    assert stats.get("rep/redis/frontier/outages", 0) == outages, stats
    assert report["log"].count("The Redis queue is unavailable") == outages


def test_the_pop_script_hands_a_lost_replys_request_again_and_only_to_its_token(
    own_redis: RedisServer, redis_prefix: str
) -> None:
    """The contract the crawls above rely on, on the script itself: a pop
    sent again with its token gets the same request (and takes nothing more
    from the queue); a new token pops the next; a Crawl-delay slot whose hold
    lapsed meanwhile is answered with spacing -1 (the robots middleware then
    waits for the slot's turn itself)."""
    client = own_redis.client()
    push, pop = client.register_script(PUSH), client.register_script(POP)
    key = redis_prefix + "q"
    slots, count, given = f"{key}:slots", f"{key}:count", f"{key}:given:w"
    for score, item, slot, spacing in [
        (0, b"first", "d.test", 1_000_000),
        (1, b"second", "d.test", 1_000_000),
        (0, b"plain", "a.test", 0),
    ]:
        push(
            keys=[f"{key}:q:{slot}", slots, count, f"{key}:meta:{slot}"],
            args=[score, item, slot, spacing, 8, 1, 30_000_000],
        )

    def pop_with(token: str) -> list[bytes]:
        reply = pop(
            keys=[slots, count, given], args=[key, redis_prefix, 64, 60_000_000, token, 31_000]
        )
        return [r if isinstance(r, bytes) else str(r).encode() for r in reply]

    # d.test was pushed first: its slot is the first due
    first = pop_with("w:0")
    assert first == [b"d.test", b"first", b"1000000", b"2", b"0"]
    assert pop_with("w:0") == [b"d.test", b"first", b"1000000", b"2", b"1"]  # reply lost: again
    client.delete(f"{key}:hold:d.test")  # the hold lapsed before the pop came again
    assert pop_with("w:0") == [b"d.test", b"first", b"-1", b"2", b"1"]
    assert client.get(count) == b"2"  # nothing more left the queue
    # a new token pops the next request (d.test waits for its Crawl-delay turn)
    assert pop_with("w:1") == [b"a.test", b"plain", b"0", b"1", b"0"]
    # an older token is no longer recorded: its pop is a new one (nothing ready)
    assert pop_with("w:0")[0] == b""
    assert client.get(count) == b"1"


def test_a_push_whose_reply_is_cut_is_fetched_once(
    sites: ManySites, own_redis: RedisServer, redis_prefix: str
) -> None:
    """The other side: Redis ran a push and its reply was lost, Redis then
    unreachable past redis-py's retries. The worker cannot know whether the
    request is in Redis: it keeps it, does not hand it out during the outage,
    and pushes it again (the same bytes, kept once) when Redis answers. It was
    fetched twice: once from the worker's memory, once from Redis.
    The requests skip the dupefilter (``dont_filter``), whose own Redis calls
    would fail meanwhile: the push is the call under test."""
    hosts = [f"a{n}.test" for n in range(20)]
    urls = interleaved(hosts, dict.fromkeys(hosts, 2), sites)
    pushes = iter(range(len(urls)))
    proxy = CuttingProxy(
        own_redis.port, hashlib.sha1(PUSH.encode()).hexdigest(), lambda _: next(pushes) == 9
    )
    proxy.arm(RETRIES_LAST + 0.7)
    settings = frontier_settings(
        own_redis, redis_prefix, REDIS_URL=proxy.url, REDIS_PARAMS={"socket_timeout": 2}
    )
    try:
        [report] = finish(
            start_workers([queue_worker("w0", urls, settings, dont_filter=True)]), 120
        )
    finally:
        proxy.close()

    assert proxy.cuts, "no push reply was cut"
    assert_every_page_once(sites, urls, report)
    stats = report["stats"]
    assert stats.get("rep/redis/frontier/outages") == 1, stats
    assert stats.get("rep/redis/frontier/local", 0) >= 1, stats
