"""Politeness shared by many Scrapy processes through Redis (``REP_REDIS_URL``).

Two pieces, each on by its own setting, both keyed under ``REP_REDIS_PREFIX``
and every key with a TTL, so Redis holds a bounded amount per origin and slot.

robots.txt (``REP_REDIS_ROBOTS``): :class:`RedisRulesCache`
    Each worker keeps its in-process LRU of rules: requests to an origin it
    knows are checked without Redis. When its copy is missing or expired, one
    script call either returns the origin's state from Redis or takes the
    origin's fetch lock (``SET NX PX``: it expires, so a worker that dies
    while fetching blocks nobody for long). The lock holder downloads
    robots.txt the usual way and, in one more call, stores the result and
    releases the lock. The others poll with backoff (50 ms doubling to 1 s)
    until the result is there, or the lock is free (they take it), or twice the
    lock's lifetime has passed (they fetch themselves). Redis keeps the
    robots.txt body, at most ``REP_MAX_SIZE`` + 1 bytes (one byte more, so that
    a re-parse cuts an over-long file at the same line), and what the fetch
    found: outcome, expiry, consecutive failures, reason, status. Other workers
    re-parse the body (parsing is fast; parser objects are never pickled).
    Unreachable results travel with their retry time and failure count, so
    the whole cluster backs off together, and an expired state is kept
    ``REP_REDIS_KEEP`` seconds longer: the next fetch, by any worker, counts
    failures on from it and can serve its rules as stale-if-error.

Crawl-delay (``REP_REDIS_DELAY``): :class:`ClusterDelay`
    Each request to an origin with a Crawl-delay (or Request-rate) reserves the
    next free send time of its download slot in one script call, on Redis's
    clock (``TIME``): ``at = max(now, next_free)``, ``next_free = at +
    spacing``, and the call answers ``at - now``. The worker waits that long,
    out of the downloader's active set (like requests waiting for robots.txt),
    then lets the request go.

    The slot's *local* delay must then be zero (``SlotDelays.pace_elsewhere``),
    because lateness is what breaks the spacing: the next reservation, maybe
    another worker's, is ``spacing`` after this one's reserved time, not after
    its actual sending. A local delay (Crawl-delay, ``DOWNLOAD_DELAY``, jitter,
    AutoThrottle) would hold the released request back and send it late, so
    the slot's own delay is folded into the reserved spacing instead
    (``max(Crawl-delay, own delay)``) and AutoThrottle does not move it. For
    the same reason, a worker that wakes more than 20 ms after its reserved
    time (a busy event loop) reserves again instead of sending late (the third
    time, it goes). Each worker keeps at most one reservation per slot
    outstanding; its other requests for the slot wait in order behind it,
    in-process, so a worker that dies leaves at most one unused turn in
    Redis's schedule. The worker that downloads an origin's robots.txt
    reserves a turn for it too: it was a request to the origin.

Redis down or slow (:class:`RedisLink`)
    Calls time out after ``REP_REDIS_TIMEOUT`` seconds and are not retried. On
    a failure, one WARNING per outage, and for ``REP_REDIS_RETRY`` seconds the
    worker does not try Redis at all: robots.txt is fetched locally, and
    Crawl-delay becomes the slot's local minimum again. Then the next call
    tries Redis again; once it answers, an INFO line says so and shared state
    resumes.

This module needs the asyncio reactor (``redis.asyncio``); on another
reactor the middleware logs a WARNING at start and keeps all state local.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from scrapy_rep.cache import MemoryRulesCache
from scrapy_rep.origin import origin_text
from scrapy_rep.policy import ALLOW_ALL, DISALLOW_ALL, PARSED, Entry
from scrapy_rep.robotstxt import RobotsTxt

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy.statscollectors import StatsCollector

    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin

    Sleep = Callable[[float], Awaitable[bool]]
    """Sleep that many seconds; False when woken early because the spider closes."""

logger = logging.getLogger(__name__)

LOCK_MARGIN = 5.0
"""Seconds a robots.txt fetch lock outlives the longest fetch (timeout x attempts)."""
FIRST_POLL = 0.05
LAST_POLL = 1.0
LATE = 0.02
"""A paced request woken this much after its reserved time reserves again."""
RESERVE_ATTEMPTS = 3
MAX_CONNECTIONS = 32
"""Connections to Redis per worker; more calls at once queue for one."""

# KEYS: the origin's state (a hash), its fetch lock. ARGV: now (the caller's
# clock, like Entry.expires), lock token, lock lifetime (ms).
# -> {1, meta, body, base}: fresh state; {2, meta, body, base}: the lock is
# ours (meta may be nil, or an expired state); {3}: someone else fetches.
_CLAIM = """
local state = redis.call('HMGET', KEYS[1], 'meta', 'expires', 'body', 'base')
if state[1] and tonumber(state[2] or '0') > tonumber(ARGV[1]) then
  return {1, state[1], state[3], state[4]}
