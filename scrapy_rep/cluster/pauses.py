"""Slow-down pauses held cluster-wide: one worker's 429 pauses the slot for all.

See :mod:`scrapy_rep.cluster` for the protocol; :mod:`scrapy_rep.slowdown`
decides and applies pauses locally, this module shares them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Final, NamedTuple

from scrapy_rep.cluster._channel import Channel
from scrapy_rep.cluster.link import RedisUnavailable, reply_text

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.statscollectors import StatsCollector

    from scrapy_rep.cluster.link import RedisLink
    from scrapy_rep.config import Config

    Apply = Callable[[str, float, "str | None", int, bool], None]
    """(slot, seconds left, origin or None, level, own answer) -> None"""

logger = logging.getLogger(__name__)

# Writes the pause ``untl`` (us, Redis's clock) of ARGV[1]'s slot at level
# ``level`` (with ``extra``, more fields of the slot's state) and publishes it.
# KEYS and ARGV[1], ARGV[5..8] as _PAUSE's.
_WRITE = """
local function write(now, untl, level, extra)
  local left_ms = math.ceil((untl - now) / 1000)
  redis.call('HSET', KEYS[1], 'until', string.format('%.0f', untl), 'level', level,
    unpack(extra))
  redis.call('PEXPIRE', KEYS[1], left_ms + tonumber(ARGV[5]))
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  redis.call('ZADD', KEYS[2], string.format('%.0f', untl), ARGV[1])
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[2], math.ceil((tonumber(last[2]) - now) / 1000) + 1000)
  local free = tonumber(redis.call('GET', KEYS[3]) or '0')
  if untl > free then
    redis.call('SET', KEYS[3], string.format('%.0f', untl), 'PX', left_ms + 1000)
  end
  redis.call('PUBLISH', ARGV[6], cjson.encode({slot = ARGV[1], left = untl - now,
    level = level, by = ARGV[7], origin = ARGV[8]}))
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
"""

# KEYS: the slot's state (hash: until, level), the set of paused slots (score:
# until), the slot's Crawl-delay next free send time (cluster/pacing.py).
# ARGV: slot, Retry-After (us, capped; -1: none), minimum, maximum (us), how long
# the level outlives the pause (ms), channel, sender, origin.
# -> {us left, level, 1 if the pause is new or longer}. Times on Redis's clock.
# The rule is slowdown.py's: a pause that runs is not doubled, only lengthened by
# a longer Retry-After.
_PAUSE = (
    _WRITE
    + """
local state = redis.call('HMGET', KEYS[1], 'until', 'level')
local untl = tonumber(state[1] or '0')
local level = tonumber(state[2] or '0')
local asked = tonumber(ARGV[2])
local low, high = tonumber(ARGV[3]), tonumber(ARGV[4])
local pause = nil
if asked >= 0 then pause = math.min(math.max(asked, low), high) end
local changed = 0
if untl > now then
  if pause and now + pause > untl then
    untl = now + pause
    changed = 1
  end
else
  level = level + 1
  if not pause then pause = math.min(low * 2 ^ math.min(level - 1, 64), high) end
  untl = now + pause
  changed = 1
end
if changed == 1 then write(now, untl, level, {}) end
return {math.floor(untl - now), level, changed}
"""
)

# A challenged answer from the slot: its run of challenges is the cluster's
# (challenges.py). KEYS as _PAUSE's. ARGV: slot, first pause, longest pause
# (us), challenged probes in a row that stop the slot, then as _PAUSE's.
# -> {us left, challenged probes in a row, challenge pauses in the run, what}:
# what is RUNNING, PAUSED, STOP or STOPPED (below). The fields 'challenges'
# and 'probes' go with the state: a good answer after the pause (_RESUME)
# clears them.
_CHALLENGE = (
    _WRITE
    + """
local state = redis.call('HMGET', KEYS[1], 'until', 'level', 'challenges', 'probes')
local untl = tonumber(state[1] or '0')
local level = tonumber(state[2] or '0')
local runs = tonumber(state[3] or '0')
local probes = tonumber(state[4] or '0')
if untl > now then return {math.floor(untl - now), probes, runs, 0} end
if runs > 0 then
  if probes >= tonumber(ARGV[4]) then return {0, probes, runs, 3} end
  probes = probes + 1
  if probes >= tonumber(ARGV[4]) then
    redis.call('HSET', KEYS[1], 'probes', probes)
    return {0, probes, runs, 2}
  end
