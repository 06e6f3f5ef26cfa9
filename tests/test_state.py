"""robots.txt state across crawls (REP_STATE_DIR), conditional GET, pins.

Each ``run_crawl`` is a new crawler with an empty in-memory cache, as a new
process would have: what it knows of an earlier crawl comes from the state
directory only. The server (:class:`RevalidatingRobots`) counts robots.txt
requests and answers 304 to an ``If-None-Match`` that names its body's ETag.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlparse, urlsplit

import pytest
import pytest_twisted
from crawls import BASE_SETTINGS, run_crawl
from scrapy import Request
from scrapy_forks import ScrapyForks, scrapy_forks
from servers import Reply, ScriptedServer

from scrapy_rep.config import Config
from scrapy_rep.exceptions import (
    ForbiddenByRobots,
    InvalidSetting,
    RobotsTxtChanged,
    RobotsTxtUnavailable,
)
from scrapy_rep.origin import origin_of
from scrapy_rep.policy import PARSED, Entry
from scrapy_rep.robotstxt import RobotsTxt
from scrapy_rep.state import FILE_NAME, StateStore

MAX_AGE = 2  # seconds robots.txt stays fresh (Cache-Control: max-age)
FIRST = b"User-agent: *\nDisallow: /private\n"
SECOND = b"User-agent: *\nDisallow: /private\nDisallow: /new\nDisallow: /more\n"


class RevalidatingRobots:
    """/robots.txt of ``site``: ``body`` with a strong ETag (its sha256) and
    ``max-age``, or a 304 when the request names that ETag."""

    def __init__(
        self, site: ScriptedServer, body: bytes, path: str = "/robots.txt", max_age: int = MAX_AGE
    ) -> None:
        self.site = site
        self.path = path
        self.max_age = max_age
        self.body = body

    @property
    def body(self) -> bytes:
        return self._body

    @body.setter
    def body(self, body: bytes) -> None:
        self._body = body
        headers = {"ETag": self.etag, "Cache-Control": f"max-age={self.max_age}"}
        not_modified = Reply(status=304, headers=headers)
        self.site.script(
            self.path,
            Reply(
                body=body,
                headers={**headers, "Content-Type": "text/plain"},
                if_none_match=(self.etag, not_modified),
            ),
        )

    @property
    def etag(self) -> str:
        return f'"{hashlib.sha256(self.body).hexdigest()[:16]}"'

    def last_request(self) -> dict[str, str]:
        return [hit for hit in self.site.log() if hit.path == self.path][-1].headers


def state_settings(tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {"REP_STATE_DIR": str(tmp_path / "state"), "REP_CACHE_MIN_TTL": 0, **more}


def pin_file(tmp_path: Path, site: ScriptedServer, body: bytes) -> str:
    path = tmp_path / "pins.json"
    path.write_text(json.dumps({site.origin: hashlib.sha256(body).hexdigest()}))
    return str(path)


def robots_hits(site: ScriptedServer) -> int:
    return site.hits("/robots.txt")


@pytest_twisted.ensureDeferred
async def test_crawls_in_a_row_fetch_while_fresh_then_revalidate_then_see_a_change(
    site: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, rep_clock: ModuleType
) -> None:
    """1: fetched. 2: fresh in the state, not asked. 3: past max-age, asked
    with If-None-Match; the 304 keeps its rules. 4: the body changed: seen at
    the next expiry, and reported against the pin of the first body. (The
    test moves scrapy-rep's clock past max-age instead of waiting for it.)"""
    robots = RevalidatingRobots(site, FIRST)
    settings = state_settings(tmp_path)

    first = await run_crawl([site.url("/a"), site.url("/private/1")], settings)
    assert robots_hits(site) == 1
    assert first.failed_with(site.url("/private/1")) is ForbiddenByRobots
    fetched_at = rep_clock.monotonic()

    second = await run_crawl([site.url("/b"), site.url("/private/2")], settings)
    assert robots_hits(site) == 1  # fresh in the state: not asked again
    assert second.failed_with(site.url("/private/2")) is ForbiddenByRobots
    assert second.stats["rep/state/used"] == 1
    assert site.pages() == ["/a", "/b"]

    rep_clock.advance(MAX_AGE + 0.3 - (rep_clock.monotonic() - fetched_at))
    third = await run_crawl([site.url("/c"), site.url("/private/3")], settings)
    assert robots_hits(site) == 2
    assert robots.last_request().get("If-None-Match") == robots.etag
    assert third.stats["rep/robotstxt/response_status_count/304"] == 1
    assert third.stats["rep/robotstxt/not_modified"] == 1
    assert third.failed_with(site.url("/private/3")) is ForbiddenByRobots  # rules kept
    revalidated_at = rep_clock.monotonic()

    pinned = robots.etag
    robots.body = SECOND
    settings["REP_PIN_FILE"] = pin_file(tmp_path, site, FIRST)
    fourth = await run_crawl([site.url("/d"), site.url("/new/1"), site.url("/new/2")], settings)
    assert robots_hits(site) == 2  # still fresh from the 304: the change is not seen yet
    assert fourth.responses.keys() == {site.url("/d"), site.url("/new/1"), site.url("/new/2")}
    assert "rep/pin/changed" not in fourth.stats

    rep_clock.advance(MAX_AGE + 0.3 - (rep_clock.monotonic() - revalidated_at))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="scrapy_rep"):
        fifth = await run_crawl([site.url("/e"), site.url("/new/3"), site.url("/more/1")], settings)
    assert robots_hits(site) == 3
    assert robots.last_request().get("If-None-Match") == pinned  # the old ETag, answered 200
    assert fifth.failed_with(site.url("/new/3")) is ForbiddenByRobots
    assert fifth.failed_with(site.url("/more/1")) is ForbiddenByRobots
    assert fifth.stats["rep/pin/changed"] == 1
    assert fifth.stats["rep/pin/newly_forbidden"] == 2
    changed = [r.getMessage() for r in caplog.records if "changed since pinned" in r.getMessage()]
    assert len(changed) == 2  # when seen, and the summary at close
    assert "+2 Disallow lines" in changed[0]
    assert "2 requests forbidden since, 2 of them allowed by the pinned rules" in changed[1]