end
if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then
  return {2, state[1], state[3], state[4]}
end
return {3}
"""

# KEYS: the origin's state, its fetch lock. ARGV: meta, expires, TTL (ms),
# lock token, mode ("body": a new body; "keep": keep the stored body, the stale
# rules; "plain": no body), body, base URL of the body, meta to store instead
# when "keep" finds no body.
_PUBLISH = """
if ARGV[5] == 'keep' and redis.call('HEXISTS', KEYS[1], 'body') == 1 then
  redis.call('HSET', KEYS[1], 'meta', ARGV[1], 'expires', ARGV[2])
else
  redis.call('DEL', KEYS[1])
  if ARGV[5] == 'body' then
    redis.call('HSET', KEYS[1], 'meta', ARGV[1], 'expires', ARGV[2], 'body', ARGV[6],
               'base', ARGV[7])
  elseif ARGV[5] == 'keep' then
    redis.call('HSET', KEYS[1], 'meta', ARGV[8], 'expires', ARGV[2])
  else
    redis.call('HSET', KEYS[1], 'meta', ARGV[1], 'expires', ARGV[2])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if redis.call('GET', KEYS[2]) == ARGV[4] then
  redis.call('DEL', KEYS[2])
end
return 1
"""

# KEYS: the slot's next free send time (microseconds, Redis's clock).
# ARGV: spacing (microseconds). -> microseconds to wait.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local at = math.max(now, tonumber(redis.call('GET', KEYS[1]) or '0'))
local after = at + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%.0f', after), 'PX',
           math.ceil((after - now) / 1000) + 1000)
return at - now
"""


class RedisUnavailable(Exception):
    """Redis did not answer (or is in its retry pause): use local state."""


def safe_url(url: str) -> str:
    """The URL without its password, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


class RedisLink:
    """The Redis client, and whether Redis is worth trying now."""

    def __init__(self, config: Config, stats: StatsCollector) -> None:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        assert config.redis_url is not None
        self.url = safe_url(config.redis_url)
        self.client: Any = Redis.from_url(
            config.redis_url,
            max_connections=MAX_CONNECTIONS,
            socket_timeout=config.redis_timeout,
            socket_connect_timeout=config.redis_timeout,
            retry=Retry(NoBackoff(), 0),  # our own fallback replaces retries
        )
        # A burst of calls (hundreds of new origins at once) queues here for
        # one of a few connections. Queueing is no sign of a slow Redis (a
        # busy worker queues too), so it has no timeout; calls do.
        self._connections = asyncio.Semaphore(MAX_CONNECTIONS)
        self._errors: tuple[type[BaseException], ...] = _redis_errors()
        self._retry = config.redis_retry
        self._stats = stats
        self._outage = False
        self._outage_since = 0.0
        self._next_try = 0.0

    @property
    def up(self) -> bool:
        """False during the pause after a failure (``REP_REDIS_RETRY``)."""
        return not self._outage or time.monotonic() >= self._next_try

    def script(self, source: str) -> Any:
        return self.client.register_script(source)

    async def call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """One script call (one round trip); RedisUnavailable when it fails."""
        if not self.up:
            raise RedisUnavailable
        async with self._connections:
            if not self.up:  # failed while this call queued
                raise RedisUnavailable
            self._stats.inc_value("rep/redis/calls")
            started = time.monotonic()
            try:
                reply = await script(keys=keys, args=args)
            except self._errors as exc:
                self._failed(exc)
                raise RedisUnavailable from exc
        # Only a call made after the outage began ends it: one that was under
        # way before proves little.
        if self._outage and started >= self._outage_since:
            self._outage = False
            logger.info("scrapy-rep: Redis at %s answers again: shared state resumed", self.url)
        return reply

    def _failed(self, exc: BaseException) -> None:
        self._stats.inc_value("rep/redis/errors")
        now = time.monotonic()
        self._next_try = now + self._retry
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if self._outage:
            logger.debug("scrapy-rep: Redis at %s still unavailable (%s)", self.url, reason)
            return
        self._outage = True
        self._outage_since = now
        self._stats.inc_value("rep/redis/outages")
        logger.warning(
            "scrapy-rep: Redis at %s unavailable (%s): this worker fetches robots.txt and "
            "applies Crawl-delay on its own until Redis answers again (next try in %g s)",
            self.url,
            reason,
            self._retry,
        )

    async def close(self) -> None:
        with contextlib.suppress(*self._errors):
            await self.client.aclose()


def _redis_errors() -> tuple[type[BaseException], ...]:
    from redis.exceptions import RedisError

    return (RedisError, OSError, asyncio.TimeoutError)


@dataclass(frozen=True, slots=True)
class Claim:
    """What :meth:`RedisRulesCache.claim` found for an origin."""

    entry: Entry | None
    """Redis's state of the origin: fresh (``fresh``), else the expired one or None."""
    fresh: bool = False
    """``entry`` is fresh: use it, download nothing."""
    locked: bool = False
    """This worker holds the origin's fetch lock: download, then :meth:`publish`."""


