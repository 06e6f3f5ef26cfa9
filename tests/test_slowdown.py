"""A site that says "slow down" (429, 503, Retry-After) is paused (scrapy_rep.slowdown).

Real crawls against real local servers: the server records when each request
arrived and what it answered; the tests count the requests that arrived
during a pause the site asked for. A request that arrives within 50 ms of a
slow-down answer was sent before the crawler could know (``IN_FLIGHT``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted
import scrapy
from clock_steps import PauseSteps, settle, until
from crawls import CrawlResult, run_crawl, stat_of
from pydispatch.dispatcher import getAllReceivers, liveReceivers
from scrapy import Request, signals
from scrapy.core.downloader import Downloader
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from servers import PAGE, Hit, InTurn, Reply, ScriptedServer, gaps
from twisted.internet.defer import ensureDeferred

from scrapy_rep import _clock
from scrapy_rep._robots import robots_service
from scrapy_rep._slots import pause_problems
from scrapy_rep.config import Config, default_of
from scrapy_rep.exceptions import InvalidSetting

IN_FLIGHT = 0.05  # an answer's own effect on the next request takes this long at most
TOLERANCE = 0.02  # timers and loopback, at the end of a pause
BUSY = 0.5  # how late a loaded machine may deliver an answer that starts a pause
PAUSE_NEVER_OVER = 600.0  # of scrapy-rep's clock, which such a test never moves
RETRYING = {"RETRY_ENABLED": True, "RETRY_TIMES": 2}
IN_THE_SLOT = {"REP_FRONTIER": False, "CLOSESPIDER_TIMEOUT": 30}
"""Requests wait in their download slot, not in the frontier queue; a slot
shut for good ends the crawl in 30 s (the test fails then, it does not hang)."""


@pytest.fixture(autouse=True)
def _info_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="scrapy_rep")


@dataclass(frozen=True)
class Answer:
    time: float
    path: str
    status: int
    pause: float | None  # what the answer asked for (Retry-After), in seconds


class SlowSite:
    """Pages of ``site`` that answer ``status`` while the first ``window``
    seconds (from the first page request) last, then 200; every answer recorded.
    Seconds of scrapy-rep's clock (real time unless the test moves it), so
    that a crawl stepped over its pauses sees the site as one crawled in real time.

    ``retry_after(now)`` gives the Retry-After header (None: none) and the
    seconds it means."""

    def __init__(
        self,
        site: ScriptedServer,
        *,
        status: int = 503,
        window: float = 4.0,
        retry_after: Callable[[float], tuple[str, float] | None] = lambda now: None,
        ok: Reply | None = None,
    ) -> None:
        self.site = site
        self.status = status
        self.window = window
        self.retry_after = retry_after
        self.ok = ok or Reply(body=PAGE)
        self.answers: list[Answer] = []
        self._lock = threading.Lock()
        self._start: float | None = None

    def page(self, path: str) -> str:
        self.site.script(path, lambda number: self._answer(path))
        return self.site.url(path)

    def pages(self, count: int, prefix: str = "/p") -> list[str]:
        return [self.page(f"{prefix}{i}") for i in range(count)]

    def _answer(self, path: str) -> Reply:
        now = _clock.now()  # the crawler's time: a test may move it (rep_clock)
        with self._lock:
            if self._start is None:
                self._start = now
            slow = now - self._start < self.window
        if not slow:
            reply, pause = self.ok, None
        else:
            asked = self.retry_after(now)
            headers = {"Date": formatdate(now, usegmt=True)}
            pause = None
            if asked is not None:
                headers["Retry-After"], pause = asked
            reply = Reply(status=self.status, body=b"slow down", headers=headers)
        with self._lock:
            self.answers.append(Answer(now, path, reply.status, pause))
        return reply

    def slow_answers(self) -> list[Answer]:
        return [a for a in self.answers if a.status == self.status]


def inside_pauses(
    hits: list[Hit],
    answers: list[Answer],
    pause: float | None = None,
    *,
    result: CrawlResult | None = None,
) -> list[Hit]:
    """Requests sent while a pause asked by an answer ran (the answer's own
    Retry-After, else ``pause``), later than IN_FLIGHT after it began.

    A pause runs from when the crawler got the answer (``result.downloaded``):
    on a busy machine that can be half a second after the server sent it, and
    requests sent meanwhile are not inside it. (Without ``result``, a crawl in
    a subprocess: from when the server sent it.) An answer the crawler gets
    while a pause runs starts none: its request was sent before that pause
    began, or is itself inside it (scrapy_rep.slowdown)."""
    received: dict[tuple[str, int], list[float]] = {}
    for url, status, at in result.downloaded if result else ():
        received.setdefault((urlsplit(url).path, status), []).append(at)
    starts = []
    for answer in sorted(answers, key=lambda answer: answer.time):
        got = received.get((answer.path, answer.status))
        length = answer.pause if answer.pause is not None else pause
        starts.append((got.pop(0) if got else answer.time, length))
    spans: list[tuple[float, float]] = []
    for start, length in sorted(starts):
        if length is None or any(begin <= start < end for begin, end in spans):
            continue
        spans.append((start, start + length))
    return [
        hit
        for hit in hits
        if any(begin + IN_FLIGHT < hit.time < end - TOLERANCE for begin, end in spans)
    ]


def slowdown_lines(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "scrapy_rep.slowdown" and r.levelno == level
    ]


def seconds(lines: list[str], marker: str = "no request to it for ") -> list[float]:
    """The pause lengths the INFO lines announced."""
    return [float(line.split(marker)[1].split(" s")[0]) for line in lines if marker in line]


def state_at_close(into: dict[str, Any]) -> Callable[[Any], None]:
    """For run_crawl(before=...): what SlowDown keeps, and its per-request
    signal receivers, when the spider closes."""

    def before(crawler: Any) -> None:
        def closed() -> None:
            robots = robots_service(crawler)
            assert robots is not None
            slowdown = robots.pacing.slowdown
            assert slowdown is not None
            gates = slowdown.gates
            into["gates"] = gates.holding
            into["levels"] = sum(1 for gate in gates.by_slot.values() if gate.answers)
            into["per_request"] = [
                receiver
                for signal in (signals.request_reached_downloader, signals.request_left_downloader)
                for receiver in liveReceivers(getAllReceivers(crawler.signals.sender, signal))
                if getattr(receiver, "__self__", None) in (slowdown, gates)
            ]

        crawler.signals.connect(closed, signal=signals.spider_closed, weak=False)

    return before


# -- settings ---------------------------------------------------------------------------------


def test_settings_defaults_and_bounds() -> None:
    config = Config.from_settings({})
    assert (config.slowdown, config.slowdown_http_codes) == (True, (429, 503))
    assert (config.slowdown_min_delay, config.slowdown_max_delay) == (1.0, 300.0)
    assert config.redis_slowdown is True
    assert default_of("REP_SLOWDOWN_MAX_DELAY") == 300.0
    codes = Config.from_settings({"REP_SLOWDOWN_HTTP_CODES": "503, 429,520"}).slowdown_http_codes
    assert codes == (429, 503, 520)
    assert Config.from_settings({"REP_SLOWDOWN_HTTP_CODES": [503]}).slowdown_http_codes == (503,)
    for setting, value in [
        ("REP_SLOWDOWN_HTTP_CODES", [200]),
        ("REP_SLOWDOWN_HTTP_CODES", [600]),
        ("REP_SLOWDOWN_HTTP_CODES", []),
        ("REP_SLOWDOWN_HTTP_CODES", ["429x"]),
        ("REP_SLOWDOWN_HTTP_CODES", 429),
        ("REP_SLOWDOWN_HTTP_CODES", [True]),
        ("REP_SLOWDOWN_MIN_DELAY", 0),
        ("REP_SLOWDOWN_MIN_DELAY", "nan"),
        ("REP_SLOWDOWN", "sometimes"),
        ("REP_REDIS_SLOWDOWN", "maybe"),
    ]:
        with pytest.raises(InvalidSetting) as raised:
            Config.from_settings({setting: value})
        assert raised.value.setting == setting
    with pytest.raises(InvalidSetting, match="REP_SLOWDOWN_MAX_DELAY"):
        Config.from_settings({"REP_SLOWDOWN_MIN_DELAY": 10, "REP_SLOWDOWN_MAX_DELAY": 5})
    assert Config.from_settings({"REP_SLOWDOWN_MAX_DELAY": 2}).warnings == ()


def test_scrapy_internals_a_pause_relies_on() -> None:
    """Fails when Scrapy moves what pausing a download slot needs (_slots.SlotPauses)."""
    assert pause_problems(object()) != [], "pause_problems checks nothing"
    assert pause_problems(Downloader(get_crawler())) == []


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_without_the_slot_internals_the_gate_still_holds(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Scrapy release without Downloader._latercall: one WARNING at start, and
    the requests not yet in the slot (the retries among them) still wait."""
    monkeypatch.delattr(Downloader, "_latercall")
    slow = SlowSite(site, window=0.3, retry_after=lambda now: ("1", 1.0))
    urls = slow.pages(3)
    result = await run_crawl(urls, RETRYING)
    assert sorted(result.responses) == sorted(urls)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if "Cannot pause" in w] == [
        f"Cannot pause Scrapy {scrapy.__version__}'s download slots: "
        "Downloader._latercall(slot) is missing. A site that answers 429 or 503 is paused "
        "only for the requests that have not reached its download slot yet. Please report this."
    ]
    answered = slow.slow_answers()[0].time
    retries = [h for h in site.page_hits() if h.time > answered + IN_FLIGHT]
    assert retries
    assert min(h.time for h in retries) >= answered + 1 - TOLERANCE


