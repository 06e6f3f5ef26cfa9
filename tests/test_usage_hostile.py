"""UsageMiddleware against hostile tdmrep.json servers: real crawls, real local servers.

A page waits for its origin's ``/.well-known/tdmrep.json`` before it reaches
the spider. That wait must cost other origins nothing (it is out of
CONCURRENT_REQUESTS, as robots.txt waits are) and must end (REP_FETCH_TIMEOUT
after the file was asked for); and the file's answers, a probe scrapy-rep
sends on its own, do not pause the site's pages.

The known origin's gaps are taken when the crawler sent each page (the send
stamps of sent_stamp.py); the hostile files' REP_FETCH_TIMEOUT passes when the
test moves scrapy-rep's clock (``rep_clock``), not after real seconds that a
loaded machine stretches; other times are taken in the crawler
(``response_received``), not at the server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import pytest_twisted
from clock_steps import PauseSteps, until
from crawls import CrawlResult, loopback_names, run_crawl
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from servers import PAGE, Gate, Reply, ScriptedServer, gaps
from twisted.internet.defer import ensureDeferred

TDMREP = "/.well-known/tdmrep.json"
RULES = b"User-agent: *\nDisallow: /private\n"
TRAIN = {"REP_PURPOSES": ["train-ai"]}
RESERVED = json.dumps([{"location": "/*", "tdm-reservation": 1}]).encode()
KNOWN_PAGES = 300
HOSTILE_ORIGINS = 40
FETCH_TIMEOUT = 120.0
"""REP_FETCH_TIMEOUT of the hostile-origin tests: the test moves scrapy-rep's
clock past it (``rep_clock``) once the known origin's pages are all asked for
(17-30 s of real time with two suites at once on two cores), so that no wait
ends on its own before. A page holding a place while it waits would stop the
known origin for about this long in real time."""
WATCH_LIMIT = 300.0
"""Seconds ``TimeUp`` waits for the known pages at most (the suite's time
limit per test): its thread ends with the test's crawl."""
KNOWN_GAP = FETCH_TIMEOUT / 4
"""Seconds the known origin's pages may pause (as sent) beside the hostile
ones: far from a held place's stop, and from a loaded machine's stall (5.8 s
seen between two pages' arrivals)."""
RETRY_MIN = 60.0
"""REP_RETRY_MIN of the tests of a 503 on tdmrep.json: the test moves the clock past it."""
PAUSE_NEVER_ENDS = {"REP_SLOWDOWN_MAX_DELAY": 600, "CLOSESPIDER_TIMEOUT": 60}
"""A pause the file's Retry-After: 99999 would set (capped) outlasts the crawl,
which then fails for the pages it lost."""


def json_reply(body: bytes, **kwargs: Any) -> Reply:
    return Reply(body=body, headers={"Content-Type": "application/json"}, **kwargs)


class Arrivals:
    """When each response reached the crawler (``response_received``,
    ``time.time()``: the servers' clock), by host."""

    def __init__(self, when_hostile_in: Callable[[], None] | None = None) -> None:
        self.times: dict[str, list[float]] = {}
        self._when_hostile_in = when_hostile_in
        self._hostile = 0

    def connect(self, crawler: Crawler) -> None:
        crawler.signals.connect(self._received, signal=signals.response_received)

    def _received(self, response: Response, request: Request, spider: Any = None) -> None:
        path = request.url.split("/", 3)[-1]
        if path in ("robots.txt", TDMREP[1:]) or path.startswith("hop/"):
            return  # scrapy-rep's own downloads
        host = request.url.split("/")[2].split(":")[0]
        self.times.setdefault(host, []).append(time.time())
        if host != "known.test":
            self._hostile += 1
            if self._hostile == HOSTILE_ORIGINS and self._when_hostile_in is not None:
                self._when_hostile_in()

    def hostile(self) -> list[float]:
        return [t for host, times in self.times.items() if host != "known.test" for t in times]