end
runs = runs + 1
local pause = math.min(tonumber(ARGV[2]) * 2 ^ math.min(runs - 1, 64), tonumber(ARGV[3]))
untl = now + pause
write(now, untl, level + 1, {'challenges', runs, 'probes', probes})
return {math.floor(untl - now), probes, runs, 1}
"""
)

# KEYS: the slot's state. A good answer after the pause: the next pause starts
# again from the minimum. Not while a pause runs (another worker's, newer).
_RESUME = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if tonumber(redis.call('HGET', KEYS[1], 'until') or '0') <= now then
  redis.call('DEL', KEYS[1])
end
return 1
"""

# KEYS: the slot's state. ARGV: this worker, how long a claim holds (ms).
# -> {1 if this worker sends the probe of the pause that ended, else 0; us to
# wait before asking again}. One probe per pause across the cluster: the claim
# names the pause (its end); the claimant's answer starts a new pause, stops
# the slot, or clears the state (_RESUME); a claim left without an outcome
# (the claimant died, its probe failed) lapses, and another worker may probe.
_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state = redis.call('HMGET', KEYS[1], 'until', 'probe', 'probe_for', 'probe_ends')
if not state[1] then return {1, 0} end
local untl = tonumber(state[1])
if untl > now then return {0, math.floor(untl - now)} end
local ends = tonumber(state[4] or '0')
if state[3] == state[1] and ends > now and state[2] ~= ARGV[1] then
  return {0, math.floor(ends - now)}
end
redis.call('HSET', KEYS[1], 'probe', ARGV[1], 'probe_for', state[1],
  'probe_ends', string.format('%.0f', now + tonumber(ARGV[2]) * 1000))
local left = redis.call('PTTL', KEYS[1])
if left >= 0 and left < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return {1, 0}
"""

# KEYS: the set of paused slots. -> {now, slot, until, slot, until, ...}: the
# pauses running, for a worker that (re)subscribes.
_RUNNING = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', now), '+inf',
                         'WITHSCORES')
table.insert(found, 1, string.format('%.0f', now))
return found
"""


RUNNING: Final = 0
"""A challenged answer inside the cluster's running pause: sent before it, counts for nothing."""
PAUSED: Final = 1
"""A challenged answer that began a new pause of the run (its first, or after
a challenged probe: twice the last)."""
STOP: Final = 2
"""The challenged probe that ends the run: stop the slot."""
STOPPED: Final = 3
"""A challenged answer after the run ended (another worker's stop, its message
still on the way, or a request sent before this worker learnt it): no probe;
stop the slot as that worker did."""


class ChallengeRun(NamedTuple):
    """What the cluster made of a challenged answer (:meth:`ClusterPauses.challenge`)."""

    left: float
    """Seconds the slot's pause runs from now (0 with STOP)."""
    probes: int
    """Challenged probes in a row, across the cluster."""
    pauses: int
    """Challenge pauses in the run, across the cluster."""
    what: int
    """RUNNING, PAUSED, STOP or STOPPED."""