# -- nothing paused, or the switch off ---------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_site_that_never_says_slow_down_costs_no_signal_per_request(
    site: ScriptedServer,
) -> None:
    """Only response_downloaded is listened to; nothing per request, no gate."""
    at_close: dict[str, Any] = {}
    result = await run_crawl([site.url("/a"), site.url("/b")], before=state_at_close(at_close))
    assert len(result.responses) == 2
    assert at_close == {"gates": 0, "levels": 0, "per_request": []}
    assert not [key for key in result.stats if key.startswith("rep/slowdown/")]


@pytest_twisted.ensureDeferred
async def test_the_switch_off_leaves_scrapy_as_it_is(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """REP_SLOWDOWN = False: RetryMiddleware re-sends the 503 at once, as in Scrapy.
    (The site asks for 600 s of scrapy-rep's clock, which the test never moves:
    every attempt meets the 503, however slow the machine.)"""
    slow = SlowSite(site, window=PAUSE_NEVER_OVER, retry_after=lambda now: ("600", 600.0))
    url = slow.page("/p")
    result = await run_crawl([url], {**RETRYING, "REP_SLOWDOWN": False})
    hits = site.page_hits()
    assert len(hits) == 3  # two retries, within the pause it asked for
    assert hits[-1].time - hits[0].time < 600
    assert [answer.status for answer in slow.answers] == [503, 503, 503]
    assert not [key for key in result.stats if key.startswith("rep/slowdown/")]


@pytest_twisted.ensureDeferred
async def test_what_is_kept_per_slot_is_bounded(site: ScriptedServer) -> None:
    """A broad crawl meets many slots: backoff levels and gates are kept for at
    most REP_CACHE_MAX_ORIGINS slots."""
    for i in range(6):
        site.script(f"/x{i}", Reply(status=429))
    requests = [
        Request(site.url(f"/x{i}"), dont_filter=True, meta={"download_slot": f"slot{i}"})
        for i in range(6)
    ]
    at_close: dict[str, Any] = {}
    result = await run_crawl(
        requests,
        {"REP_CACHE_MAX_ORIGINS": 2, "REP_SLOWDOWN_MIN_DELAY": 0.1, "CONCURRENT_REQUESTS": 1},
        before=state_at_close(at_close),
    )
    assert len(result.failures) == 6  # HttpError: retries are off here
    assert result.stats["rep/slowdown/pauses"] == 6
    assert at_close["levels"] == 2


# -- pauses ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_503_with_retry_after_for_4_s_no_request_inside_every_page_downloaded(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture, rep_clock: ModuleType
) -> None:
    """Scrapy 2.19 alone: 31 requests, 29 inside the pauses, 0 of the 10 pages.
    (The test steps scrapy-rep's clock over each pause: clock_steps.PauseSteps.)"""
    slow = SlowSite(site, window=4.0, retry_after=lambda now: ("3", 3.0))
    urls = slow.pages(10)
    at_close: dict[str, Any] = {}
    with PauseSteps(rep_clock):
        result = await run_crawl(urls, RETRYING, before=state_at_close(at_close))

    assert sorted(result.responses) == sorted(urls)
    assert result.failures == {}
    hits = site.page_hits()
    assert inside_pauses(hits, slow.slow_answers(), result=result) == []
    first = slow.slow_answers()[0].time
    after_first = [hit for hit in hits if hit.time > first + IN_FLIGHT]
    # At 3 s one probe, with any request queued in the slot before the pause
    # (its concurrency is 8): 503 again. At 6 s a probe answered 200, then the rest.
    assert after_first[0].time - first >= 3 - TOLERANCE
    assert 1 <= len([hit for hit in after_first if hit.time < first + 3.5]) <= 3
    assert len(hits) <= 10 + 3 + 10
    stats = result.stats
    assert stats["rep/slowdown/pauses"] == 2
    assert stats["rep/slowdown/retry_after/honoured"] == len(slow.slow_answers())
    assert stats["rep/slowdown/response_status_count/503"] == len(slow.slow_answers())
    assert stats["rep/slowdown/resumed"] == 1
    assert 6.0 <= stats["rep/slowdown/seconds"] < 8.0  # a loaded machine answers late
    lines = slowdown_lines(caplog)
    assert seconds(lines) == [3.0, 3.0]
    assert f"{site.origin} (slot '127.0.0.1') answered 503 (Retry-After: 3): " in lines[0]
    (back,) = seconds(lines[-1:], marker="answers again (200) after ")
    assert 6.0 <= back < 8.0, lines[-1]
    assert lines[-1].endswith("s: back to its normal pace"), lines[-1]
    # back to normal: nothing kept for the slot, nothing listened to per request
    assert at_close == {"gates": 0, "levels": 0, "per_request": []}


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_429_without_retry_after_waits_1_s_then_doubles(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture, rep_clock: ModuleType
) -> None:
    """(The test steps scrapy-rep's clock over each pause: clock_steps.PauseSteps.)"""
    slow = SlowSite(site, status=429, window=3.5)
    urls = slow.pages(10)
    with PauseSteps(rep_clock):
        result = await run_crawl(urls, RETRYING)

    assert sorted(result.responses) == sorted(urls)
    assert seconds(slowdown_lines(caplog)) == [1.0, 2.0, 4.0]
    # Each pause runs from when the crawler got a 429 outside the pause before;
    # the next request its slot lets go (the hits' times) comes a pause later:
    # at 1 s (429), then 2 s (429), then 4 s (200).
    got = sorted(at for _, status, at in result.downloaded if status == 429)
    sent = [hit.time for hit in site.page_hits()]
    waits = []
    end = 0.0
    for at in got:
        if at < end:
            continue  # sent before that pause began
        assert len(waits) < 3, f"a fourth pause: 429s got at {got}"
        pause = [1.0, 2.0, 4.0][len(waits)]
        end = at + pause
        waits.append(min(time for time in sent if time > at) - at)
    assert len(waits) == 3, got
    for waited, pause in zip(waits, [1.0, 2.0, 4.0], strict=True):
        assert pause - TOLERANCE <= waited < pause + BUSY, waits
    assert result.stats["rep/slowdown/backoff"] == 3
    assert result.stats["rep/slowdown/pauses"] == 3


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_retry_after_as_an_http_date(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Counted from the response's Date header (the server's clock), not ours."""

    def in_three_seconds(now: float) -> tuple[str, float]:
        return formatdate(int(now) + 3, usegmt=True), int(now) + 3 - now

    slow = SlowSite(site, window=0.5, retry_after=in_three_seconds)
    urls = slow.pages(4)
    result = await run_crawl(urls, RETRYING)

    assert sorted(result.responses) == sorted(urls)
    assert seconds(slowdown_lines(caplog)) == [3.0]
    # the server's Date has whole seconds: the pause is 3 s from it, at most 1 s shorter
    answered = slow.slow_answers()[0].time
    next_hit = next(h.time for h in site.page_hits() if h.time > answered + IN_FLIGHT)
    assert next_hit >= int(answered) + 3 - TOLERANCE
    assert result.stats["rep/slowdown/retry_after/honoured"] >= 1


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_a_hostile_retry_after_is_capped_with_one_warning(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture, rep_clock: ModuleType
) -> None:
    slow = SlowSite(site, window=0.5, retry_after=lambda now: ("999999999", 2.0))
    urls = slow.pages(5)
    with PauseSteps(rep_clock):
        result = await run_crawl(urls, {**RETRYING, "REP_SLOWDOWN_MAX_DELAY": 2})

    assert sorted(result.responses) == sorted(urls)
    assert inside_pauses(site.page_hits(), slow.slow_answers(), result=result) == []
    warnings = slowdown_lines(caplog, logging.WARNING)
    assert warnings == [
        f"{site.origin} asks for a pause of 999999999 s (Retry-After: 999999999): "
        "capped at 2 s (REP_SLOWDOWN_MAX_DELAY)"
    ]
    assert seconds(slowdown_lines(caplog)) == [2.0]
    assert result.stats["rep/slowdown/retry_after/capped"] == len(slow.slow_answers())


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_unreadable_retry_after_means_backoff(site: ScriptedServer) -> None:
    slow = SlowSite(site, window=0.3, retry_after=lambda now: ("soon", 1.0))
    urls = slow.pages(3)
    result = await run_crawl(urls, RETRYING)
    assert sorted(result.responses) == sorted(urls)
    assert inside_pauses(site.page_hits(), slow.slow_answers(), result=result) == []
    assert result.stats["rep/slowdown/retry_after/invalid"] == 3
    assert result.stats["rep/slowdown/backoff"] == 1


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_autothrottle_does_not_undo_the_pause(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    slow = SlowSite(site, window=2.0, retry_after=lambda now: ("2", 2.0))
    urls = slow.pages(8)
    with PauseSteps(rep_clock):
        result = await run_crawl(
            urls, {**RETRYING, "AUTOTHROTTLE_ENABLED": True, "AUTOTHROTTLE_START_DELAY": 0.1}
        )
    assert sorted(result.responses) == sorted(urls)
    assert slow.slow_answers()
    assert inside_pauses(site.page_hits(), slow.slow_answers(), result=result) == []


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_crawl_delay_applies_again_after_the_pause(site: ScriptedServer) -> None:
    site.robots("User-agent: *\nCrawl-delay: 1\n")
    slow = SlowSite(site, window=0.5, retry_after=lambda now: ("2", 2.0))
    urls = slow.pages(4)
    result = await run_crawl(urls, RETRYING)

    assert sorted(result.responses) == sorted(urls)
    hits = site.log()  # robots.txt included: the slot's requests
    answered = slow.slow_answers()[0].time
    assert [h.path for h in hits if answered < h.time < answered + 2 - TOLERANCE] == []
    assert min(gaps(hits)) >= 1 - TOLERANCE, gaps(hits)


PAUSE = 100.0  # of the clock, asked by Retry-After: the other site's pages all fit in it


@pytest_twisted.ensureDeferred
async def test_other_sites_go_on_and_requests_sharing_the_slot_wait(
    site: ScriptedServer,
    site2: ScriptedServer,
    make_site: Callable[[], ScriptedServer],
    rep_clock: ModuleType,
) -> None:
    """With CONCURRENT_REQUESTS = 2, the paused site's requests wait out of the
    concurrency: the other site's pages all come during the pause. A third
    origin put in the paused slot by meta["download_slot"] waits with it.
    (The pause runs on scrapy-rep's clock: it ends when the test moves the
    clock past it, after the other site's pages, however slow the machine.)"""
    third = make_site()  # 127.0.0.1 too: Scrapy's slot key is the host name
    slow = SlowSite(site, window=0.2, retry_after=lambda now: (f"{PAUSE:g}", PAUSE))
    paused = slow.pages(6)
    other = {"download_slot": "other"}
    site2.script("/warm", Reply(body=PAGE, delay=0.5))  # answered during the pause
    free = [Request(site2.url(f"/free{i}"), dont_filter=True, meta=other) for i in range(12)]
    shared = [Request(third.url(f"/shared{i}"), dont_filter=True) for i in range(2)]

    def then(response: Response) -> list[Request]:
        return free + shared if response.url == site2.url("/warm") else []

    crawl = ensureDeferred(
        run_crawl(
            [Request(site2.url("/warm"), meta=other), *paused],
            {**RETRYING, "CONCURRENT_REQUESTS": 2},
            follow=then,
        )
    )
    await until(lambda: len(site2.page_hits("/free")) == 12)  # the pause still runs
    slowed = len(site.page_hits())
    answered = slow.slow_answers()[0].time
    assert third.hits() == 0
    rep_clock.advance(max(answered + PAUSE - 1 - rep_clock.now(), 0.0))  # 1 s before its end
    await settle()
    assert (third.hits(), len(site.page_hits())) == (0, slowed)
    rep_clock.advance(2)
    result = await crawl

    assert len(result.responses) == 1 + 6 + 12 + 2
    assert all(answered < h.time < answered + PAUSE for h in site2.page_hits("/free"))
    the_slot = site.page_hits() + third.page_hits("/shared")
    assert inside_pauses(the_slot, slow.slow_answers(), result=result) == []
    assert min(h.time for h in third.page_hits("/shared")) >= answered + PAUSE - TOLERANCE


def at_once(times: list[float], within: float) -> int:
    """The most arrivals within ``within`` seconds of one another."""
    return max((sum(1 for t in times if start <= t < start + within) for start in times), default=0)


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_after_the_pause_the_slot_concurrency_holds(site: ScriptedServer) -> None:
    """Released all at once, 57 of 60 held requests were sent together where
    CONCURRENT_REQUESTS_PER_DOMAIN was 8: the gate lets them out in a slow start."""
    slow = SlowSite(
        site, window=0.3, retry_after=lambda now: ("1", 1.0), ok=Reply(body=PAGE, delay=0.2)
    )
    urls = slow.pages(40)
    result = await run_crawl(
        urls, {**RETRYING, "CONCURRENT_REQUESTS": 100, "CONCURRENT_REQUESTS_PER_DOMAIN": 8}
    )
    assert len(result.responses) == 40
    last_slow = max(a.time for a in slow.slow_answers())
    served = [a.time for a in slow.answers if a.status == 200 and a.time > last_slow]
    assert at_once(served, 0.19) <= 8


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_requests_queued_in_the_slot_also_resume_slowly(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """8 requests are under way when 32 more are queued in their slot; the 8
    are answered 503: the 32 do not all leave together when the pause ends (a
    slot sends all it has queued at once, whatever its concurrency)."""
    for i in range(8):
        site.script(
            f"/w{i}",
            [
                Reply(status=503, headers={"Retry-After": "1"}, delay=0.3),
                Reply(body=PAGE, delay=0.2),
            ],
        )
    for i in range(32):
        site.script(f"/q{i}", Reply(body=PAGE, delay=0.2))
    other = {"download_slot": "other"}
    site.script("/kick", Reply(body=PAGE, delay=0.1))  # while the 8 are under way

    def queue_more(response: Response) -> list[Request]:
        if response.url != site.url("/kick"):
            return []
        return [Request(site.url(f"/q{i}"), dont_filter=True) for i in range(32)]

    with PauseSteps(rep_clock):
        result = await run_crawl(
            [Request(site.url("/kick"), meta=other), *(site.url(f"/w{i}") for i in range(8))],
            {**RETRYING, "CONCURRENT_REQUESTS": 100, "CONCURRENT_REQUESTS_PER_DOMAIN": 8},
            follow=queue_more,
        )
    assert len(result.responses) == 41
    first_wave = site.page_hits("/w")[:8]
    queued = [h.time for h in site.page_hits("/q")]
    assert min(queued) >= first_wave[-1].time + 0.3 + 1 - TOLERANCE  # after the pause
    later = [h.time for h in site.page_hits() if h.time > first_wave[-1].time + 0.3]
    assert at_once(later, 0.19) <= 8


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_a_429_on_robots_txt_pauses_the_slot_for_the_pages_too(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture, rep_clock: ModuleType
) -> None:
    """The pages wait for robots.txt, then for the pause it asked for."""
    site.script(
        "/robots.txt",
        [Reply(status=429, headers={"Retry-After": "2"}), Reply(body=b"User-agent: *\nAllow: /\n")],
    )
    with PauseSteps(rep_clock):
        result = await run_crawl(
            [site.url(f"/p{i}") for i in range(3)], {"REP_UNREACHABLE": "allow"}
        )
    assert len(result.responses) == 3
    robots = site.log()[0]
    assert robots.path == "/robots.txt"
    assert all(h.time >= robots.time + 2 - TOLERANCE for h in site.page_hits())
    assert seconds(slowdown_lines(caplog)) == [2.0]


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_what_still_fails_after_its_retries_reaches_its_errback(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """Nothing is lost: a page answered 503 on every attempt ends in HttpError,
    as without scrapy-rep, each attempt after the pause the one before asked for."""
    slow = SlowSite(site, window=60, retry_after=lambda now: ("1", 1.0))
    urls = slow.pages(3)
    with PauseSteps(rep_clock):
        result = await run_crawl(urls, {"RETRY_ENABLED": True, "RETRY_TIMES": 1})
    assert sorted(result.failures) == sorted(urls)
    assert {result.failed_with(url) for url in urls} == {HttpError}
    assert len(site.page_hits()) == 6
    assert inside_pauses(site.page_hits(), slow.slow_answers(), result=result) == []


@pytest_twisted.ensureDeferred
async def test_requests_held_when_the_spider_closes_end_in_their_errback(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """A pause longer than the crawl (600 s of scrapy-rep's clock, which the
    test never moves): the spider closes while requests are held (as
    CLOSESPIDER_TIMEOUT closes it), and every held or queued request ends with
    IgnoreRequest; the close does not wait for the pause."""
    from scrapy.exceptions import IgnoreRequest

    slow = SlowSite(site, window=PAUSE_NEVER_OVER, retry_after=lambda now: ("600", 600.0))
    urls = slow.pages(6)
    crawlers: list[Crawler] = []
    # REP_FRONTIER off: with it, the retries wait in the scheduler, not at the gate
    settings = {**RETRYING, "CONCURRENT_REQUESTS_PER_DOMAIN": 2, "REP_FRONTIER": False}
    crawl = ensureDeferred(run_crawl(urls, settings, before=crawlers.append))
    await until(lambda: stat_of(crawlers, "rep/slowdown/held") >= 4)
    engine = crawlers[0].engine
    assert engine is not None
    await deferred_from_coro(engine.close_spider_async(reason="closespider_timeout"))
    result = await crawl
    assert sorted(result.failures) == sorted(urls)
    assert {result.failed_with(url) for url in urls} == {IgnoreRequest}
    assert inside_pauses(site.page_hits(), slow.slow_answers(), result=result) == []
    assert result.stats["rep/slowdown/dropped_closing"] >= 4


REACH = 30.0


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_cached_answers_do_not_stall_the_slow_start(
    site: ScriptedServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HttpCacheMiddleware hits never reach the downloader: each frees its
    place at once, not after REACH_TIMEOUT (made 30 s here, so that a hit
    that waited for it would cost far more than any machine's slowness)."""
    monkeypatch.setattr("scrapy_rep._slots.REACH_TIMEOUT", REACH)
    cache = {
        "HTTPCACHE_ENABLED": True,
        "HTTPCACHE_DIR": str(tmp_path),
        "HTTPCACHE_IGNORE_HTTP_CODES": [503],  # else the retries get the cached 503
    }
    cached = [site.url(f"/c{i}") for i in range(10)]
    await run_crawl(cached, cache)
    site.script("/slow", Reply(body=PAGE, delay=0.3))
    slow = SlowSite(site, window=0.5, retry_after=lambda now: ("1", 1.0))
    got: dict[str, float] = {}

    def then(response: Response) -> list[Request]:
        got[response.url] = time.monotonic()
        if response.url == site.url("/slow"):  # the pause runs by now
            return [Request(url, dont_filter=True) for url in cached]
        return []

    result = await run_crawl(
        [slow.page("/s"), site.url("/slow")],
        {**cache, **RETRYING},
        follow=then,
    )
    assert len(result.responses) == 12
    assert result.stats["httpcache/hit"] >= 10
    cached_at = sorted(got[url] for url in cached)
    assert cached_at[-1] - cached_at[0] < REACH / 2  # 10 x REACH if each waited for it


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_a_second_pause_while_requests_wait_in_the_slot_loses_none(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """With a DOWNLOAD_DELAY, requests the gate let go still wait in the slot
    when a second 503 comes: they are held again, and go again after it (they
    were counted as sent, and the slot stayed shut for the rest of the crawl).
    REP_FRONTIER off: with it, the requests wait in the scheduler, and none is
    in the slot when the second 503 comes (6 or 7 are without it, with a delay
    of 0.1 s as of 0.3 s). (The test steps scrapy-rep's clock over the pauses:
    clock_steps.PauseSteps.)"""
    slow_down = Reply(status=503, headers={"Retry-After": "1"}, body=b"slow down")
    ok = Reply(body=PAGE)
    answer = InTurn(slow_down, ok, ok, ok, ok, slow_down, ok)  # the 1st and 6th page asked

    urls = []
    for i in range(20):
        site.script(f"/p{i}", answer)
        urls.append(site.url(f"/p{i}"))
    with PauseSteps(rep_clock):
        result = await run_crawl(
            urls,
            {**RETRYING, **IN_THE_SLOT, "DOWNLOAD_DELAY": 0.1, "CONCURRENT_REQUESTS_PER_DOMAIN": 8},
        )
    assert sorted(result.responses) == sorted(urls)
    assert result.stats["rep/slowdown/pauses"] == 2
