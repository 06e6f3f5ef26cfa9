"""Stop signals across workers sharing a real Redis: a stopped origin is stopped for all.

Real Scrapy worker processes (tests/_redis_worker.py) against one origin on a
loopback address of its own that challenges every page.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from crawls import run_crawl
from redis_server import RedisServer, shared
from servers import Reply, ScriptedServer
from test_redis_slowdown import report_of, start_worker
from test_report import records
from test_stop_signals_pages import NEGATIVE

from scrapy_rep import RobotsTxtUnavailable

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only]  # worker subprocesses

CHALLENGE = Reply(403, b"<html>Just a moment...</html>", {"cf-mitigated": "challenge"})
FAST = {"REP_CHALLENGE_PAUSE": 0.5, "REP_CHALLENGE_MAX_PAUSE": 1.0, "RETRY_ENABLED": True}


@pytest.fixture
def challenging() -> Any:
    with ScriptedServer("127.0.0.251") as site:
        site.robots("User-agent: *\nAllow: /\n")
        for i in range(40):
            site.script(f"/p{i}", CHALLENGE)
        yield site


def redis_queue(redis: RedisServer, prefix: str) -> dict[str, Any]:
    """scrapy-redis's scheduler with scrapy-rep's Redis queue."""
    return {
        "REDIS_URL": redis.url,
        "SCHEDULER_QUEUE_CLASS": "scrapy_rep.RedisPoliteQueue",
        "SCHEDULER_QUEUE_KEY": prefix + "%(spider)s:requests",
        "SCHEDULER_DUPEFILTER_KEY": prefix + "%(spider)s:dupefilter",
    }


@pytest.mark.parametrize("queue", ["frontier", "redis-queue"])
def test_workers_that_start_after_the_stop_send_nothing(
    challenging: ScriptedServer,
    redis_server: RedisServer,
    redis_prefix: str,
    queue: str,
    tmp_path: Path,
) -> None:
    site = challenging
    settings = shared(redis_server, redis_prefix, **FAST, CONCURRENT_REQUESTS_PER_DOMAIN=1)
    if queue == "redis-queue":
        settings.update(redis_queue(redis_server, redis_prefix))
    first = report_of(start_worker("a", [site.url(f"/p{i}") for i in range(10)], settings), 90)
    assert first["stats"]["rep/challenge/stopped"] == 1
    sent_by_a = len(site.page_hits())
    assert sent_by_a == 1 + 3  # the first answer, then 3 probes
    later = [
        start_worker(
            name,
            [site.url(f"/p{i}") for i in range(start, start + 10)],
            {**settings, "REP_REPORT": str(tmp_path / f"{name}.jsonl")},
        )
        for name, start in (("b", 10), ("c", 20))
    ]
    for name, report in zip("bc", map(report_of, later), strict=True):
        assert report["responses"] == []
        assert set(report["failures"].values()) == {"SiteChallenged"}
        assert len(report["failures"]) == 10
        assert report["stats"]["rep/challenge/stopped/cluster"] == 1
        assert report["stats"]["rep/challenge/dropped"] == 10
        # its REP_REPORT file: the stop learnt from A, with A's count of probes
        [state] = [record["stop_signal"] for record in records(tmp_path / f"{name}.jsonl")]
        assert (state["kind"], state["provider"]) == ("challenge", "Cloudflare")
        assert (state["stopped"], state["from_cluster"]) == (True, True)
        assert (state["probes"], state["answers"], state["not_sent"]) == (3, 0, 10)
    assert len(site.page_hits()) == sent_by_a  # b and c sent nothing


@pytest.mark.parametrize("queue", ["frontier", "redis-queue"])
def test_three_workers_at_once_account_for_every_request(
    challenging: ScriptedServer, redis_server: RedisServer, redis_prefix: str, queue: str
) -> None:
    site = challenging
    settings = shared(redis_server, redis_prefix, **FAST, CONCURRENT_REQUESTS_PER_DOMAIN=1)
    if queue == "redis-queue":
        settings.update(redis_queue(redis_server, redis_prefix))
    workers = [
        start_worker(name, [site.url(f"/p{i}") for i in range(start, start + 10)], settings)
        for name, start in (("a", 0), ("b", 10), ("c", 20))
    ]
    reports = [report_of(worker, 90) for worker in workers]
    hits = site.page_hits()
    failures: dict[str, str] = {}
    for report in reports:  # with the Redis queue, any worker may end any request
        assert report["responses"] == []
        failures.update(report["failures"])
    assert sorted(failures) == sorted(site.url(f"/p{i}") for i in range(30))
    assert set(failures.values()) == {"SiteChallenged"}
    # none retried; across the three workers, at most one request per pause
    # window on arrival: those sent before the first pause began (one per
    # worker at most), then probes, each claimed by one worker for its window
    assert len({hit.path for hit in hits}) == len(hits)
    pause = FAST["REP_CHALLENGE_PAUSE"]
    arrived = sorted(hit.time for hit in hits)
    before_first_pause = [hit for hit in hits if hit.time < arrived[0] + pause]
    assert len(before_first_pause) == len(
        {hit.headers.get("X-Worker") for hit in before_first_pause}
    )
    probes = [when for when in arrived if when >= arrived[0] + pause]
    assert probes
    assert all(later - earlier >= pause for earlier, later in pairwise(probes))
    # The give-up count is the cluster's: REP_CHALLENGE_GIVE_UP challenged
    # probes in all stop the origin. A worker sends at most one request
    # (CONCURRENT_REQUESTS_PER_DOMAIN) before it knows of the run's pauses (its
    # first answer tells it, through Redis, before its slot lets another go);
    # after that only the claimed probe of a pause leaves, one per pause, and
    # the run has REP_CHALLENGE_GIVE_UP pauses at most: the first, then one
    # after each challenged probe but the last. Counted per worker, 4 and 5
    # probes went in two runs, 7 in another.
    give_up = 3  # REP_CHALLENGE_GIVE_UP's default
    assert sum(r["stats"].get("rep/challenge/probes", 0) for r in reports) == give_up
    claimed = {r["name"]: r["stats"].get("rep/slowdown/redis/probes_claimed", 0) for r in reports}
    assert sum(claimed.values()) <= give_up
    for name, count in claimed.items():
        assert sum(hit.headers.get("X-Worker") == name for hit in hits) <= 1 + count
    assert len(hits) <= 3 * 1 + give_up
    stopped_here = sum(r["stats"].get("rep/challenge/stopped", 0) for r in reports)
    stopped_there = sum(r["stats"].get("rep/challenge/stopped/cluster", 0) for r in reports)
    told = {r["name"]: (r["stats"], r["log"][-3000:]) for r in reports}
    assert stopped_here == 1, told
    if queue == "frontier":  # each worker holds its ten requests until the stop
        assert stopped_here + stopped_there == 3, told
    # With the Redis queue, a worker the queue has nothing left for ends, and
    # may end before the stop is made: all 26 left were in one worker's hands
    # in 1 run of 4 (with three workers forked at once). A worker still running
    # learns it: test_workers_that_start_after_the_stop_send_nothing.
    dropped = sum(r["stats"].get("rep/challenge/dropped", 0) for r in reports)
    assert dropped + len(hits) == 30


def test_three_workers_agree_on_every_kind_of_answer(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """Each origin on an address of its own, each worker with four pages of
    each: robots.txt under a challenge is no robots.txt for any worker, a 402
    and a block stop the origin for all (a worker sends at most its first page
    before it knows), and the negative set (a WAF present, not acting) is
    crawled whole by all. With REP_STOP_SIGNALS = False it fails: 12 pages of
    the origin whose robots.txt is challenged sent."""
    with ExitStack() as stack:

        def site(address: str, robots: Reply | None = None, pages: Reply | None = None) -> Any:
            server = stack.enter_context(ScriptedServer(address))
            if robots is None:
                server.robots("User-agent: *\nAllow: /\n")
            else:
                server.script("/robots.txt", robots)
            for i in range(12):
                server.script(f"/p{i}", pages or Reply(body=b"<html>ok</html>"))
            return server

        challenged_robots = site("127.0.0.240", robots=CHALLENGE)
        paying = site("127.0.0.241", pages=Reply(402, b"", {"crawler-price": "USD 0.01"}))
        blocking = site("127.0.0.242", pages=Reply(403, b"", {"x-vercel-mitigated": "deny"}))
        negative = [site(f"127.0.0.{243 + n}", pages=p.values[0]) for n, p in enumerate(NEGATIVE)]
        everyone = [challenged_robots, paying, blocking, *negative]
        settings = shared(redis_server, redis_prefix, **FAST, CONCURRENT_REQUESTS_PER_DOMAIN=1)
        workers = []
        for n, name in enumerate("abc"):
            urls = [server.url(f"/p{i}") for server in everyone for i in range(n, 12, 3)]
            workers.append(start_worker(name, urls, settings))
        reports = [report_of(worker, 90) for worker in workers]
        responses = {url for report in reports for url in report["responses"]}
        failures = {url: kind for report in reports for url, kind in report["failures"].items()}

        def failed(server: ScriptedServer) -> set[str]:
            return {failures.get(server.url(f"/p{i}"), "-") for i in range(12)}

        assert challenged_robots.pages() == []  # never allow-all
        assert failed(challenged_robots) == {"RobotsTxtUnavailable"}
        for server, kind in ((paying, "PaymentRequired"), (blocking, "SiteChallenged")):
            assert failed(server) == {kind}, server.host
            senders = [hit.headers.get("X-Worker") for hit in server.page_hits()]
            assert len(senders) == len(set(senders)) <= 3, (server.host, senders)
        for server in negative:
            assert {server.url(f"/p{i}") for i in range(12)} <= responses, server.host
            assert len(server.pages()) == 12, server.host


@pytest.mark.asyncio_only
@pytest_twisted.ensureDeferred
async def test_a_challenged_robots_txt_is_shared_as_such(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """The second worker learns the challenge from Redis: no fetch, no allow-all."""
    with ScriptedServer("127.0.0.252") as site:
        site.script("/robots.txt", Reply(202, b"<html>", {"x-amzn-waf-action": "challenge"}))
        settings = shared(redis_server, redis_prefix)
        first = await run_crawl([site.url("/a")], settings)
        second = await run_crawl([site.url("/b")], settings)
        assert site.hits("/robots.txt") == 1
        assert site.pages() == []
        assert first.failed_with(site.url("/a")) is RobotsTxtUnavailable
        assert second.failed_with(site.url("/b")) is RobotsTxtUnavailable
        assert second.stats["rep/redis/robots/received"] == 1
        assert second.stats["rep/robotstxt/outcome/challenged"] == 1


def test_the_run_of_challenges_is_counted_in_redis(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """The script the workers share a run through: an answer inside the pause
    counts for nothing, each probe doubles the pause, the give-up-th stops (an
    answer after it is no probe), a good answer after the pause clears the count."""
    from scrapy_rep.cluster.pauses import _CHALLENGE, _RESUME, PAUSED, RUNNING, STOP, STOPPED

    client = redis_server.client()
    challenge, resume = client.register_script(_CHALLENGE), client.register_script(_RESUME)
    keys = [f"{redis_prefix}slowdown:s", f"{redis_prefix}pauses", f"{redis_prefix}delay:s"]
    args = ["s", 100_000, 150_000, 3, 60_000, f"{redis_prefix}slowdown", "me", "http://s"]

    def answer() -> tuple[float, int, int, int]:
        left, probes, pauses, what = challenge(keys=keys, args=args)
        return left / 1e6, probes, pauses, what

    def after_the_pause(left: float) -> None:
        threading.Event().wait(left + 0.02)

    left, *run = answer()
    assert run == [0, 1, PAUSED]
    assert 0.09 < left <= 0.1
    assert answer()[1:] == (0, 1, RUNNING)  # sent before the pause began
    after_the_pause(left)
    left, *run = answer()  # the first probe: twice the pause, up to the longest
    assert run == [1, 2, PAUSED]
    assert 0.14 < left <= 0.15
    after_the_pause(left)
    left, *run = answer()
    assert run == [2, 3, PAUSED]
    after_the_pause(left)
    assert answer()[1:] == (3, 3, STOP)
    # a request sent before its worker learnt the stop: no probe, stopped there too
    assert answer()[1:] == (3, 3, STOPPED)
    resume(keys=keys[:1], args=[])  # a good answer after the pause
    assert answer()[1:] == (0, 1, PAUSED)  # a new run