@pytest_twisted.ensureDeferred
async def test_stop_origin_drops_a_changed_origins_requests(
    site: ScriptedServer, site2: ScriptedServer, tmp_path: Path
) -> None:
    """REP_PIN_ACTION = "stop_origin": every request of the origin whose
    robots.txt is not the pinned one ends with RobotsTxtChanged, counted; the
    other origin (its pin holds) is crawled."""
    RevalidatingRobots(site, SECOND)
    RevalidatingRobots(site2, FIRST)
    pins = tmp_path / "pins.tsv"
    pins.write_text(
        f"# origin\tsha256\n{site.origin}\t{hashlib.sha256(FIRST).hexdigest()}\n"
        f"{site2.origin}\t{hashlib.sha256(FIRST).hexdigest()}\n"
    )
    urls = [site.url(f"/page/{n}") for n in range(5)] + [site2.url("/ok")]
    settings = {"REP_PIN_FILE": str(pins), "REP_PIN_ACTION": "stop_origin"}
    result = await run_crawl(list(urls), settings)
    assert {url: result.failed_with(url) for url in urls[:5]} == dict.fromkeys(
        urls[:5], RobotsTxtChanged
    )
    assert site.pages() == []
    assert result.responses.keys() == {site2.url("/ok")}
    assert result.stats["rep/pin/dropped"] == 5
    assert result.stats["rep/pin/changed"] == 1
    assert result.stats["rep/pin/matched"] == 1
    error = result.failures[urls[0]].value
    assert isinstance(error, RobotsTxtChanged)
    assert error.origin == site.origin
    assert error.current == hashlib.sha256(SECOND).hexdigest()