class TimeUp:
    """Moves scrapy-rep's clock past REP_FETCH_TIMEOUT (on the reactor's thread)
    once the known origin's last page is asked for, then calls ``then``: the
    hostile files' time is up at a moment the test chooses, not after a wall
    of real seconds that a loaded machine stretches."""

    def __init__(self, clock: ModuleType, then: Callable[[], None] = lambda: None) -> None:
        self._clock = clock
        self._then = then
        self.asked = Gate(after=KNOWN_PAGES)  # opened by the known pages' requests
        self.known_page = Reply(body=PAGE, opens=self.asked)
        """The script of each known page (played in the test servers' process)."""
        self.at: float | None = None  # when the clock moved (time.time())

    def watch(self) -> None:
        """Move the clock once the known pages are all asked for (a thread waits)."""

        def advance_when_asked() -> None:
            if self.asked.wait(WATCH_LIMIT):
                from twisted.internet import reactor

                reactor.callFromThread(self._advance)  # type: ignore[attr-defined]

        threading.Thread(target=advance_when_asked, daemon=True).start()

    def _advance(self) -> None:
        self.at = time.time()
        self._clock.advance(FETCH_TIMEOUT)
        self._then()


def nothing_lost(result: CrawlResult, urls: list[str]) -> None:
    """Every request reached its callback or its errback."""
    reached = set(result.responses) | set(result.failures)
    assert reached == set(urls), set(urls) - reached


def connect_all(crawler: Crawler, *hooks: Callable[[Crawler], None] | None) -> None:
    for hook in hooks:
        if hook is not None:
            hook(crawler)


async def known_origin_beside_hostile_ones(
    known: ScriptedServer,
    hostile: ScriptedServer,
    time_up: TimeUp | None,
    arrivals: Arrivals,
    settings: dict[str, Any] | None = None,
    before: Callable[[Crawler], None] | None = None,
) -> tuple[CrawlResult, list[str]]:
    """300 pages of an origin whose robots.txt and tdmrep.json answer at once,
    interleaved with one page each of 40 origins (``h<n>.test``, on ``hostile``:
    each its own download slot, as on the web) whose tdmrep.json the test
    scripts; ``time_up`` moves the clock once the known pages are all asked for."""
    known.robots(RULES)
    known.script(TDMREP, Reply(status=404))
    if time_up is not None:
        for i in range(KNOWN_PAGES):
            known.script(f"/p/{i}", time_up.known_page)
        time_up.watch()
    hostile.robots(RULES)
    urls: list[str] = []
    left = HOSTILE_ORIGINS
    for i in range(KNOWN_PAGES):
        urls.append(f"http://known.test:{known.port}/p/{i}")
        if i % 7 == 3 and left:
            left -= 1
            urls.append(f"http://h{left}.test:{hostile.port}/page")
    assert not left
    with loopback_names():
        result = await run_crawl(
            list(urls),
            {**TRAIN, "REP_FETCH_TIMEOUT": FETCH_TIMEOUT, **(settings or {})},
            before=lambda crawler: connect_all(crawler, arrivals.connect, before),
        )
    nothing_lost(result, urls)
    assert len(known.page_hits("/p/")) == KNOWN_PAGES
    assert len(arrivals.times["known.test"]) == KNOWN_PAGES
    return result, urls


