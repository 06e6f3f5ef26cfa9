"""Pages answered with a stop signal: the request ends in its errback, the origin pauses, stops.

Real crawls; each case on a loopback address of its own (127.0.0.x). Before:
30 of 30 pages of an origin challenging every page were sent, a 429 challenge
was retried by Scrapy, and a 402 was recorded nowhere.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted
from clock_steps import PauseSteps
from crawls import CrawlResult, run_crawl
from scrapy import Request, signals
from scrapy.spidermiddlewares.httperror import HttpError
from servers import PAGE, Gate, Hit, Reply, ScriptedServer, own_address

from scrapy_rep import PaymentRequired, SiteChallenged
from scrapy_rep import signals as rep_signals

CHALLENGE_PAGE = b"<!DOCTYPE html><html><head><title>Just a moment...</title></head></html>"
PAUSE = 0.5
FAST: dict[str, Any] = {
    "REP_CHALLENGE_PAUSE": PAUSE,
    "REP_CHALLENGE_MAX_PAUSE": 2 * PAUSE,
    "RETRY_ENABLED": True,  # Scrapy's retries on: none may happen
}
STEP_PAUSE = 30.0
STEPPED: dict[str, Any] = {
    "REP_CHALLENGE_PAUSE": STEP_PAUSE,
    "REP_CHALLENGE_MAX_PAUSE": 2 * STEP_PAUSE,
    "RETRY_ENABLED": True,
}
"""Pauses that end only when the test steps scrapy-rep's clock over them."""
LEAD = 5.0
"""Seconds before a pause's end at which the clock stands while the crawl may act."""


def pages(site: ScriptedServer, count: int) -> list[str]:
    return [site.url(f"/page/{i}") for i in range(count)]


def script_pages(site: ScriptedServer, reply: Reply, count: int) -> None:
    for i in range(count):
        site.script(f"/page/{i}", reply)


def first_answer(result: CrawlResult) -> float:
    return min(at for url, _, at in result.downloaded if "/page/" in url)


def after(hits: list[Hit], when: float) -> list[Hit]:
    return [hit for hit in hits if hit.time > when]


def accounted(result: CrawlResult, urls: list[str], error: type[BaseException]) -> None:
    """Every request ended in its errback with ``error``; none reached the spider."""
    assert result.responses == {}
    assert sorted(result.failures) == sorted(urls)
    assert {result.failed_with(url) for url in urls} == {error}