class ClusterPauses(Channel["Apply"]):
    """This worker's side of the cluster-wide pauses: ``publish``/``challenge``
    and ``resume`` on the answers that change a pause, the subscriber
    (:meth:`start`) for the other workers'. No Redis call is made per request."""

    what = "Slow-down"

    def __init__(self, link: RedisLink, config: Config, stats: StatsCollector) -> None:
        super().__init__(link, config, stats, f"{config.redis_prefix}slowdown")
        self._prefix = config.redis_prefix
        self._min_us = int(config.slowdown_min_delay * 1e6)
        self._max_us = int(config.slowdown_max_delay * 1e6)
        # A level outlives its pause by REP_SLOWDOWN_MAX_DELAY, at least a
        # minute: a slow-down answer later than that starts from the minimum.
        self._keep_ms = int(max(config.slowdown_max_delay, 60.0) * 1000)
        self._pause_now = link.script_now(_PAUSE)
        self._challenge_now = link.script_now(_CHALLENGE)
        self._resume = link.script(_RESUME)
        self._running = link.script(_RUNNING)
        self._claim = link.script(_CLAIM)
        self._unshared = False  # warned that pauses stay local (until Redis answers)
        self._resuming: set[str] = set()  # slots whose good answer is not in Redis yet

    def _keys(self, slot: str) -> list[str]:
        prefix = self._prefix
        return [f"{prefix}slowdown:{slot}", f"{prefix}pauses", f"{prefix}delay:{slot}"]

    # -- this worker's answers -----------------------------------------------------

    def publish(self, slot: str, origin: str, retry_after: float | None) -> None:
        """A slow-down answer from ``slot`` (``retry_after``: seconds asked, capped),
        written at once (:meth:`RedisLink.call_now`), before this worker goes on."""
        asked = -1 if retry_after is None else int(retry_after * 1e6)
        args = [slot, asked, self._min_us, self._max_us, self._keep_ms]
        args += [self.channel, self._me, origin]
        try:
            left, level, changed = self.link.call_now(self._pause_now, self._keys(slot), args)
        except RedisUnavailable:
            self._local(slot)
            return
        self._unshared = False
        if int(changed):
            self._stats.inc_value("rep/slowdown/redis/published")
        if self._apply is not None:
            # The cluster may know more slow-down answers in a row than this
            # worker: applied once the caller has paused the slot its own way.
            apply = self._apply
            asyncio.get_running_loop().call_soon(
                apply, slot, int(left) / 1e6, origin, int(level), True
            )

    def challenge(
        self, slot: str, origin: str, first: float, longest: float, give_up: int
    ) -> ChallengeRun | None:
        """A challenged answer from ``slot``, counted in the cluster's run of
        challenges (pauses of ``first`` seconds doubling up to ``longest``,
        stopped after ``give_up`` challenged probes in a row). Written at once,
        as :meth:`publish` is; None if Redis is unavailable (count locally)."""
        args = [slot, int(first * 1e6), int(longest * 1e6), give_up, self._keep_ms]
        args += [self.channel, self._me, origin]
        try:
            left, probes, pauses, what = self.link.call_now(
                self._challenge_now, self._keys(slot), args
            )
        except RedisUnavailable:
            self._local(slot)
            return None
        self._unshared = False
        run = ChallengeRun(int(left) / 1e6, int(probes), int(pauses), int(what))
        if run.what == PAUSED:
            self._stats.inc_value("rep/slowdown/redis/published")
        return run

    def _local(self, slot: str) -> None:
        self._stats.inc_value("rep/slowdown/redis/local")
        if not self._unshared:
            self._unshared = True
            logger.warning(
                "Redis unavailable: the pause of download slot %r holds "
                "for this worker only (other workers pause when their own requests "
                "are answered 429/503 or a stop signal)",
                slot,
            )

    def resume(self, slot: str) -> None:
        """A good answer from ``slot`` after its pause, written once Redis takes it."""
        if slot not in self._resuming:
            self._resuming.add(slot)
            self._background(self._call_resume(slot))

    async def claim_probe(self, slot: str, bound: float) -> float:
        """The pause of ``slot`` is over here: 0 if this worker sends its probe
        (claimed for ``bound`` seconds at most), else seconds to wait before
        asking again (the cluster's pause runs, or another worker probes).
        Redis unavailable: 0, each worker probes (as without Redis)."""
        try:
            mine, wait = await self.link.call(
                self._claim, self._keys(slot)[:1], [self._me, int(bound * 1000)]
            )
        except RedisUnavailable:
            return 0.0
        if int(mine):
            self._stats.inc_value("rep/slowdown/redis/probes_claimed")
            return 0.0
        return max(int(wait) / 1e6, 0.001)

    async def _call_resume(self, slot: str) -> None:
        keys = self._keys(slot)[:1]
        try:
            try:
                await self.link.call(self._resume, keys, [])
            except RedisUnavailable:
                # Lost, it would leave this worker's claim of the probe standing,
                # and the others holding the slot until it lapses (DOWNLOAD_TIMEOUT + 10 s).
                await self.link.call_again(self._resume, keys, [])
        finally:
            self._resuming.discard(slot)

    # -- the other workers' answers ------------------------------------------------

    async def _catch_up(self) -> None:
        """Pauses that began before this worker (re)subscribed."""
        try:
            found = await self.link.call(self._running, self._keys("")[1:2], [])
        except RedisUnavailable:
            return
        now = int(found[0])
        for index in range(1, len(found) - 1, 2):
            left = (int(float(found[index + 1])) - now) / 1e6
            self._deliver(reply_text(found[index]), left, None, 0)

    def _received(self, data: bytes | str) -> None:
        try:
            message = json.loads(data)
            if message.get("by") == self._me:
                return
            slot, left = str(message["slot"]), float(message["left"]) / 1e6
            origin, level = message.get("origin"), int(message.get("level") or 0)
        except (ValueError, KeyError, TypeError, AttributeError):
            logger.debug("Unreadable message on %s: %r", self.channel, data[:200])
            return
        self._stats.inc_value("rep/slowdown/redis/received")
        self._deliver(slot, left, str(origin) if origin else None, level)

    def _deliver(self, slot: str, left: float, origin: str | None, level: int) -> None:
        # Whoever wrote to Redis, no pause lasts longer than this worker allows.
        left = min(left, self._max_us / 1e6)
        if left > 0 and self._apply is not None:
            self._apply(slot, left, origin, level, False)
