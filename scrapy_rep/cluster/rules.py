"""robots.txt shared through Redis: one fetch per origin for the whole cluster.

docs/cluster.md, "robots.txt", describes the protocol (claim, fetch lock, publish).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy_rep import _clock
from scrapy_rep._entry_codec import decode, encode
from scrapy_rep.cache import MemoryRulesCache
from scrapy_rep.cluster.link import RedisUnavailable
from scrapy_rep.policy import PARSED, REFUSED_LOCALLY, UNAVAILABLE, Entry

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from scrapy_rep.cluster.link import RedisLink, Sleep
    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin

logger = logging.getLogger(__name__)

LOCK_MARGIN = 5.0
"""Seconds a robots.txt fetch lock outlives the longest fetch (timeout x attempts)."""
FIRST_POLL = 0.05
LAST_POLL = 1.0


# KEYS: the origin's state (a hash), its fetch lock. ARGV: now (the caller's
# clock, like Entry.expires), lock token, lock lifetime (ms).
# -> {1, meta, body, base}: fresh state; {2, meta, body, base}: the lock is
# ours (meta may be nil, or an expired state; also when this worker took it
# already: a claim made again after a timeout); {3}: someone else fetches.
_CLAIM = """
local state = redis.call('HMGET', KEYS[1], 'meta', 'expires', 'body', 'base')
if state[1] and tonumber(state[2] or '0') > tonumber(ARGV[1]) then
  return {1, state[1], state[3], state[4]}
end
if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3])
    or redis.call('GET', KEYS[2]) == ARGV[2] then
  return {2, state[1], state[3], state[4]}
end
return {3}
"""

# KEYS: the origin's state, its fetch lock. ARGV: meta, expires, TTL (ms),
# lock token, mode ("body": a new body; "keep": keep the stored body, the stale
# rules; "plain": no body), body, base URL of the body, meta to store instead
# when "keep" finds no body.
_PUBLISH = """
local meta = ARGV[1]
if ARGV[5] ~= 'keep' or redis.call('HEXISTS', KEYS[1], 'body') == 0 then
  redis.call('DEL', KEYS[1])
  if ARGV[5] == 'keep' then meta = ARGV[8] end
end
redis.call('HSET', KEYS[1], 'meta', meta, 'expires', ARGV[2])
if ARGV[5] == 'body' then redis.call('HSET', KEYS[1], 'body', ARGV[6], 'base', ARGV[7]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if redis.call('GET', KEYS[2]) == ARGV[4] then
  redis.call('DEL', KEYS[2])
end
return 1
"""


@dataclass(frozen=True, slots=True)
class Claim:
    """What :meth:`RedisRulesCache.claim` found for an origin."""

    entry: Entry | None
    """Redis's state of the origin: fresh (``fresh``), else the expired one or None."""
    fresh: bool = False
    """``entry`` is fresh: use it, download nothing. Otherwise download, then
    :meth:`RedisRulesCache.publish` (which releases the fetch lock if held)."""


class RedisRulesCache(MemoryRulesCache):
    """The rules cache on Redis, the in-process LRU in front: ``get``/``put``
    touch the LRU only; ``claim``/``publish``, called by the robots.txt fetch,
    are the only calls to Redis."""

    def __init__(self, link: RedisLink, config: Config, stats: StatsCollector) -> None:
        super().__init__(config.cache_max_origins, config.backoff_max_origins)
        self.link = link
        self._prefix = config.redis_prefix
        self._max_size = config.max_size
        self._keep = config.redis_keep
        self.lock_seconds = config.fetch_timeout * (config.fetch_retries + 1) + LOCK_MARGIN
        self.wait_max = 2 * self.lock_seconds
        self._token = f"{uuid.uuid4().hex}:{os.getpid()}"
        self._stats = stats
        self._claim = link.script(_CLAIM)
        self._publish = link.script(_PUBLISH)
        self._locks: dict[str, float] = {}  # origin -> when the fetch lock it holds lapses
        self._later: set[asyncio.Task[None]] = set()  # publications Redis did not take yet

    def _keys(self, origin: Origin) -> list[str]:
        text = origin.text
        return [f"{self._prefix}robots:{text}", f"{self._prefix}robots-lock:{text}"]

    async def claim(self, origin: Origin, sleep: Sleep) -> Claim:
        """Redis's fresh state of ``origin``, or its fetch lock, waiting while
        another worker fetches. ``Claim(None)`` means: fetch locally (Redis
        unavailable, the wait too long, or the spider closing)."""
        keys = self._keys(origin)
        deadline = _clock.monotonic() + self.wait_max
        pause = FIRST_POLL
        waited = False
        while True:
            args = [repr(_clock.now()), self._token, int(self.lock_seconds * 1000)]
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
                    self._locks[origin.text] = _clock.monotonic() + self.lock_seconds
                    return Claim(entry)
                return Claim(None)  # unreadable state: fetch, and overwrite it
            if not waited:
                waited = True
                self._stats.inc_value("rep/redis/robots/waited")
            if _clock.monotonic() + pause > deadline:
                self._stats.inc_value("rep/redis/robots/wait_expired")
                logger.info(
                    "Another worker has been fetching the robots.txt of %s for "
                    "%g s: fetching it here",
                    origin.text,
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
            meta, mode = encode(entry, "none"), "plain"
        elif entry.outcome in (UNAVAILABLE, REFUSED_LOCALLY):
            meta, mode = encode(entry, "allow_all"), "plain"
        elif entry.outcome == PARSED and body is not None:
            meta, mode = encode(entry, "body"), "body"
        else:  # stale, or a 304: the rules whose body Redis may still hold
            meta, mode = encode(entry, "body"), "keep"
            # (a 304 whose body Redis lost: an unreadable state, fetched again)
            fallback = "" if entry.outcome == PARSED else encode(entry, "none")
        ttl_ms = max(int((entry.expires - _clock.now() + self._keep) * 1000), 1000)
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
        keys = self._keys(origin)
        lapses = self._locks.pop(origin.text, None)
        try:
            await self.link.call(self._publish, keys, args)
        except RedisUnavailable:
            if lapses is not None:
                # Lost, it would leave this worker's fetch lock standing: the
                # others would wait for it to lapse before fetching the file.
                task = asyncio.ensure_future(self._publish_again(keys, args, lapses))
                self._later.add(task)  # the loop keeps weak references only
                task.add_done_callback(self._later.discard)
            return
        self._stats.inc_value("rep/redis/robots/published")

    async def _publish_again(self, keys: list[str], args: list[Any], lapses: float) -> None:
        if await self.link.call_again(self._publish, keys, args, until=lapses):
            self._stats.inc_value("rep/redis/robots/published")

    def close(self) -> None:
        """Give up the publications not made yet (at engine_stopped, before the link closes)."""
        for task in list(self._later):
            task.cancel()

    def _decode(
        self, origin: Origin, meta: bytes | None, body: bytes | None, base: bytes | None
    ) -> Entry | None:
        if not meta:
            return None
        try:
            url = base.decode("utf-8", "replace") if base else None
            return decode(meta, body, url, self._max_size)
        except (ValueError, KeyError, TypeError) as exc:
            logger.debug(
                "Unreadable shared state of %s in Redis (%s): fetching robots.txt",
                origin.text,
                exc,
            )
            return None
