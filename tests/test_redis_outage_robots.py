"""robots.txt learnt while Redis is down: the origin's pages go once it answers.

A scrapy-redis worker on scrapy-rep's queue (``SCHEDULER_QUEUE_CLASS =
"scrapy_rep.RedisPoliteQueue"``), Redis behind a proxy (tests/redis_proxy.py).
The worker pushes the pages of ``a0.test`` to Redis while the origin's
robots.txt is unknown (their slot parked until the fetch ends,
``AWAIT_ROBOTS`` at most) and starts the fetch. The site holds that robots.txt
until Redis has gone (every connection cut, new ones refused: Redis killed),
so the fetch ends while Redis is down and the worker cannot tell the queue
that the slot is ready. Once Redis answers it must: the pages go within a few
seconds, not ``AWAIT_ROBOTS`` (30 s) after they were pushed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from redis_proxy import CuttingProxy
from redis_server import RedisServer
from test_redis_cluster import finish, start_workers
from test_redis_frontier import (
    ManySites,
    assert_every_page_once,
    frontier_settings,
    interleaved,
    queue_worker,
)

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free]  # worker subprocesses

HELD = "a0.test"
DOWN = 6.0
"""Seconds Redis refuses connections: longer than redis-py's own retries of
the queue's client last (5.3 s, tests/test_redis_cut_reply.py), so that the
workers see the outage."""
SOON = 4.0
"""Seconds after Redis answers again within which the held origin's pages are
sent: the workers try Redis again after REP_REDIS_RETRY (1 s); then one pop
makes the slot ready. Today's failure is ``AWAIT_ROBOTS`` after the push (30 s)."""


class HoldingSites(ManySites):
    """ManySites whose ``HELD`` robots.txt waits for ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.robots_asked = threading.Event()
        self.release = threading.Event()

    def answer(self, host: str, path: str) -> tuple[int, bytes, dict[str, str]]:
        if host == HELD and path == "/robots.txt":
            self.robots_asked.set()
            self.release.wait(30)
        return super().answer(host, path)


@pytest.fixture
def sites() -> Any:
    served = HoldingSites()
    yield served
    served.release.set()
    served.close()


def test_rules_learnt_while_redis_is_down_free_their_slot_once_it_answers(
    sites: HoldingSites, own_redis: RedisServer, redis_prefix: str
) -> None:
    hosts = [f"a{n}.test" for n in range(1, 13)]
    pages = dict.fromkeys(hosts, 2)
    others = interleaved(hosts, pages, sites)
    held = [sites.url(HELD, f"/page{n}") for n in range(2)]
    urls = held + others
    proxy = CuttingProxy(own_redis.port, "0" * 40, lambda _: False)
    settings = frontier_settings(
        own_redis,
        redis_prefix,
        REP_REDIS_URL=proxy.url,
        REDIS_URL=proxy.url,
        REDIS_PARAMS={"socket_timeout": 2},
    )
    config = queue_worker("w0", urls, settings, scheduled=sites.scheduled_marker("w0"))
    moments: dict[str, float] = {}

    def cut_while_fetching() -> None:
        try:
            if not sites.robots_asked.wait(60):
                return
            deadline = time.monotonic() + 30
            # every page pushed, the held ones to a parked slot (a cut before
            # would stop the engine: scrapy-redis's dupefilter raises)
            while not sites.starts_scheduled and time.monotonic() < deadline:
                time.sleep(0.02)
            moments["cut"] = time.time()
            proxy.fail(DOWN)
            time.sleep(0.5)  # the queue finds Redis gone
            sites.release.set()  # the robots.txt reaches w0 while Redis is down
            time.sleep(DOWN - 0.5)
            moments["back"] = time.time()
        finally:
            sites.release.set()

    cutter = threading.Thread(target=cut_while_fetching)
    try:
        worker = start_workers([config])
        cutter.start()
        [report] = finish(worker, timeout=120)
        cutter.join()
    finally:
        sites.release.set()
        proxy.close()

    assert "back" in moments, "Redis was not cut while the robots.txt was fetched"
    # nothing lost, nothing twice, the worker ended "finished"
    assert_every_page_once(sites, urls, report)
    assert report["stats"].get("rep/redis/frontier/outages") == 1, report["stats"]
    held_hits = sites.of(HELD)
    assert [h.path for h in held_hits].count("/robots.txt") == 1, held_hits
    # the held origin's pages were sent (the crawler's stamps) soon after
    # Redis answered, not AWAIT_ROBOTS after they were pushed
    sent = [h.time - moments["back"] for h in held_hits if h.path != "/robots.txt"]
    assert len(sent) == len(held)
    assert max(sent) < SOON, (sent, moments)