CHALLENGES = [
    pytest.param(Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"}), id="cloudflare-403"),
    pytest.param(Reply(403, CHALLENGE_PAGE, {"x-vercel-mitigated": "challenge"}), id="vercel-403"),
    pytest.param(Reply(429, CHALLENGE_PAGE, {"x-vercel-mitigated": "challenge"}), id="vercel-429"),
    pytest.param(Reply(202, CHALLENGE_PAGE, {"x-amzn-waf-action": "challenge"}), id="aws-waf-202"),
    pytest.param(
        Reply(200, b'<script src="/.within.website/x/cmd/anubis/static/js/main.mjs"></script>'),
        id="anubis-200",
    ),
]


@pytest.mark.parametrize("reply", CHALLENGES)
@pytest_twisted.ensureDeferred
async def test_an_origin_challenging_every_page_is_paused_then_stopped(
    own_site: ScriptedServer, reply: Reply, rep_clock: ModuleType
) -> None:
    await paused_then_stopped(own_site, reply, STEPPED, rep_clock)


@pytest_twisted.ensureDeferred
async def test_without_the_frontier_too(own_site: ScriptedServer, rep_clock: ModuleType) -> None:
    """Requests that left the scheduler wait at the slot's gate instead."""
    reply = Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"})
    await paused_then_stopped(own_site, reply, {**STEPPED, "REP_FRONTIER": False}, rep_clock)


@pytest_twisted.ensureDeferred
async def test_with_the_slow_down_off_too(own_site: ScriptedServer, rep_clock: ModuleType) -> None:
    """REP_SLOWDOWN = False: the gates are built for challenge pauses alone."""
    reply = Reply(429, CHALLENGE_PAGE, {"x-vercel-mitigated": "challenge"})
    await paused_then_stopped(own_site, reply, {**STEPPED, "REP_SLOWDOWN": False}, rep_clock)


async def paused_then_stopped(
    site: ScriptedServer,
    reply: Reply,
    settings: dict[str, Any],
    clock: ModuleType,
    meta: dict[str, Any] | None = None,
) -> None:
    """30 pages, each answered with ``reply``, requested with ``meta``. The
    test steps scrapy-rep's clock over each pause (clock_steps.PauseSteps): a
    pause ends only when the test says so, and the send stamps are in the
    clock's time."""
    script_pages(site, reply, 30)
    urls = pages(site, 30)
    requests: list[str | Request] = [
        Request(url, dont_filter=True, meta=dict(meta or {})) for url in urls
    ]
    with PauseSteps(clock, source="challenges", lead=LEAD) as steps:
        result = await run_crawl(requests, settings)
    hits = site.page_hits()
    stats = result.stats
    # 30 s, then 60 s, 60 s (REP_CHALLENGE_MAX_PAUSE); the third probe stops it
    assert steps.pauses == [STEP_PAUSE, 2 * STEP_PAUSE, 2 * STEP_PAUSE]
    starts = [start for start, _ in steps.windows]
    ends = [end for _, end in steps.windows]
    # Before the first pause's end only what left before the first challenge
    # was read: at most the slot's concurrency (8). Nothing in the last
    # ``LEAD`` seconds of any pause (the clock stood there while the crawl
    # could act), then one probe per pause, 3 in all (REP_CHALLENGE_GIVE_UP).
    assert len([hit for hit in hits if hit.time < ends[0]]) <= 8
    for end in ends:
        assert [hit.time for hit in hits if end - LEAD <= hit.time < end] == []
    probes = [hit for hit in hits if hit.time >= ends[0]]
    windows = zip(ends, [*starts[1:], float("inf")], strict=True)
    assert [len([p for p in probes if begin <= p.time < stop]) for begin, stop in windows] == [
        1,
        1,
        1,
    ]
    assert len(hits) <= 8 + 3  # before: 30 of 30
    assert len({hit.path for hit in hits}) == len(hits)  # none retried
    assert stats.get("retry/count") is None
    # every queued request is accounted for
    accounted(result, urls, SiteChallenged)
    assert stats["rep/challenge/stopped"] == 1
    assert stats["rep/challenge/origins"] == 1
    assert stats["rep/challenge/probes"] == 3
    assert stats["rep/challenge/pauses"] == 3
    assert stats["rep/challenge/dropped"] == 30 - len(hits)
    assert sum(v for k, v in stats.items() if k.startswith("rep/challenge/responses/")) == len(hits)
    assert not any(k.startswith("rep/slowdown/pauses") for k in stats)


@pytest_twisted.ensureDeferred
async def test_told_once_per_origin_and_in_the_close_section(
    own_site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    script_pages(own_site, Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"}), 10)
    caplog.set_level(logging.INFO, logger="scrapy_rep")
    await run_crawl(pages(own_site, 10), {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and r.name == "scrapy_rep.challenges"
    ]
    closing = [
        r.getMessage()
        for r in caplog.records
        if r.name == "scrapy_rep.report" and r.getMessage().startswith("Stop signals")
    ]
    lines += closing  # the close report's section, after its summary
    origin = own_site.origin
    assert lines[0] == (
        f"{origin} challenged by Cloudflare (cf-mitigated: challenge); "
        f"paused {PAUSE:g} s (REP_CHALLENGE_PAUSE), then one probe"
    )
    assert lines[1] == (
        f"{origin} challenged by Cloudflare (cf-mitigated: challenge), 3 probes in a row: "
        "stopped, its requests are not sent"
    )
    section = lines[2].splitlines()
    assert (
        section[0]
        == "Stop signals: 1 origin(s) answered with one, 1 stopped, 6 request(s) not sent"
    )
    assert re.fullmatch(
        rf"  {re.escape(origin)}: challenged by Cloudflare \(cf-mitigated: challenge\) at "
        r"\d\d:\d\d:\d\d; 3 probe\(s\); stopped: 6 request\(s\) not sent",
        section[1],
    )
    assert len(lines) == 3


@pytest_twisted.ensureDeferred
async def test_the_exception_says_who_and_why(own_site: ScriptedServer) -> None:
    script_pages(own_site, Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"}), 2)
    seen: list[dict[str, Any]] = []

    def connect(crawler: Any) -> None:
        def challenged(**kwargs: Any) -> None:
            seen.append(kwargs)

        crawler.signals.connect(challenged, signal=rep_signals.site_challenged, weak=False)

    result = await run_crawl(
        pages(own_site, 1), {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}, before=connect
    )
    error = result.failures[own_site.url("/page/0")].value
    assert isinstance(error, SiteChallenged)
    assert (error.origin, error.provider, error.kind) == (
        own_site.origin,
        "Cloudflare",
        "challenge",
    )
    assert error.marker == "cf-mitigated: challenge"
    assert error.response is not None
    assert error.response.status == 403
    assert not error.stopped
    assert [s["provider"] for s in seen] == ["Cloudflare"]
    assert result.stats["rep/challenge/responses/cloudflare"] == 1


@pytest_twisted.ensureDeferred
async def test_a_good_answer_ends_the_run(own_site: ScriptedServer) -> None:
    """Challenged, paused, then the probe is answered: the crawl goes on."""
    own_site.script(
        "/page/0", Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"})
    )  # the first answer only
    urls = pages(own_site, 6)
    result = await run_crawl(urls, {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    assert sorted(result.responses) == sorted(urls[1:])
    assert result.failed_with(urls[0]) is SiteChallenged
    assert result.stats["rep/challenge/pauses"] == 1
    assert result.stats.get("rep/challenge/stopped") is None
    hits = own_site.page_hits()
    assert hits[1].time - hits[0].time >= PAUSE - 0.02


@pytest_twisted.ensureDeferred
async def test_a_block_stops_the_origin_at_once(own_site: ScriptedServer) -> None:
    script_pages(own_site, Reply(403, b"", {"x-vercel-mitigated": "deny"}), 20)
    urls = pages(own_site, 20)
    result = await run_crawl(urls, {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    assert own_site.pages() == ["/page/0"]
    accounted(result, urls, SiteChallenged)
    assert result.failures[urls[0]].value.kind == "block"
    assert result.stats["rep/challenge/stopped"] == 1
    assert result.stats["rep/challenge/dropped"] == 19
    assert result.stats.get("rep/challenge/pauses") is None


@pytest_twisted.ensureDeferred
async def test_a_402_with_a_price_stops_the_origin(
    own_site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="scrapy_rep")
    script_pages(own_site, Reply(402, b"", {"crawler-price": "USD 0.01"}), 10)
    urls = pages(own_site, 10)
    offers: list[Any] = []

    def connect(crawler: Any) -> None:
        def paid(offer: Any, **_: Any) -> None:
            offers.append(offer)

        crawler.signals.connect(paid, signal=rep_signals.payment_required, weak=False)

    result = await run_crawl(urls, {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}, before=connect)
    assert own_site.pages() == ["/page/0"]  # before: 10 of 10
    accounted(result, urls, PaymentRequired)
    first = result.failures[urls[0]].value
    assert (first.price, first.scheme, first.stopped) == ("USD 0.01", "crawler-price", False)
    assert all(result.failures[url].value.stopped for url in urls[1:])
    assert [offer.price for offer in offers] == ["USD 0.01"]
    stats = result.stats
    assert (stats["rep/payment/responses"], stats["rep/payment/origins"]) == (1, 1)
    assert (stats["rep/payment/stopped"], stats["rep/payment/dropped"]) == (1, 9)
    (section,) = [r.getMessage() for r in caplog.records if "Stop signals" in r.getMessage()]
    assert (
        f"{own_site.origin}: asks for payment: crawler-price USD 0.01 (Cloudflare pay per crawl)"
        in section
    )
    assert section.endswith("stopped: 9 request(s) not sent")


@pytest_twisted.ensureDeferred
async def test_a_402_under_skip_ends_only_its_request(own_site: ScriptedServer) -> None:
    script_pages(own_site, Reply(402, b"", {"crawler-price": "USD 0.01"}), 5)
    urls = pages(own_site, 5)
    result = await run_crawl(urls, {**FAST, "REP_ON_PAYMENT": "skip"})
    assert len(own_site.pages()) == 5
    accounted(result, urls, PaymentRequired)
    assert result.stats["rep/payment/responses"] == 5
    assert result.stats.get("rep/payment/stopped") is None


@pytest_twisted.ensureDeferred
async def test_plain_403s_in_a_row_read_as_a_refusal(own_site: ScriptedServer) -> None:
    script_pages(own_site, Reply(403, b"Forbidden"), 30)
    urls = pages(own_site, 30)
    result = await run_crawl(
        urls, {**FAST, "REP_BLOCK_AFTER": 5, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}
    )
    # 5 plain 403s, a pause, then 3 probes (each a 403), then stopped
    assert len(own_site.pages()) == 5 + 3
    stats = result.stats
    assert stats["rep/challenge/refused"] == 1
    assert stats["rep/challenge/stopped"] == 1
    assert stats["rep/challenge/dropped"] == 30 - 8
    errors = {result.failed_with(url) for url in urls}
    assert errors == {HttpError, SiteChallenged}  # the 403s themselves reach Scrapy as before


@pytest_twisted.ensureDeferred
async def test_a_2xx_between_403s_restarts_the_count(own_site: ScriptedServer) -> None:
    for i in range(12):
        own_site.script(f"/page/{i}", Reply(200, PAGE) if i % 4 == 3 else Reply(403, b"no"))
    urls = pages(own_site, 12)
    result = await run_crawl(
        urls, {**FAST, "REP_BLOCK_AFTER": 4, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}
    )
    assert len(own_site.pages()) == 12
    assert result.stats.get("rep/challenge/refused") is None


@pytest_twisted.ensureDeferred
async def test_dont_obey_robotstxt_requests_obey_the_stop(own_site: ScriptedServer) -> None:
    script_pages(own_site, Reply(403, b"", {"x-vercel-mitigated": "deny"}), 10)
    urls = pages(own_site, 10)
    requests: list[str | Request] = [
        Request(url, dont_filter=True, meta={"dont_obey_robotstxt": True}) for url in urls
    ]
    result = await run_crawl(requests, {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    assert len(own_site.pages()) == 1
    accounted(result, urls, SiteChallenged)


@pytest.mark.parametrize("frontier", [True, False], ids=["frontier", "no-frontier"])
@pytest_twisted.ensureDeferred
async def test_dont_obey_robotstxt_requests_obey_the_pauses(
    own_site: ScriptedServer, frontier: bool, rep_clock: ModuleType
) -> None:
    """They skip robots.txt, not the pauses: one probe per pause window, then the stop."""
    reply = Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"})
    settings = {**STEPPED, "REP_FRONTIER": frontier}
    await paused_then_stopped(
        own_site, reply, settings, rep_clock, meta={"dont_obey_robotstxt": True}
    )
    assert own_site.hits("/robots.txt") == 0


class _PausesLogged(logging.Handler):
    """Appends "pause" to ``events`` as scrapy_rep.challenges logs a pause."""

    def __init__(self, events: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self._events = events
        self._logger = logging.getLogger("scrapy_rep.challenges")

    def emit(self, record: logging.LogRecord) -> None:
        if "; paused %g s%s (REP_CHALLENGE_PAUSE)" in str(record.msg):
            self._events.append("pause")

    def __enter__(self) -> None:
        self._level = self._logger.level
        self._logger.setLevel(logging.DEBUG)
        self._logger.addHandler(self)

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)


@pytest_twisted.ensureDeferred
async def test_a_late_answer_sent_before_the_pause_is_no_probe(own_site: ScriptedServer) -> None:
    """One of the first two pages answers its challenge after the first pause
    is over, while the first probe is still out (the site answers it once the
    probe has come, and the probe once the crawler has that late answer): it
    was sent before that pause began, so it is no probe: each probe goes a
    pause after the previous probe's answer, and the origin is stopped after
    REP_CHALLENGE_GIVE_UP of them (before: the late answer counted as a probe
    and began the second pause, and the next probe went 0.66 s after the
    first probe's answer, for a pause of 1 s)."""
    challenge = Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"})
    both_out, probe_came, late_got = Gate(), Gate(), Gate()
    script_pages(own_site, challenge, 30)
    # page 0 answers (and begins the pause) once page 1 is at the site: sent
    # before the pause however slowly this machine sends it
    own_site.script("/page/0", dataclasses.replace(challenge, wait_for=both_out))
    own_site.script("/page/1", dataclasses.replace(challenge, opens=both_out, wait_for=probe_came))
    own_site.script("/page/2", dataclasses.replace(challenge, wait_for=late_got))  # the probe

    def follow(crawler: Any) -> None:
        def reached(request: Request, **_: Any) -> None:
            if request.url.endswith("/page/2"):  # after the first pause: the probe
                probe_came.set()

        def downloaded(request: Request, **_: Any) -> None:
            events.append(urlsplit(request.url).path)
            if request.url.endswith("/page/1"):  # scrapy-rep reads it before the probe's
                late_got.set()

        connect = crawler.signals.connect
        connect(reached, signal=signals.request_reached_downloader, weak=False)
        connect(downloaded, signal=signals.response_downloaded, weak=False)

    # what scrapy-rep did, in order: each answer it read, each pause it began
    # (logged as it reads the answer that begins it)
    events: list[str] = []
    with _PausesLogged(events):
        result = await run_crawl(
            pages(own_site, 30), {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 2}, before=follow
        )
    began_by = [events[i - 1] for i, event in enumerate(events) if event == "pause"]
    assert began_by == ["/page/0", "/page/2", "/page/3"], events
    stats = result.stats
    assert stats["rep/challenge/probes"] == 3
    assert stats["rep/challenge/stopped"] == 1
    hits = own_site.page_hits()
    probes = [hit for hit in hits if hit.path not in {"/page/0", "/page/1"}]
    assert [hit.path for hit in probes] == ["/page/2", "/page/3", "/page/4"], hits
    # each probe a pause after the answer that began it: the first page's, then
    # the previous probe's (before: page 1's late answer began the second pause,
    # and the first probe's answer, inside it, counted for nothing)
    answered = {url.split("/", 3)[-1]: at for url, _, at in result.downloaded}
    began = [answered["page/0"], answered["page/2"], answered["page/3"]]
    for probe, start, pause in zip(probes, began, [PAUSE, 2 * PAUSE, 2 * PAUSE], strict=True):
        assert probe.time - start >= pause, (probe.path, probe.time - start)
    accounted(result, pages(own_site, 30), SiteChallenged)


@pytest_twisted.ensureDeferred
async def test_other_origins_go_on(own_site: ScriptedServer) -> None:
    with ScriptedServer(own_address()) as plain:
        plain.robots("User-agent: *\nAllow: /\n")
        script_pages(own_site, Reply(403, b"", {"x-vercel-mitigated": "deny"}), 10)
        urls = pages(own_site, 10) + pages(plain, 10)
        result = await run_crawl(urls, FAST)
        assert sorted(result.responses) == sorted(pages(plain, 10))
        assert len(plain.pages()) == 10


NEGATIVE = [
    pytest.param(
        Reply(
            200,
            PAGE,
            {
                "Content-Security-Policy": "default-src 'self'; script-src 'self' "
                "https://www.google.com/recaptcha/ https://cdnjs.cloudflare.com/"
            },
        ),
        id="csp-naming-cloudflare-and-recaptcha",
    ),
    pytest.param(Reply(200, PAGE, {"cf-ray": "8a1b2c3d4e5f-AMS"}), id="cf-ray"),
    pytest.param(Reply(200, PAGE, {"Server": "cloudflare"}), id="server-cloudflare"),
    pytest.param(Reply(200, PAGE, {"x-datadome": "protected"}), id="x-datadome-on-200"),
    pytest.param(
        Reply(
            200,
            b"<html><body><article><h1>Anubis and the small web</h1><p>Anubis weighs "
            b"the soul of incoming HTTP requests with a proof of work.</p></article></body></html>",
        ),
        id="article-about-anubis",
    ),
]


@pytest.mark.parametrize("reply", NEGATIVE)
@pytest_twisted.ensureDeferred
async def test_no_false_positive(own_site: ScriptedServer, reply: Reply) -> None:
    """The presence of a WAF is not action by a WAF: every page reaches the spider."""
    script_pages(own_site, reply, 10)
    urls = pages(own_site, 10)
    result = await run_crawl(urls, FAST)
    assert sorted(result.responses) == sorted(urls)
    assert result.failures == {}
    assert not any(k.startswith(("rep/challenge/", "rep/payment/")) for k in result.stats)
