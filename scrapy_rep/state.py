"""robots.txt state that outlives the crawl: ``REP_STATE_DIR`` (docs/state.md).

One SQLite file (``robots-state.sqlite3``, WAL mode, shared by processes) keeps
each origin's latest entry (:mod:`scrapy_rep._entry_codec`) and the body its
rules were read from; an entry is read when its origin is first needed, and
written in batches off the request path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import sqlite3
import time
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlparse

from scrapy_rep import _clock
from scrapy_rep._entry_codec import Rules, decode, encode
from scrapy_rep.origin import origin_of
from scrapy_rep.policy import PARSED, REFUSED_LOCALLY, UNAVAILABLE, UNREACHABLE
from scrapy_rep.robotstxt._groups import parsed_bytes

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Entry

__all__ = ["FILE_NAME", "StateStore"]

logger = logging.getLogger(__name__)

FILE_NAME = "robots-state.sqlite3"
APPLICATION_ID = 0x52455053  # "REPS": SQLite's own mark of whose file it is
SCHEMA_VERSION = 1
BUSY_TIMEOUT = 5.0
"""Seconds a process waits for another's write before giving up on its own."""
FLUSH_EVERY = 64
FLUSH_INTERVAL = 5.0
CLOCK_SKEW = 300.0
"""Seconds a stored fetch time may lie in the future (clocks of machines
sharing a directory); beyond, the entry is not trusted."""
OPEN_RETRY = 0.05
"""Seconds between two tries to open a file another process holds."""