# -- waiting for tdmrep.json costs other origins nothing -----------------------------------------


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_hanging_tdmrep_json_files_do_not_stall_a_known_origin(
    site: ScriptedServer, site2: ScriptedServer, rep_clock: ModuleType
) -> None:
    """40 tdmrep.json that answer only after their pages reached the spider:
    those pages wait for them out of CONCURRENT_REQUESTS, so the known origin's
    pages keep flowing (before: each of 16 places held by such a page for
    REP_FETCH_TIMEOUT); the pages waiting go on once the file's time is up
    (the clock moved past REP_FETCH_TIMEOUT), annotated without it."""
    never = Gate()
    site2.script(TDMREP, json_reply(RESERVED, wait_for=never, wait_timeout=2 * FETCH_TIMEOUT))
    time_up = TimeUp(rep_clock)
    arrivals = Arrivals(when_hostile_in=never.set)
    try:
        result, _ = await known_origin_beside_hostile_ones(site, site2, time_up, arrivals)
    finally:
        never.set()
    gap = max(gaps(site.page_hits("/p/")))
    assert gap < KNOWN_GAP, gap
    hostile = arrivals.hostile()
    assert len(hostile) == HOSTILE_ORIGINS
    # each went on when its file's time was up on the clock, not before, and
    # not for the file (answered only after they were all in)
    assert time_up.at is not None
    assert min(hostile) >= time_up.at
    assert site2.hits(TDMREP) == HOSTILE_ORIGINS
    stats = result.stats
    assert stats["rep/usage/tdmrep/waited"] >= HOSTILE_ORIGINS
    assert stats["rep/usage/tdmrep/wait_expired"] == HOSTILE_ORIGINS
    assert stats["rep/usage/train-ai/unknown"] == KNOWN_PAGES + HOSTILE_ORIGINS


def redirect_chain(hops: int, first: Gate) -> dict[str, Reply]:
    """tdmrep.json redirected ``hops`` times to a file reserving everything: the
    first answer once ``first`` is set, the others at once."""
    replies = {
        TDMREP: Reply(
            status=302,
            headers={"Location": "/hop/1"},
            wait_for=first,
            wait_timeout=2 * FETCH_TIMEOUT,
        )
    }
    for hop in range(1, hops):
        replies[f"/hop/{hop}"] = Reply(status=302, headers={"Location": f"/hop/{hop + 1}"})
    replies[f"/hop/{hops}"] = json_reply(RESERVED)
    return replies


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_slow_tdmrep_json_redirect_hops_do_not_stall_a_known_origin(
    site: ScriptedServer, site2: ScriptedServer, rep_clock: ModuleType
) -> None:
    """Each of 40 tdmrep.json goes through 5 redirects, the first answered once
    the known origin's last page is asked for and the clock has moved past
    REP_FETCH_TIMEOUT: every hop itself is quick, but the chain is out of
    time (a fetch's budget is the whole chain's, not a hop's), so it ends as
    an error without the file; the known origin is not held meanwhile; the
    pages wait until REP_FETCH_TIMEOUT at most and are annotated without the
    file, counted. (A page's wait and its file's whole-chain budget end at
    the same moment: which the event loop sees first decides whether the
    page counts as ``wait_expired``, or the file's error reaches it.)"""
    first = Gate()
    for path, reply in redirect_chain(5, first).items():
        site2.script(path, reply)
    time_up = TimeUp(rep_clock, then=first.set)
    arrivals = Arrivals()
    try:
        result, _ = await known_origin_beside_hostile_ones(site, site2, time_up, arrivals)
    finally:
        first.set()
    gap = max(gaps(site.page_hits("/p/")))
    assert gap < KNOWN_GAP, gap
    assert time_up.at is not None
    assert min(arrivals.hostile()) >= time_up.at  # they waited for the clock
    assert site2.hits("/hop/1") == 0  # the redirect came after the time was up: not followed
    stats = result.stats
    assert stats["rep/usage/tdmrep/waited"] >= HOSTILE_ORIGINS
    assert stats["rep/usage/tdmrep/outcome/error"] == HOSTILE_ORIGINS  # out of time
    assert stats.get("rep/usage/tdmrep/wait_expired", 0) >= 1
    # annotated without the file (which reserves everything once it comes)
    assert stats["rep/usage/train-ai/unknown"] == KNOWN_PAGES + HOSTILE_ORIGINS