@pytest.mark.parametrize("content", ["garbage", "foreign"])
@pytest_twisted.ensureDeferred
async def test_an_unreadable_state_file_gives_one_warning_and_a_normal_crawl(
    site: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str
) -> None:
    """A corrupt file, or another program's SQLite database where ours should
    be: one WARNING, put aside (not deleted), an empty cache, a normal crawl;
    the next crawl uses the new state."""
    # Fresh for an hour: what is checked is the state file, not expiry (with
    # max-age 2, a loaded machine's second crawl began past it and asked again).
    RevalidatingRobots(site, FIRST, max_age=3600)
    state = tmp_path / "state"
    state.mkdir()
    path = state / FILE_NAME
    if content == "garbage":
        path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    else:
        with sqlite3.connect(path) as other:
            other.execute("CREATE TABLE notes (text TEXT)")
            other.execute("INSERT INTO notes VALUES ('mine')")
        other.close()
    settings = state_settings(tmp_path)
    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        result = await run_crawl([site.url("/a"), site.url("/private/1")], settings)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "unreadable" in warnings[0].getMessage()
    assert result.stats["rep/state/unreadable"] == 1
    assert site.url("/a") in result.responses
    assert result.failed_with(site.url("/private/1")) is ForbiddenByRobots
    assert (state / (FILE_NAME + ".unreadable")).exists()

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        again = await run_crawl([site.url("/b")], settings)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert again.stats["rep/state/used"] == 1
    assert robots_hits(site) == 1


@pytest_twisted.ensureDeferred
async def test_a_304_to_a_request_without_validators_is_unreachable(site: ScriptedServer) -> None:
    """A 304 answers a question the crawler did not ask: no rules to keep, so
    the origin is unreachable (its requests dropped), not an unfollowable 3xx
    (which would allow everything)."""
    site.script("/robots.txt", Reply(status=304))
    result = await run_crawl([site.url("/a")])
    assert result.failed_with(site.url("/a")) is RobotsTxtUnavailable
    assert site.pages() == []
    assert result.stats["rep/robotstxt/outcome/unreachable"] == 1
    assert "rep/robotstxt/not_modified" not in result.stats