_Body = Literal["new", "keep", "none"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS robots (
    origin  TEXT PRIMARY KEY,
    outcome TEXT NOT NULL,
    meta    TEXT NOT NULL,
    body    BLOB,
    fetched REAL NOT NULL,
    expires REAL NOT NULL,
    written REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS pinned (
    sha256  TEXT PRIMARY KEY,
    body    BLOB NOT NULL,
    written REAL NOT NULL
)
"""
_WRITE = (
    "INSERT INTO robots (origin, outcome, meta, body, fetched, expires, written) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (origin) DO UPDATE SET "
    "outcome = excluded.outcome, meta = excluded.meta, {body}"
    "fetched = excluded.fetched, expires = excluded.expires, written = excluded.written"
)
_WRITE_NEW = _WRITE.format(body="body = excluded.body, ")
_WRITE_KEEP = _WRITE.format(body="")  # the body stays (a 304, stale rules), if one is stored


class StateUnreadable(Exception):
    """The state file is corrupt or not scrapy-rep's."""


class StateStore:
    """The state directory of one crawl (see the module docstring)."""

    def __init__(self, directory: str, config: Config, stats: StatsCollector | None) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self._config = config
        self._stats = stats
        self._pending: dict[str, tuple[Entry, _Body, bytes | None]] = {}
        self._db: sqlite3.Connection | None = None
        self._failed = False
        try:
            os.makedirs(directory, exist_ok=True)
            self._db = self._open_waiting()
        except OSError as exc:
            self._give_up("open", exc)
        except (sqlite3.Error, StateUnreadable) as exc:
            if not _unreadable(exc):  # held past BUSY_TIMEOUT, or I/O: not its content
                self._give_up("open", exc)
                return
            self._put_aside(exc)
            try:
                self._db = self._open()
            except (sqlite3.Error, StateUnreadable, OSError) as again:
                self._give_up("open", again)

    # -- the file ------------------------------------------------------------------

    def _open_waiting(self) -> sqlite3.Connection:
        """:meth:`_open`, again while another process holds the file, within
        BUSY_TIMEOUT in all: SQLite answers "busy" at once where waiting could
        deadlock (processes making a new file at the same moment), and "disk
        I/O error" while another sets up the WAL files (:func:`_passing`)."""
        deadline = _clock.monotonic() + BUSY_TIMEOUT
        while True:
            try:
                return self._open(max(deadline - _clock.monotonic(), 0.0))
            except sqlite3.Error as exc:
                if not _passing(exc) or _clock.monotonic() >= deadline:
                    raise
            time.sleep(OPEN_RETRY)

    def _open(self, timeout: float = BUSY_TIMEOUT) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            app, version = _marks(db)
            if (app, version) == (0, 0):
                # Marks and tables read in one transaction: read apart, another
                # process making the file between the two reads showed its
                # tables without marks, and the file was put aside as foreign.
                with _transaction(db):
                    tables = db.execute("SELECT 1 FROM sqlite_master").fetchone()
                    if _marks(db) == (0, 0) and tables is None:  # a new file
                        for statement in _SCHEMA.split(";"):
                            db.execute(statement)
                        db.execute(f"PRAGMA application_id={APPLICATION_ID}")
                        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                app, version = _marks(db)
            if app != APPLICATION_ID or version != SCHEMA_VERSION:
                raise StateUnreadable(
                    f"application id {app:#x}, schema {version}: not scrapy-rep's "
                    f"(schema {SCHEMA_VERSION})"
                )
            try:
                db.execute(
                    "SELECT origin, outcome, meta, body, fetched, expires FROM robots LIMIT 1"
                )
                db.execute("SELECT sha256, body, written FROM pinned LIMIT 1")
            except sqlite3.OperationalError as exc:
                if "no such" in str(exc):  # our marks, not our tables
                    raise StateUnreadable(str(exc)) from exc
                raise
            return db
        except BaseException:
            db.close()
            raise

    def _put_aside(self, problem: BaseException) -> None:
        """An unreadable file (corrupt, or another program's) is kept beside,
        never deleted, and replaced by an empty one."""
        aside = self.path + ".unreadable"
        for suffix in ("", "-wal", "-shm"):
            try:
                os.replace(self.path + suffix, aside + suffix)
            except FileNotFoundError:
                pass
            except OSError:
                break
        logger.warning(
            "The robots.txt state in %s is unreadable (%s): moved to %s; starting "
            "with no robots.txt state",
            self.path,
            problem,
            aside,
        )
        if self._stats is not None:
            self._stats.inc_value("rep/state/unreadable")

    def _give_up(self, doing: str, problem: BaseException) -> None:
        """One WARNING, then the crawl goes on without the state."""
        if not self._failed:
            self._failed = True
            logger.warning(
                "Could not %s the robots.txt state in %s (%s): going on without it",
                doing,
                self.path,
                problem,
            )
            if self._stats is not None:
                self._stats.inc_value("rep/state/errors")
        self._pending.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- reading -------------------------------------------------------------------

    def previous(self, origin: Origin, now: float | None = None) -> Entry | None:
        """``origin``'s stored entry (fetched within REP_STALE_MAX, not from
        the future), its expiry bounded by this crawl's REP_CACHE_TTL and
        REP_RETRY_MAX: fresh, or what a fetch starts from."""
        now = _clock.now() if now is None else now
        db = self._reader(origin)  # (fetched this crawl, then left its LRU)
        if db is None:
            return None
        try:
            row = db.execute(
                "SELECT origin, meta, body FROM robots WHERE origin = ? AND fetched <= ?",
                (origin.text, now + CLOCK_SKEW),
            ).fetchone()
        except sqlite3.Error as exc:
            self._give_up("read", exc)
            return None
        found = self._decode(row[0], row[1], row[2], now) if row is not None else None
        if found is None or now - found.fetched > self._config.stale_max:
            return None
        return found

    def body(self, origin: Origin, sha256: str) -> bytes | None:
        """The robots.txt body whose SHA-256 is ``sha256``, kept as a pinned
        one (:meth:`keep_pinned`) or as ``origin``'s latest: what a pin
        compares a new body with."""
        db = self._reader(origin)
        if db is None:
            return None
        try:
            rows = db.execute(
                "SELECT body FROM pinned WHERE sha256 = ? UNION ALL "
                "SELECT body FROM robots WHERE origin = ? AND body IS NOT NULL",
                (sha256, origin.text),
            ).fetchall()
        except sqlite3.Error:
            return None
        for (body,) in rows:
            if not isinstance(body, bytes):
                continue
            if hashlib.sha256(parsed_bytes(body, self._config.max_size)).hexdigest() == sha256:
                return body
        return None

    def keep_pinned(self, sha256: str, body: bytes) -> None:
        """Keep a pinned body after its origin's robots.txt changed, so later
        crawls can still say what changed (one row per pin, written at once)."""
        db = self._db
        if db is None:
            return
        try:
            with _transaction(db):
                db.execute(
                    "INSERT OR REPLACE INTO pinned (sha256, body, written) VALUES (?, ?, ?)",
                    (sha256, body, _clock.now()),
                )
        except sqlite3.Error as exc:
            self._give_up("write", exc)

    def _reader(self, origin: Origin) -> sqlite3.Connection | None:
        """The file to read ``origin``'s row from, its pending change written first."""
        if origin.text in self._pending:
            self.flush()
        return self._db

    def _decode(self, text: str, meta: str, body: bytes | None, now: float) -> Entry | None:
        origin = origin_of(urlparse(text))
        if origin is None or origin.text != text:
            return None
        try:
            entry = decode(meta, body, None, self._config.max_size)
        except (ValueError, KeyError, TypeError) as exc:
            logger.debug("Unreadable robots.txt state of %s (%s): skipped", text, exc)
            return None
        if entry is None:
            return None
        # Nothing stored lasts longer than this crawl's settings allow; a fetch
        # time a little in the future (CLOCK_SKEW) reads as now.
        config = self._config
        fetched = min(entry.fetched, now)
        if entry.outcome == UNREACHABLE:
            expires = min(entry.expires, now + config.retry_max)
        else:
            expires = min(entry.expires, fetched + config.cache_ttl)
        return dataclasses.replace(entry, fetched=fetched, expires=expires)

    # -- writing -------------------------------------------------------------------

    def record(self, origin: Origin, entry: Entry, body: bytes | None) -> None:
        """Keep ``entry`` (``body``: the robots.txt body its rules were just read
        from, None when they were not read anew); written with the next batch."""
        if self._db is None or entry.outcome == REFUSED_LOCALLY:
            return  # (refused by this crawl's own middlewares: not the site's answer)
        mode: _Body
        if entry.outcome == PARSED and body is not None:
            mode = "new"
        elif entry.robots is not None and entry.sha256:
            mode = "keep"  # a 304, or stale rules: the stored body stays
        else:
            mode = "none"
        text = origin.text
        queued = self._pending.get(text)
        if queued is not None and queued[1] == "new" and mode == "keep":
            mode, body = "new", queued[2]  # its body is not written yet
        if body is not None:  # one byte more than read: the rules know they were cut
            body = body[: self._config.max_size + 1]
        self._pending[text] = (entry, mode, body if mode == "new" else None)
        if len(self._pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the changes kept since the last batch, in one transaction."""
        db = self._db
        pending = self._pending
        if db is None or not pending:
            return
        self._pending = {}
        now = _clock.now()
        rows: dict[_Body, list[tuple[object, ...]]] = {"new": [], "keep": [], "none": []}
        for text, (entry, mode, body) in pending.items():
            # no body: a robots.txt gone (4xx) allows all (refused locally is never kept)
            rules: Rules = "allow_all" if entry.outcome == UNAVAILABLE else "none"
            meta = encode(entry, "body" if mode != "none" else rules)
            row = (text, entry.outcome, meta, body, entry.fetched, entry.expires, now)
            rows[mode].append(row)
        try:
            with _transaction(db):
                db.executemany(_WRITE_NEW, rows["new"] + rows["none"])
                db.executemany(_WRITE_KEEP, rows["keep"])
        except sqlite3.Error as exc:
            self._give_up("write", exc)
            return
        if self._stats is not None:
            self._stats.inc_value("rep/state/written", len(pending))

    def close(self) -> None:
        """Write what is left, forget what is past REP_STALE_MAX, close the file."""
        self.flush()
        db = self._db
        if db is None:
            return
        self._db = None
        now = _clock.now()
        old = now - max(self._config.stale_max, self._config.cache_ttl)
        try:
            db.execute("DELETE FROM robots WHERE expires < ? AND fetched < ?", (now, old))
            db.execute("DELETE FROM pinned WHERE written < ?", (old,))
        except sqlite3.Error:
            pass  # kept for the next crawl to forget
        finally:
            db.close()


def _unreadable(problem: BaseException) -> bool:
    """Whether ``problem`` is the file's content (corrupt, not a database, not
    ours): the only reason to put a file aside. Anything else (another
    process's lock, an I/O error while another sets the file up) may pass, and
    a file put aside then takes with it what the other processes write."""
    if isinstance(problem, StateUnreadable):
        return True
    name = getattr(problem, "sqlite_errorname", None)  # Python 3.11+
    if isinstance(name, str):
        return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
    return isinstance(problem, sqlite3.DatabaseError) and any(
        words in str(problem) for words in ("malformed", "not a database")
    )


def _passing(problem: BaseException) -> bool:
    """Whether ``problem`` may pass if the file is opened again: another
    connection's lock, or an I/O error while another process sets it up."""
    name = getattr(problem, "sqlite_errorname", None)  # Python 3.11+
    if isinstance(name, str):
        return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_PROTOCOL"))
    return isinstance(problem, sqlite3.OperationalError) and any(
        words in str(problem) for words in ("locked", "disk I/O", "locking protocol")
    )


def _marks(db: sqlite3.Connection) -> tuple[int, int]:
    """The file's application id and schema version, read in one statement:
    read in two, another process making the file between them showed an id of
    0 with our schema version, and the file was put aside as foreign."""
    app, version = db.execute(
        "SELECT a.application_id, v.user_version "
        "FROM pragma_application_id() AS a, pragma_user_version() AS v"
    ).fetchone()
    return int(app), int(version)


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): one writer at a time,
    waiting BUSY_TIMEOUT for the others."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def open_state(crawler: Crawler, config: Config) -> StateStore | None:
    """The crawl's state directory (REP_STATE_DIR), written every
    FLUSH_INTERVAL seconds and closed when the engine stops; None when unset."""
    if config.state_dir is None:
        return None
    from scrapy import signals
    from twisted.internet.task import LoopingCall

    store = StateStore(config.state_dir, config, crawler.stats)
    timer = LoopingCall(store.flush)

    def started() -> None:
        timer.start(FLUSH_INTERVAL, now=False)

    def stopped() -> None:
        if timer.running:
            timer.stop()
        store.close()

    crawler.signals.connect(started, signal=signals.engine_started, weak=False)
    crawler.signals.connect(stopped, signal=signals.engine_stopped, weak=False)
    return store
