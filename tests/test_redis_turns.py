"""Crawl-delay across worker processes on scrapy-redis's own queue, as the site receives it.

scrapy-redis's ``PriorityQueue`` hands a worker whatever comes next; the
robots middleware then takes the request's cluster-wide turn in Redis
(:mod:`scrapy_rep.cluster.pacing`). What a site sees is when requests arrive,
whichever worker sent them and however busy its event loop was. One local
server answers for every ``*.test`` host (tests/test_redis_frontier.py's
``ManySites``), stamping when each request arrived and when its worker's
download slot let it go (tests/sent_stamp.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from redis_server import RedisServer
from test_redis_cluster import finish
from test_redis_frontier import CLOCK, DELAY, ManySites, crawl, interleaved

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free]  # worker subprocesses

PRIORITY_QUEUE = "scrapy_redis.queue.PriorityQueue"


@pytest.fixture
def sites() -> Iterator[ManySites]:
    served = ManySites()
    yield served
    served.close()


def _gaps(times: list[float]) -> list[float]:
    ordered = sorted(times)
    return [b - a for a, b in itertools.pairwise(ordered)]


def test_three_workers_on_scrapy_redis_queue_keep_crawl_delay_as_the_site_sees_it(
    sites: ManySites, redis_server: RedisServer, redis_prefix: str
) -> None:
    """Three busy workers (150 plain sites beside 6 asking Crawl-delay: 1):
    no two requests to a Crawl-delay site arrive closer than the delay, nor
    were sent closer. Before the slot was held until its request arrived, a
    turn counted from when it was reserved: a worker whose event loop took
    the reply late, or sent the request late, brought it closer to the next
    worker's (bench-cluster, 4 workers on 2 cores: 0.028 s for 0.25 s asked)."""
    plain = [f"a{n}.test" for n in range(150)]
    delayed = [f"d{n}.test" for n in range(6)]
    pages = {**dict.fromkeys(plain, 2), **dict.fromkeys(delayed, 6)}
    urls = interleaved(plain + delayed, pages, sites)
    workers = crawl(
        sites,
        redis_server,
        redis_prefix,
        urls,
        SCHEDULER_QUEUE_CLASS=PRIORITY_QUEUE,
        RETRY_ENABLED=False,
    )
    reports = finish(workers, timeout=240)

    responses = sorted(url for report in reports for url in report["responses"])
    assert responses == sorted(urls)
    for report in reports:
        assert report["failures"] == {}, report["failures"]
        assert report["stats"].get("rep/redis/outages", 0) == 0
    senders = set()
    for host in delayed:
        hits = sites.of(host)
        assert [h.path for h in hits].count("/robots.txt") == 1, host
        senders |= {h.worker for h in hits if h.path != "/robots.txt"}
        # robots.txt included: it is one of the site's requests
        arrived = _gaps([h.arrived for h in hits])
        sent = _gaps([h.time for h in hits])
        assert min(arrived) >= DELAY - CLOCK, (host, [round(g, 3) for g in arrived])
        assert min(sent) >= DELAY - CLOCK, (host, [round(g, 3) for g in sent])
    assert len(senders) > 1  # the delay held across workers, not within one
    # The turns were the middleware's (scrapy-redis's queue takes none).
    paced = sum(r["stats"].get("rep/redis/delay/paced", 0) for r in reports)
    assert paced == len(delayed) * pages[delayed[0]], paced
    assert sum(r["stats"].get("rep/redis/delay/queue_turn", 0) for r in reports) == 0