class TimeUpWhenStuck:
    """Moves scrapy-rep's clock past REP_FETCH_TIMEOUT whenever only that can
    move the crawl: every place of CONCURRENT_REQUESTS (the downloader's active
    set) held by a page waiting for its tdmrep.json, or those pages all that
    is left. Notes, each time, how many known pages had been sent and how many
    pages waited."""

    def __init__(self, clock: ModuleType, known: ScriptedServer) -> None:
        self._clock = clock
        self._known = known
        self._crawler: Crawler | None = None
        self._waiting: set[Request] = set()  # hostile pages downloaded, not yet in
        self._downloaded = 0
        self._moved_for: set[Request] = set()  # waiting at the last move
        self.holds: list[tuple[int, int]] = []  # (known pages sent, pages waiting)
        self._places = 0

    def connect(self, crawler: Crawler) -> None:
        from twisted.internet import task

        self._crawler = crawler
        self._places = crawler.settings.getint("CONCURRENT_REQUESTS")
        crawler.signals.connect(self._downloaded_page, signal=signals.response_downloaded)
        crawler.signals.connect(self._page_in, signal=signals.response_received)
        loop = task.LoopingCall(self._look)
        loop.start(0.05, now=False)
        crawler.signals.connect(loop.stop, signal=signals.engine_stopped)

    def _downloaded_page(self, response: Response, request: Request, spider: Any = None) -> None:
        if request.url.endswith("/page"):  # a hostile origin's page
            self._downloaded += 1
            self._waiting.add(request)

    def _page_in(self, response: Response, request: Request, spider: Any = None) -> None:
        self._waiting.discard(request)

    def _look(self) -> None:
        if self._moved_for & self._waiting:
            return  # those waiting at the last move are still on their way
        active = self._active()
        held = len(self._waiting & active)
        known_sent = len(self._known.page_hits("/p/"))
        rest_done = (
            self._downloaded == HOSTILE_ORIGINS
            and known_sent == KNOWN_PAGES
            and not any("/p/" in request.url for request in active)
        )
        if held >= self._places or (self._waiting and rest_done):
            self.holds.append((known_sent, len(self._waiting)))
            self._moved_for = set(self._waiting)
            self._clock.advance(FETCH_TIMEOUT)

    def _active(self) -> set[Request]:
        """The downloader's active set: the places of CONCURRENT_REQUESTS."""
        engine = self._crawler.engine if self._crawler is not None else None
        assert engine is not None
        return set(engine.downloader.active)


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_without_rep_max_waiting_tdmrep_waiters_hold_places_for_the_fetch_timeout(
    site: ScriptedServer, site2: ScriptedServer, rep_clock: ModuleType
) -> None:
    """REP_MAX_WAITING = 0 asks for Scrapy's way of waiting, inside
    CONCURRENT_REQUESTS: the hanging files' pages then hold the known origin
    back (all 16 places theirs while it had pages left), but for
    REP_FETCH_TIMEOUT at most each time (the clock moved past it once per
    place-full of them: 40 pages on 16 places, 3 times at most), and nothing
    is lost."""
    never = Gate()
    site2.script(TDMREP, json_reply(RESERVED, wait_for=never, wait_timeout=2 * FETCH_TIMEOUT))
    arrivals = Arrivals(when_hostile_in=never.set)
    stuck = TimeUpWhenStuck(rep_clock, site)
    try:
        result, _ = await known_origin_beside_hostile_ones(
            site, site2, None, arrivals, {"REP_MAX_WAITING": 0}, before=stuck.connect
        )
    finally:
        never.set()
    held_back = [(sent, waiting) for sent, waiting in stuck.holds if sent < KNOWN_PAGES]
    assert held_back, stuck.holds
    places = 16  # CONCURRENT_REQUESTS
    assert all(waiting == places for _, waiting in held_back), stuck.holds
    assert len(stuck.holds) <= -(-HOSTILE_ORIGINS // places), stuck.holds
    stats = result.stats
    # Each hostile page waited for its file until the time was up, or came once
    # its file had run out of time already (the clock moved past
    # REP_FETCH_TIMEOUT while a loaded machine still set that fetch up: 8 of 40
    # once); the known origin's pages may wait for its 404 too.
    expired = stats["rep/usage/tdmrep/wait_expired"]
    assert expired >= 1
    assert expired + stats.get("rep/usage/tdmrep/outcome/error", 0) >= HOSTILE_ORIGINS


# -- tdmrep.json answers do not pause the site ----------------------------------------------------


def site_of_20_pages(site: ScriptedServer) -> tuple[list[str], Callable[[Response], list[Request]]]:
    """/p/0, whose response (after its tdmrep.json answered) leads to 19 more."""
    site.robots(RULES)
    more = [site.url(f"/p/{i}") for i in range(1, 20)]

    def follow(response: Response) -> list[Request]:
        if response.url.endswith("/p/0"):
            return [Request(url, dont_filter=True) for url in more]
        return []

    return [site.url("/p/0"), *more], follow


@pytest_twisted.ensureDeferred
async def test_a_503_with_retry_after_on_tdmrep_json_pauses_nothing(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """tdmrep.json answers 503 with Retry-After: 99999: the file counts as not
    there, asked again when the answer says (within REP_RETRY_MAX), not after
    REP_RETRY_MIN; the site's pages go on at their pace (before: the whole site
    paused for REP_SLOWDOWN_MAX_DELAY). (On scrapy-rep's clock: every page is
    asked for with the clock not moved, so a pause of REP_SLOWDOWN_MAX_DELAY
    would hold them; then the clock moves past REP_RETRY_MIN before the last
    page's answer comes.)"""
    site.script(TDMREP, Reply(status=503, headers={"Retry-After": "99999"}))
    urls, follow = site_of_20_pages(site)
    last = Gate()  # /p/10's answer: after the clock moved
    site.script("/p/10", Reply(body=PAGE, wait_for=last, wait_timeout=WATCH_LIMIT))
    crawl = ensureDeferred(
        run_crawl(
            [urls[0]],
            {**TRAIN, **PAUSE_NEVER_ENDS, "REP_RETRY_MIN": RETRY_MIN},
            follow=follow,
        )
    )
    await until(lambda: len(site.page_hits("/p/")) == 20)
    rep_clock.advance(RETRY_MIN + 1)
    last.set()
    result = await crawl
    nothing_lost(result, urls)
    stats = result.stats
    assert stats["rep/usage/tdmrep/outcome/error"] == 1
    assert stats["rep/slowdown/well_known_ignored"] == 1
    assert "rep/slowdown/pauses" not in stats
    assert site.hits(TDMREP) == 1


@pytest_twisted.ensureDeferred
async def test_a_503_on_a_page_pauses_the_site_for_what_the_page_asked(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """The decision is tdmrep.json's alone: a page's 503 (Retry-After: 2) pauses
    the site 2 s, and the file's Retry-After: 99999, answered meanwhile, does not
    lengthen that pause (before: to REP_SLOWDOWN_MAX_DELAY). (The test steps
    scrapy-rep's clock over the pause announced: clock_steps.PauseSteps; a
    pause of REP_SLOWDOWN_MAX_DELAY would outlast the crawl's time.)"""
    site.script(TDMREP, Reply(status=503, headers={"Retry-After": "99999"}))
    site.script("/p/0", [Reply(status=503, headers={"Retry-After": "2"}), Reply()])
    urls, follow = site_of_20_pages(site)
    with PauseSteps(rep_clock) as steps:
        result = await run_crawl(
            [urls[0]],
            {**TRAIN, **PAUSE_NEVER_ENDS, "RETRY_ENABLED": True, "RETRY_TIMES": 1},
            follow=follow,
        )
    nothing_lost(result, urls)
    assert steps.pauses == [2.0]
    pages = [(status, at) for url, status, at in result.downloaded if "/p/" in url]
    (answered,) = [at for status, at in pages if status == 503]
    first = min(at for status, at in pages if status == 200)  # /p/0 asked again
    assert first - answered > 1.9, first - answered
    stats = result.stats
    assert stats["rep/slowdown/pauses"] == 1
    assert stats["rep/slowdown/well_known_ignored"] == 1
    assert stats["rep/slowdown/retry_after/honoured"] == 1