class RedisRulesCache:
    """The rules cache on Redis, an in-process LRU in front (see the module docstring).

    ``get``/``put`` are the middleware's synchronous cache interface and only
    touch the local LRU; ``claim``/``publish`` are called by the middleware's
    robots.txt fetch, the only place that talks to Redis.
    """

    def __init__(self, link: RedisLink, config: Config, stats: StatsCollector) -> None:
        self.link = link
        self.local = MemoryRulesCache(config.cache_max_origins)
        self._prefix = config.redis_prefix
        self._max_size = config.max_size
        self._keep = config.redis_keep
        attempts = config.fetch_retries + 1
        self.lock_seconds = config.fetch_timeout * attempts + LOCK_MARGIN
        self.wait_max = 2 * self.lock_seconds
        self._token = f"{uuid.uuid4().hex}:{os.getpid()}"
        self._stats = stats
        self._claim = link.script(_CLAIM)
        self._publish = link.script(_PUBLISH)

    def get(self, origin: Origin) -> Entry | None:
        return self.local.get(origin)

    def put(self, origin: Origin, entry: Entry) -> None:
        self.local.put(origin, entry)

    def _keys(self, origin: Origin) -> list[str]:
        text = origin_text(origin)
        return [f"{self._prefix}robots:{text}", f"{self._prefix}robots-lock:{text}"]

    async def claim(self, origin: Origin, sleep: Sleep) -> Claim:
        """Redis's fresh state of ``origin``, or its fetch lock, waiting while
        another worker fetches. ``Claim(None)`` means: fetch locally (Redis
        unavailable, the wait too long, or the spider closing)."""
        keys = self._keys(origin)
        deadline = time.monotonic() + self.wait_max
        pause = FIRST_POLL
        waited = False
        while True:
            args = [repr(time.time()), self._token, int(self.lock_seconds * 1000)]
            try:
                reply = await self.link.call(self._claim, keys, args)
            except RedisUnavailable:
                self._stats.inc_value("rep/redis/robots/local")
                return Claim(None)
            status = int(reply[0])
            if status != 3:
                entry = self._decode(origin, *reply[1:4])
                if status == 1 and entry is not None:
                    self._stats.inc_value("rep/redis/robots/received")
                    return Claim(entry, fresh=True)
                if status == 2:
                    return Claim(entry, locked=True)
                return Claim(None)  # unreadable state: fetch, and overwrite it
            if not waited:
                waited = True
                self._stats.inc_value("rep/redis/robots/waited")
            if time.monotonic() + pause > deadline:
                self._stats.inc_value("rep/redis/robots/wait_expired")
                logger.info(
                    "scrapy-rep: another worker has been fetching the robots.txt of %s for "
                    "%g s: fetching it here",
                    origin_text(origin),
                    self.wait_max,
                )
                return Claim(None)
            if not await sleep(pause):
                return Claim(None)
            pause = min(pause * 2, LAST_POLL)

    async def publish(self, origin: Origin, entry: Entry, body: bytes | None) -> None:
        """Store this worker's fetch result for the others (and release the
        origin's lock if this worker holds it). ``body``: the robots.txt body
        of a ``parsed`` result."""
        fallback = ""
        if entry.robots is None:
            meta, mode = _meta(entry, "none"), "plain"
        elif entry.outcome == ALLOW_ALL:
            meta, mode = _meta(entry, "allow_all"), "plain"
        elif entry.outcome == PARSED:
            if body is None:
                return
            meta, mode = _meta(entry, "body"), "body"
        else:  # stale: the last good rules, whose body Redis may still hold
            meta, mode = _meta(entry, "body"), "keep"
            fallback = _meta(entry, "none")
        ttl_ms = max(int((entry.expires - time.time() + self._keep) * 1000), 1000)
        args = [
            meta,
            repr(entry.expires),
            ttl_ms,
            self._token,
            mode,
            body[: self._max_size + 1] if mode == "body" and body is not None else b"",
            entry.url if mode == "body" else "",
            fallback,
        ]
        try:
            await self.link.call(self._publish, self._keys(origin), args)
        except RedisUnavailable:
            return
        self._stats.inc_value("rep/redis/robots/published")

    def _decode(
        self, origin: Origin, meta: bytes | None, body: bytes | None, base: bytes | None
    ) -> Entry | None:
        if not meta:
            return None
        try:
            data = json.loads(meta)
            rules = data["rules"]
            robots: RobotsTxt | None
            if rules == "body":
                if body is None:
                    return None
                url = base.decode("utf-8", "replace") if base else None
                robots = RobotsTxt.parse(body, url=url, max_size=self._max_size)
            elif rules == "allow_all":
                robots = RobotsTxt.allow_all()
            elif rules == "none":
                robots = None
            else:
                raise ValueError(f"unknown rules {rules!r}")
            outcome = data["outcome"]
            if outcome not in (PARSED, ALLOW_ALL, DISALLOW_ALL):
                raise ValueError(f"unknown outcome {outcome!r}")
            status = data["status"]
            return Entry(
                robots,
                outcome,
                float(data["expires"]),
                float(data["fetched"]),
                failures=int(data["failures"]),
                reason=str(data["reason"]),
                truncated=bool(data["truncated"]),
                status=None if status is None else int(status),
                url=str(data["url"]),
                redirects=int(data["redirects"]),
                size=int(data["size"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            logger.debug(
                "scrapy-rep: unreadable shared state of %s in Redis (%s): fetching robots.txt",
                origin_text(origin),
                exc,
            )
            return None


def _meta(entry: Entry, rules: str) -> str:
    return json.dumps(
        {
            "rules": rules,
            "outcome": entry.outcome,
            "expires": entry.expires,
            "fetched": entry.fetched,
            "failures": entry.failures,
            "reason": entry.reason,
            "truncated": entry.truncated,
            "status": entry.status,
            "url": entry.url,
            "redirects": entry.redirects,
            "size": entry.size,
        },
        separators=(",", ":"),
    )


PACED = "paced"
"""The request may go now, its slot's local delay at 0."""
LOCAL = "local"
"""Redis is unavailable: the slot's local delay must pace the request."""
CLOSING = "closing"
"""The spider closes while the request waits: drop it."""


class _Turns:
    """This worker's requests for one slot, in order, one reservation at a time."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class ClusterDelay:
    """Cluster-wide spacing of requests per download slot (see the module docstring)."""

    def __init__(self, link: RedisLink, config: Config, stats: StatsCollector) -> None:
        self.link = link
        self._prefix = config.redis_prefix
        self._stats = stats
        self._reserve = link.script(_RESERVE)
        self._turns: dict[str, _Turns] = {}

    @property
    def up(self) -> bool:
        return self.link.up

    async def reserve(self, slot: str, spacing: float) -> float:
        """Reserve the slot's next send time; seconds until it (RedisUnavailable)."""
        micros = await self.link.call(
            self._reserve, [f"{self._prefix}delay:{slot}"], [max(int(spacing * 1e6), 0)]
        )
        return int(micros) / 1e6

    async def pace(self, slot: str, spacing: float, sleep: Sleep) -> str:
        """Wait for this request's cluster-wide turn in ``slot``: PACED, LOCAL or CLOSING."""
        turns = self._turns.get(slot)
        if turns is None:
            turns = self._turns[slot] = _Turns()
        turns.users += 1
        try:
            async with turns.lock:
                return await self._wait_turn(slot, spacing, sleep)
        finally:
            turns.users -= 1
            if not turns.users:
                del self._turns[slot]

    async def _wait_turn(self, slot: str, spacing: float, sleep: Sleep) -> str:
        stats = self._stats
        for attempt in range(1, RESERVE_ATTEMPTS + 1):
            try:
                wait = await self.reserve(slot, spacing)
            except RedisUnavailable:
                stats.inc_value("rep/redis/delay/local")
                return LOCAL
            due = time.monotonic() + wait
            if wait > 0 and not await sleep(wait):
                stats.inc_value("rep/redis/delay/dropped_closing")
                return CLOSING
            if time.monotonic() - due <= LATE:
                break
            stats.inc_value("rep/redis/delay/late")
            if attempt == RESERVE_ATTEMPTS:
                break
        stats.inc_value("rep/redis/delay/paced")
        return PACED


def reactor_problem() -> str | None:
    """Why shared state cannot run here, or None (it needs an asyncio loop)."""
    from scrapy.utils.asyncio import is_asyncio_available

    try:
        if is_asyncio_available():
            return None
    except RuntimeError:
        return "no Twisted reactor and no asyncio loop is running"
    return "the Twisted reactor is not the asyncio one"
