"""Redis slow and Redis full under three workers on scrapy-rep's queue
(``SCHEDULER_QUEUE_CLASS = "scrapy_rep.RedisPoliteQueue"``), one real Redis.

The sites and workers are those of tests/test_redis_frontier.py. The fault
starts when the first ``pN.test`` page is asked for, once every start request
is in scrapy-redis's dupefilter and every robots.txt result in Redis, so the
503 of those sites reaches the workers during the fault (their retries are
pushed then). It lasts ``FAULT`` seconds. ``dqN.test`` sites (Crawl-delay
sites, as every ``d*`` host) answer 503 + Retry-After to their first page
asked for ``SETTLE`` seconds after the fault: the pause must then hold
cluster-wide again.

- slow: ``DEBUG SLEEP`` bursts back to back, each longer than
  ``REP_REDIS_TIMEOUT`` (1 s); a call may wait for two. scrapy-redis's own
  client waits longer (``REDIS_PARAMS`` socket timeout: 10 s here, 30 s by
  default), so its calls, the queue's included, block the worker meanwhile;
- full: ``maxmemory`` below what Redis holds, ``noeviction``: every write that
  needs memory fails with an OOM error reply; then raised again.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from redis_server import RedisServer
from test_redis_cluster import finish
from test_redis_frontier import DELAY, IN_FLIGHT, PAUSE, SLACK, ManySites, crawl, interleaved

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free]  # worker subprocesses

FAULT = 2.0
"""Seconds of the fault: the 503s of the pN.test sites reach the workers and
their retries are pushed meanwhile (at once: the fault begins as the first is
asked for). Slow: two DEBUG SLEEP bursts, 3 s."""
SETTLE = 2.0  # after the fault: REP_REDIS_RETRY (1 s here) and a margin
SLEEP = 1.5  # seconds of one DEBUG SLEEP
QUEUE_WARNING = "The Redis queue is unavailable ("
LINK_WARNING = re.compile(r"WARNING: Redis at \S+ unavailable \(")
PAUSE_WARNING = "Redis unavailable: the pause of download slot"
DELAYED_PAGES = 8
"""Pages of each Crawl-delay site, one a second, none answered before the
fault holds: FAULT + SETTLE (4 s) after it began, 3 or more are still to go,
and 3 gaps after the fault prove the spacing is back (2 pages are needed
there, and one after the late 503's pause)."""


Apply = Callable[[Any, float, Callable[[], None]], None]
"""(client, until, on): bring the fault about, call ``on()`` once it holds,
end it at ``until`` (``time.time()``)."""


class Fault:
    """Runs ``apply`` once, in a thread of its own, from the first call of
    ``begin`` after every start request is scheduled and every robots.txt
    result published (``begin`` waits for that, 60 s at most, and returns once
    the fault holds)."""

    def __init__(self, redis: RedisServer, ready: Callable[[], bool], apply: Apply) -> None:
        self.redis = redis
        self.ready = ready
        self.apply = apply
        self.holds = threading.Event()
        self.lock = threading.Lock()
        self.began = 0.0
        self.ended = 0.0
        self.problem: str | None = None
        self.thread: threading.Thread | None = None

    def begin(self) -> None:
        with self.lock:
            if self.thread is not None:
                return
            deadline = time.monotonic() + 60
            while not self.ready():
                if time.monotonic() > deadline:
                    self.problem = "the start requests or robots.txt files were not all done"
                    break
                time.sleep(0.02)
            self.began = time.time()
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
            if not self.holds.wait(10):
                self.problem = "the fault did not begin"

    def _run(self) -> None:
        client = self.redis.client()
        try:
            self.apply(client, self.began + FAULT, self.holds.set)
        finally:
            self.holds.set()
            self.ended = time.time()
            client.close()

    def over(self) -> bool:
        return bool(self.ended) and time.time() > self.ended + SETTLE


class FaultySites(ManySites):
    """``pN.test``: their first page starts the fault; ``d*`` (Crawl-delay
    sites): no page answered before it holds; ``dqN.test``: their first page
    asked for ``SETTLE`` s after the fault answers 503."""

    def __init__(self) -> None:
        super().__init__()
        self.fault: Fault | None = None
        self._late_503: set[str] = set()

    def answer(self, host: str, path: str) -> tuple[int, bytes, dict[str, str]]:
        if path != "/robots.txt" and self.fault is not None:
            if host.startswith("p"):
                self.fault.begin()
            elif host.startswith("d") and not self.fault.holds.is_set():
                # A Crawl-delay site's first page is answered once the fault holds:
                # its pages, a turn apart, then go on past the fault's end however
                # far a loaded machine's crawl got before it began
                self.fault.holds.wait(60)
            if host.startswith("dq") and self.fault.over():
                with self._lock:
                    first = host not in self._late_503
                    self._late_503.add(host)
                if first:
                    return 503, b"busy", {"Content-Type": "text/plain", "Retry-After": f"{PAUSE:g}"}
        return super().answer(host, path)


@pytest.fixture
def sites() -> Any:
    served = FaultySites()
    yield served
    served.close()


def slow(client: Any, until: float, on: Callable[[], None]) -> None:
    """Redis busy: each command waits for the burst under way to end."""
    on()  # (a moment early: the first burst starts on its way)
    while time.time() < until:
        client.execute_command("DEBUG", "SLEEP", SLEEP)


def full(client: Any, until: float, on: Callable[[], None]) -> None:
    """Redis full: writes that need memory fail (OOM error reply), reads answer."""
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    on()
    try:
        time.sleep(max(until - time.time(), 0))
    finally:
        client.config_set("maxmemory", 0)


def crawl_through_fault(
    sites: FaultySites,
    redis: RedisServer,
    prefix: str,
    apply: Apply,
    **settings: Any,
) -> tuple[list[str], list[str], list[dict[str, Any]], Fault]:
    hosts = [f"a{n}.test" for n in range(60)] + [f"p{n}.test" for n in range(3)]
    hosts += [f"d{n}.test" for n in range(3)] + [f"dq{n}.test" for n in range(2)]
    pages = {h: DELAYED_PAGES if h.startswith("d") else 2 for h in hosts}
    urls = interleaved(hosts, pages, sites)
    client = redis.client()

    def ready() -> bool:
        # every robots.txt result published (a worker waiting for one when
        # Redis fails fetches it itself: the fault would be at start-up), and
        # every start request scheduled (else scrapy-redis's dupefilter raises)
        published = sum(1 for _ in client.scan_iter(match=prefix + "robots:*", count=1000))
        return published >= len(hosts) and sites.starts_scheduled

    fault = sites.fault = Fault(redis, ready, apply)
    reports = finish(crawl(sites, redis, prefix, urls, **settings), timeout=300)
    assert fault.thread is not None, "the fault never began"
    fault.thread.join(FAULT + 30)
    assert fault.problem is None, fault.problem
    return hosts, urls, reports, fault


def assert_nothing_lost_and_polite_again(
    sites: FaultySites,
    hosts: list[str],
    urls: list[str],
    reports: list[dict[str, Any]],
    fault: Fault,
) -> None:
    # robots.txt once per origin for the cluster, but during the fault: a
    # worker that had not learned an origin from Redis yet fetches it itself
    back = fault.ended + SETTLE
    for host in hosts:
        robots = [h for h in sites.of(host) if h.path == "/robots.txt"]
        during = [h for h in robots if fault.began <= h.time < back]
        assert len(robots) - len(during) == 1, (host, robots, fault.began, back)
        assert len({h.worker for h in during}) == len(during), (host, during)
    # nothing lost, nothing fetched twice, every worker ended (finish())
    fetched = [
        sites.url(h.host, h.path) for h in sites.hits if h.status == 200 and h.path != "/robots.txt"
    ]
    assert sorted(fetched) == sorted(urls), sorted(set(urls) - set(fetched))[:10]
    responses = [url for report in reports for url in report["responses"]]
    assert sorted(responses) == sorted(urls)
    for report in reports:
        assert report["failures"] == {}, report["failures"]
    # one WARNING per outage from each part that falls back: shared state, the
    # queue, and the pauses of 429/503 answers received meanwhile
    for report in reports:
        assert len(LINK_WARNING.findall(report["log"])) <= 1, report["log"][-3000:]
        assert report["log"].count(QUEUE_WARNING) <= 1, report["log"][-3000:]
        assert report["log"].count(PAUSE_WARNING) <= 1, report["log"][-3000:]
    # Crawl-delay across workers again after the fault (before it, these
    # sites have sent nothing but robots.txt: the fault begins with the first
    # pN.test page; tests/test_redis_frontier.py checks the gaps of a crawl
    # without a fault)
    for host in (h for h in hosts if h.startswith("d")):
        times = [h.time for h in sites.of(host)]
        after = [b - a for a, b in itertools.pairwise(times) if a >= back]
        assert after, (host, "no request after the fault")
        shown = "\n".join(
            f"{h.time - fault.began:8.3f} {h.path} {h.worker} {h.status}" for h in sites.of(host)
        )
        fault_time = f"fault: 0 to {fault.ended - fault.began:.3f} s"
        assert min(after) >= DELAY - SLACK, f"{host}, {fault_time}:\n{shown}"
    # a 503 after the fault pauses the slot for every worker again
    for host in (h for h in hosts if h.startswith("dq")):
        hits = sites.of(host)
        late = [h for h in hits if h.status == 503]
        assert len(late) == 1, (host, late)
        # (asked for SETTLE s after the fault, on arrival; its send time is a
        # little earlier: still well past REP_REDIS_RETRY)
        assert late[0].time >= fault.ended + 1.0, (host, late, fault.ended)
        received = [r["slowed"][host] for r in reports if host in r["slowed"]]
        paused_at = min(received, default=late[0].time)
        inside = [
            h
            for h in hits
            if h.path != "/robots.txt"
            and paused_at + IN_FLIGHT < h.time < paused_at + PAUSE - SLACK
        ]
        assert inside == [], (host, paused_at, inside)
        # (and other pages than the 503's were still waiting for the pause to end)
        waited = [h for h in hits if h.path not in ("/robots.txt", late[0].path)]
        assert max(h.time for h in waited) >= paused_at + PAUSE - SLACK, (host, "none after it")


def show(name: str, reports: list[dict[str, Any]], fault: Fault) -> None:
    print(f"{name}: fault {fault.ended - fault.began:.1f} s")
    for report in reports:
        stats = report["stats"]
        print(
            report["name"],
            {k: v for k, v in stats.items() if "redis" in k and "robots" not in k},
            "queue warnings:",
            report["log"].count(QUEUE_WARNING),
            "link warnings:",
            len(LINK_WARNING.findall(report["log"])),
        )
        for line in report["log"].splitlines():
            if "Redis" in line:
                print("   ", line[:300])


def test_redis_slow_mid_crawl_loses_nothing_and_politeness_comes_back(
    sites: FaultySites, own_redis: RedisServer, redis_prefix: str
) -> None:
    own_redis.stop()
    own_redis.options = ["--enable-debug-command", "local"]
    own_redis.start()
    # scrapy-redis's client waits longer than a burst (its default: 30 s)
    hosts, urls, reports, fault = crawl_through_fault(
        sites, own_redis, redis_prefix, slow, REDIS_PARAMS={"socket_timeout": 10}
    )
    show("slow", reports, fault)
    assert_nothing_lost_and_polite_again(sites, hosts, urls, reports, fault)


def test_redis_full_mid_crawl_loses_nothing_and_politeness_comes_back(
    sites: FaultySites, own_redis: RedisServer, redis_prefix: str
) -> None:
    hosts, urls, reports, fault = crawl_through_fault(sites, own_redis, redis_prefix, full)
    show("full", reports, fault)
    assert_nothing_lost_and_polite_again(sites, hosts, urls, reports, fault)
    stats = [r["stats"] for r in reports]
    # the retries of the 503 pages could not be pushed: kept by their worker
    assert sum(s.get("rep/redis/frontier/local", 0) for s in stats) >= 1, stats
    assert sum(s.get("rep/redis/outages", 0) for s in stats) >= 1, stats
    assert any(LINK_WARNING.search(r["log"]) for r in reports)  # each told once, above


def test_a_failure_soon_after_redis_answers_again_continues_the_outage(
    rep_clock: ModuleType,
) -> None:
    """The rule the tests above rely on (scrapy_rep.cluster.link.Outage): a
    slow or full Redis answers some calls and fails others; the failures of
    one such period are one outage, told once."""
    from scrapy_rep.cluster import link

    outage = link.Outage()
    assert not outage.end()  # no outage: nothing to tell
    assert outage.begin()  # WARNING
    assert not outage.begin()  # still under way
    rep_clock.advance(2)
    assert outage.end()  # INFO: answers again
    rep_clock.advance(1)
    assert not outage.begin()  # fails again a moment later: the same outage
    assert outage.on
    assert not outage.end()  # its end was told already
    rep_clock.advance(link.SAME_OUTAGE + 1)
    assert outage.begin()  # long after: a new outage, a new WARNING
    assert outage.end()