@pytest_twisted.ensureDeferred
async def test_a_refresh_within_a_crawl_is_conditional(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """The rules expire mid-crawl: the refresh sends If-None-Match and the 304
    keeps the rules (no state directory needed). (The test moves scrapy-rep's
    clock past max-age once /a is in instead of waiting for it.)"""
    robots = RevalidatingRobots(site, FIRST)
    after = {"/a": ["/private/x", "/b"]}

    def follow(response: Any) -> list[Request]:
        paths = after.get(urlsplit(response.url).path, [])
        if paths:
            rep_clock.advance(MAX_AGE + 0.3)
        return [Request(site.url(path), dont_filter=True) for path in paths]

    result = await run_crawl([site.url("/a")], {"REP_CACHE_MIN_TTL": 0}, follow=follow)
    assert robots_hits(site) == 2
    assert robots.last_request().get("If-None-Match") == robots.etag
    assert result.stats["rep/robotstxt/not_modified"] == 1
    assert result.failed_with(site.url("/private/x")) is ForbiddenByRobots


@pytest_twisted.ensureDeferred
async def test_validators_go_to_the_url_after_redirects(
    site: ScriptedServer, tmp_path: Path, rep_clock: ModuleType
) -> None:
    """robots.txt redirects to another path: its validators belong to that
    URL, so the first hop goes without them and the last carries them."""
    site.script("/robots.txt", Reply(status=301, headers={"Location": "/rules.txt"}))
    robots = RevalidatingRobots(site, FIRST, "/rules.txt")
    settings = state_settings(tmp_path)
    await run_crawl([site.url("/a")], settings)
    rep_clock.advance(MAX_AGE + 0.3)  # past max-age, without waiting for it
    result = await run_crawl([site.url("/b"), site.url("/private/1")], settings)
    hops = [hit for hit in site.log() if hit.path in ("/robots.txt", "/rules.txt")]
    assert [hit.path for hit in hops] == ["/robots.txt", "/rules.txt"] * 2
    assert "If-None-Match" not in hops[2].headers
    assert hops[3].headers.get("If-None-Match") == robots.etag
    assert result.stats["rep/robotstxt/not_modified"] == 1
    assert result.failed_with(site.url("/private/1")) is ForbiddenByRobots


@pytest.mark.parametrize("through_cache", [True, False])
@pytest_twisted.ensureDeferred
async def test_rep_httpcache_robotstxt_keeps_robots_txt_out_of_scrapys_cache(
    site: ScriptedServer, tmp_path: Path, through_cache: bool
) -> None:
    """With HttpCacheMiddleware's default policy, a cached robots.txt is served
    again (its age unchecked); REP_HTTPCACHE_ROBOTSTXT = False has it asked
    for each time its rules expire, while pages still come from the cache."""
    RevalidatingRobots(site, FIRST)
    settings = {
        "HTTPCACHE_ENABLED": True,
        "HTTPCACHE_DIR": str(tmp_path / "httpcache"),
        "REP_HTTPCACHE_ROBOTSTXT": through_cache,
    }
    for _ in range(2):
        result = await run_crawl([site.url("/a")], settings)
        assert site.url("/a") in result.responses
    assert site.pages() == ["/a"]  # the second crawl's page came from the cache
    assert robots_hits(site) == (1 if through_cache else 2)


WRITERS = """
import os, sys, time, traceback
from scrapy_rep.config import Config
from scrapy_rep.origin import origin_of
from scrapy_rep.policy import Entry, PARSED
from scrapy_rep.robotstxt import RobotsTxt
from scrapy_rep.state import StateStore
from urllib.parse import urlparse


def write(directory, worker):
    store = StateStore(directory, Config(), None)
    now = time.time()
    for n in range(300):
        origin = origin_of(urlparse(f"https://w{worker}-{n}.example"))
        body = f"User-agent: *\\nDisallow: /{worker}/{n}\\n".encode()
        entry = Entry(RobotsTxt.parse(body), PARSED, now + 600, now, sha256="0" * 64)
        store.record(origin, entry, body)
    store.close()
    os.write(1, f"{worker} {store._failed}\\n".encode())  # one write: lines not mixed


# four writer processes, forked once the modules are imported (each would pay
# for importing them otherwise), started at once
writers = []
for worker in range(4):
    pid = os.fork()
    if pid == 0:
        try:
            write(sys.argv[1], worker)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    writers.append(pid)
print("exits", *[os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in writers])
"""


def test_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    """Four processes write 300 origins each into one state directory at once
    (64 to a transaction): every origin is there, no process failed."""
    directory = str(tmp_path / "state")
    run = subprocess.run(
        [sys.executable, "-c", WRITERS, directory],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    *written, exits = run.stdout.splitlines()
    assert exits == "exits 0 0 0 0", (run.stdout, run.stderr)
    assert sorted(written) == [f"{worker} False" for worker in range(4)], (run.stdout, run.stderr)
    with sqlite3.connect(Path(directory) / FILE_NAME) as db:
        assert db.execute("SELECT count(*) FROM robots").fetchone()[0] == 1200, run.stderr
    db.close()


def test_a_new_file_made_by_another_process_while_its_marks_are_read_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process makes the new state file (tables, then its marks, in one
    transaction) just as this one reads the marks: what the other wrote stays
    in the file this one uses, nothing is put aside. The interleaving is forced
    where the race put it (1 run in about 120 of the four writers above): the
    marks were read in two statements, an id of 0 before the other's commit
    and our schema version after it, and the file taken for a foreign one."""
    directory = str(tmp_path / "state")
    now = time.time()
    entry = Entry(RobotsTxt.parse(FIRST), PARSED, now + 600, now, sha256="0" * 64)
    theirs, mine = (origin_of(urlparse(f"https://{who}.example")) for who in ("theirs", "mine"))
    connect = sqlite3.connect
    made: list[bool] = []

    def other_process_makes_the_file(sql: str) -> None:
        # the marks read: user_version, not its write (user_version=1)
        if made or "user_version" not in sql or "user_version=" in sql:
            return
        made.append(True)
        other = StateStore(directory, Config(), None)
        other.record(theirs, entry, FIRST)
        other.close()

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db = connect(*args, **kwargs)
        db.set_trace_callback(other_process_makes_the_file)
        return db

    monkeypatch.setattr(sqlite3, "connect", traced)
    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        store = StateStore(directory, Config(), None)
        store.record(mine, entry, FIRST)
        store.close()
    monkeypatch.undo()
    assert made
    assert not [r.getMessage() for r in caplog.records]
    assert sorted(os.listdir(directory)) == [FILE_NAME]  # nothing put aside
    reader = StateStore(directory, Config(), None)
    assert reader.previous(theirs) is not None
    assert reader.previous(mine) is not None
    reader.close()


def test_a_state_file_sqlite_cannot_open_is_left_in_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a file's content puts it aside: one SQLite cannot open at all (here
    a directory by its name) stays where it is, and the crawl goes on without
    the state after one WARNING."""
    state = tmp_path / "state"
    (state / FILE_NAME / "kept").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
        store = StateStore(str(state), Config(), None)
        store.close()
    assert store._failed
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "going on without it" in warnings[0], warnings
    assert sorted(os.listdir(state)) == [FILE_NAME]
    assert os.listdir(state / FILE_NAME) == ["kept"]


def test_a_state_file_another_process_holds_is_not_moved_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A state file another process keeps locked past BUSY_TIMEOUT is busy,
    not unreadable: this crawl goes on without the state (one WARNING), and the
    file, with what the other crawls wrote, stays where it is."""
    origin = origin_of(urlparse("https://kept.example"))
    now = time.time()
    entry = Entry(RobotsTxt.parse(FIRST), PARSED, now + 600, now, sha256="0" * 64)
    writer = StateStore(str(tmp_path / "state"), Config(), None)
    writer.record(origin, entry, FIRST)
    writer.close()
    monkeypatch.setattr("scrapy_rep.state.BUSY_TIMEOUT", 0.2)
    other = sqlite3.connect(tmp_path / "state" / FILE_NAME, isolation_level=None)
    # another crawl, as the first to open a new file holds it: before it is in
    # WAL mode (a reader then waits for the writer)
    other.execute("PRAGMA journal_mode=DELETE")
    other.execute("BEGIN EXCLUSIVE")
    try:
        with caplog.at_level(logging.WARNING, logger="scrapy_rep"):
            blocked = StateStore(str(tmp_path / "state"), Config(), None)
            assert blocked.previous(origin) is None  # going on without the state
            blocked.close()
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert sorted(os.listdir(tmp_path / "state")) == [FILE_NAME]  # nothing moved aside
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "going on without it" in warnings[0], warnings
    reader = StateStore(str(tmp_path / "state"), Config(), None)
    assert reader.previous(origin) is not None
    reader.close()


@pytest.fixture(scope="module")
def forks() -> Iterator[ScrapyForks]:
    """``scrapy`` commands in fresh processes, forked from one that imported Scrapy."""
    yield from scrapy_forks()


@pytest.mark.slow
@pytest.mark.reactor_free  # scrapy robots subprocesses
def test_scrapy_robots_shows_the_pinned_verdicts_beside_the_current_ones(
    site: ScriptedServer, tmp_path: Path, forks: ScrapyForks
) -> None:
    """``--state`` keeps the body a first run read; once the site changed it,
    ``--pins`` says the robots.txt changed, how, and what the pinned rules
    said of each URL."""

    def scrapy_robots(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        command = ["robots", "--agent", "ExampleBot", "-s", "REP_CACHE_MIN_TTL=0", *args]
        return forks.run(*command, cwd=cwd, timeout=60)

    robots = RevalidatingRobots(site, FIRST)
    state = str(tmp_path / "state")
    first = scrapy_robots("--state", state, site.url("/new/1"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    robots.body = SECOND
    time.sleep(MAX_AGE + 0.3)
    pins = pin_file(tmp_path, site, FIRST)
    urls = [site.url("/new/1"), site.url("/private/x")]
    result = scrapy_robots("--state", state, "--pins", pins, *urls, cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 1, result.stderr
    assert robots_hits(site) == 2
    assert robots.last_request().get("If-None-Match") is not None
    assert f"  pinned    sha256 {hashlib.sha256(FIRST).hexdigest()}" in out
    assert f"  now       sha256 {hashlib.sha256(SECOND).hexdigest()}" in out
    assert "  pin       CHANGED: +2 Disallow lines" in out
    assert f"  pinned    ALLOWED    now FORBIDDEN  {site.url('/new/1')}" in out
    assert f"  pinned    FORBIDDEN  now FORBIDDEN  {site.url('/private/x')}" in out
    as_json = scrapy_robots("--state", state, "--pins", pins, "--json", *urls, cwd=tmp_path)
    pin = json.loads(as_json.stdout)["pins"][0]
    assert pin["state"] == "changed"
    assert [(v["url"], v["allowed"], v["now"]) for v in pin["pinned_verdicts"]] == [
        (urls[0], True, "forbidden"),
        (urls[1], False, "forbidden"),
    ]


def stored(tmp_path: Path, config: Config, **fields: Any) -> Entry | None:
    """Write one entry of https://x.example with ``fields``, then read it back
    as a new crawl would."""
    origin = origin_of(urlparse("https://x.example"))
    assert origin is not None
    now = time.time()
    entry = Entry(
        RobotsTxt.parse(FIRST),
        PARSED,
        fields.pop("expires", now + 600),
        fields.pop("fetched", now),
        sha256=hashlib.sha256(FIRST).hexdigest(),
        **fields,
    )
    writer = StateStore(str(tmp_path / "state"), config, None)
    writer.record(origin, entry, FIRST)
    writer.close()
    reader = StateStore(str(tmp_path / "state"), config, None)
    try:
        return reader.previous(origin)
    finally:
        reader.close()


def test_stored_rules_never_outlive_rep_cache_ttl(tmp_path: Path) -> None:
    """An expiry written by a crawl with a longer REP_CACHE_TTL (or a wrong
    one) is cut at this crawl's REP_CACHE_TTL after the fetch."""
    now = time.time()
    entry = stored(tmp_path, Config(cache_ttl=3600), fetched=now - 7200, expires=now + 86400)
    assert entry is not None
    assert entry.expires <= entry.fetched + 3600 < now  # expired: validators only


@pytest.mark.parametrize(("ahead", "trusted"), [(60, True), (3600, False)])
def test_a_fetch_time_in_the_future_is_trusted_only_within_the_skew(
    tmp_path: Path, ahead: float, trusted: bool
) -> None:
    now = time.time()
    entry = stored(tmp_path, Config(), fetched=now + ahead, expires=now + ahead + 600)
    if not trusted:
        assert entry is None
    else:
        assert entry is not None
        assert entry.fetched <= time.time()  # read as now
        assert entry.expires <= entry.fetched + Config().cache_ttl


@pytest_twisted.ensureDeferred
async def test_an_unreachable_origins_backoff_outlives_the_crawl(
    site: ScriptedServer, tmp_path: Path
) -> None:
    """robots.txt answered 503: the next crawl, before REP_RETRY_MIN has
    passed, does not ask again and drops the origin's requests, as the first
    crawl would have."""
    site.script("/robots.txt", Reply(status=503))
    settings = state_settings(tmp_path, REP_RETRY_MIN=60)
    first = await run_crawl([site.url("/a")], settings)
    assert first.failed_with(site.url("/a")) is RobotsTxtUnavailable
    second = await run_crawl([site.url("/b")], settings)
    assert second.failed_with(site.url("/b")) is RobotsTxtUnavailable
    assert robots_hits(site) == 1
    assert site.pages() == []
    assert second.stats["rep/state/used"] == 1


@pytest_twisted.ensureDeferred
async def test_stored_rules_serve_while_the_site_is_down_in_a_later_crawl(
    site: ScriptedServer, tmp_path: Path, rep_clock: ModuleType
) -> None:
    """Stale-if-error across crawls: the stored rules expired, the site now
    answers 503; the next crawl applies the stored rules (younger than
    REP_STALE_MAX) instead of dropping every request."""
    robots = RevalidatingRobots(site, FIRST)
    settings = state_settings(tmp_path)
    await run_crawl([site.url("/a")], settings)
    rep_clock.advance(MAX_AGE + 0.3)  # past max-age, without waiting for it
    site.script("/robots.txt", Reply(status=503))
    result = await run_crawl([site.url("/b"), site.url("/private/1")], settings)
    assert robots.last_request().get("If-None-Match") == robots.etag  # asked, conditionally
    assert site.url("/b") in result.responses
    assert result.failed_with(site.url("/private/1")) is ForbiddenByRobots
    assert result.stats["rep/robotstxt/stale_served"] == 1


@pytest_twisted.ensureDeferred
async def test_a_missing_pin_file_stops_the_crawl_at_start(
    site: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR), pytest.raises(InvalidSetting, match="REP_PIN_FILE"):
        await run_crawl([site.url("/a")], {"REP_PIN_FILE": str(tmp_path / "missing.json")})
    assert site.hits() == 0
    assert any(r.getMessage().startswith("Cannot start: REP_PIN_FILE") for r in caplog.records)


@pytest_twisted.ensureDeferred
async def test_a_dry_run_reports_a_changed_pin_but_stops_nothing(
    site: ScriptedServer, tmp_path: Path
) -> None:
    RevalidatingRobots(site, SECOND)
    settings = {
        "REP_PIN_FILE": pin_file(tmp_path, site, FIRST),
        "REP_PIN_ACTION": "stop_origin",
        "REP_DRY_RUN": True,
    }
    result = await run_crawl([site.url("/a"), site.url("/new/1")], settings)
    assert result.responses.keys() == {site.url("/a"), site.url("/new/1")}
    assert result.stats["rep/pin/changed"] == 1
    assert "rep/pin/dropped" not in result.stats
    assert result.stats["rep/pin/forbidden"] == 1  # /new/1: the current rules forbid it


SPIDER = """
import json, sys
import scrapy


class Pages(scrapy.Spider):
    name = "pages"
    custom_settings = {"ADDONS": {"scrapy_rep.Addon": 100}}

    def __init__(self, urls="", **kwargs):
        super().__init__(**kwargs)
        self.urls = urls.split(",")
        self.failed = {}

    async def start(self):
        for url in self.urls:
            yield scrapy.Request(url, errback=self.fail, dont_filter=True)

    def parse(self, response):
        pass

    def fail(self, failure):
        self.failed[failure.request.url] = type(failure.value).__name__

    def closed(self, reason):
        from twisted.internet import reactor

        report = {
            "stats": self.crawler.stats.get_stats(),
            "failed": self.failed,
            "reactor": f"{type(reactor).__module__}.{type(reactor).__name__}",
        }
        print(json.dumps(report, default=str))
"""


@pytest.mark.slow
@pytest.mark.reactor_free  # scrapy crawl subprocesses, each on the reactor named
@pytest.mark.parametrize(
    "reactor",
    [
        "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "twisted.internet.selectreactor.SelectReactor",
    ],
    ids=["asyncio", "twisted"],
)
def test_crawl_processes_in_a_row_share_the_state_directory(
    site: ScriptedServer, tmp_path: Path, reactor: str, forks: ScrapyForks
) -> None:
    """Four ``scrapy runspider`` processes (scrapy_forks.py), one after another,
    one REP_STATE_DIR.
    The server says max-age=3600; runs 3 and 4 say REP_CACHE_TTL = 1 s, so what
    run 1 (then run 3) stored has expired for them once a second has passed.
    1: fetched. 2: fresh in the state, not asked. 3: expired, asked with
    If-None-Match; the 304 keeps its rules. 4: the body changed, pinned to the
    first: the change reported, and with stop_origin none of its pages sent."""
    robots = RevalidatingRobots(site, FIRST, max_age=3600)
    spider = tmp_path / "pages.py"
    spider.write_text(SPIDER)
    settings = {
        **{k: v for k, v in BASE_SETTINGS.items() if isinstance(v, str | int | float)},
        "LOG_LEVEL": "INFO",
        "REP_STATE_DIR": str(tmp_path / "state"),
        "REP_CACHE_MIN_TTL": 0,
        "TWISTED_REACTOR": reactor,
    }

    def crawl(paths: list[str], **more: Any) -> tuple[dict[str, Any], str]:
        urls = ",".join(site.url(path) for path in paths)
        args = ["runspider", str(spider), "-a", f"urls={urls}"]
        for name, value in {**settings, **more}.items():
            args += ["-s", f"{name}={value}"]
        run = forks.run(*args, cwd=tmp_path, timeout=90)
        assert run.returncode == 0, run.stderr[-3000:]
        return json.loads(run.stdout.strip().splitlines()[-1]), run.stderr

    first, _ = crawl(["/a", "/private/1"])
    assert first["reactor"] == reactor
    run1_done = time.monotonic()
    assert robots_hits(site) == 1
    assert "If-None-Match" not in robots.last_request()
    assert first["failed"] == {site.url("/private/1"): "ForbiddenByRobots"}
    assert (tmp_path / "state" / FILE_NAME).is_file()

    second, _ = crawl(["/b", "/private/2"])
    assert robots_hits(site) == 1  # fresh in the state: not asked again
    assert second["stats"]["rep/state/used"] == 1
    assert second["failed"] == {site.url("/private/2"): "ForbiddenByRobots"}

    time.sleep(max(0.0, 1.2 - (time.monotonic() - run1_done)))
    third, _ = crawl(["/c", "/private/3"], REP_CACHE_TTL=1)
    assert robots_hits(site) == 2
    assert robots.last_request().get("If-None-Match") == robots.etag
    assert third["stats"]["rep/robotstxt/not_modified"] == 1
    assert third["failed"] == {site.url("/private/3"): "ForbiddenByRobots"}  # rules kept
    assert site.pages() == ["/a", "/b", "/c"]  # no /private page ever requested
    run3_done = time.monotonic()

    pinned = robots.etag
    robots.body = SECOND
    pins = pin_file(tmp_path, site, FIRST)
    time.sleep(max(0.0, 1.2 - (time.monotonic() - run3_done)))
    fourth, log = crawl(
        ["/d", "/new/1", "/private/4"],
        REP_CACHE_TTL=1,
        REP_PIN_FILE=pins,
        REP_PIN_ACTION="stop_origin",
    )
    assert robots_hits(site) == 3
    assert robots.last_request().get("If-None-Match") == pinned  # the old ETag, answered 200
    assert fourth["stats"]["rep/pin/changed"] == 1
    assert fourth["stats"]["rep/pin/dropped"] == 3
    assert set(fourth["failed"].values()) == {"RobotsTxtChanged"}
    assert site.pages() == ["/a", "/b", "/c"]  # none of run 4's pages sent
    changed = [line for line in log.splitlines() if "changed since pinned" in line]
    assert changed
    assert all("WARNING" in line for line in changed)
    assert "+2 Disallow lines" in changed[0]
