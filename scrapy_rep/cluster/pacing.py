"""Crawl-delay held cluster-wide: send times reserved per download slot in Redis.

See :mod:`scrapy_rep.cluster` for why the slot's local delay is then zero.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING, Final, Literal

from scrapy_rep import _clock
from scrapy_rep.cluster.link import RedisUnavailable

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.statscollectors import StatsCollector

    from scrapy_rep.cluster.link import RedisLink, Sleep
    from scrapy_rep.config import Config

LATE = 0.02
"""A paced request woken this much after its reserved time reserves again."""
RESERVE_ATTEMPTS = 3

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


_TAKEN: weakref.WeakKeyDictionary[Request, float] = weakref.WeakKeyDictionary()


def hand_over_turn(request: Request) -> None:
    """``request`` took its slot's cluster-wide turn as it left the Redis queue
    (:mod:`scrapy_rep.cluster.queue`), now."""
    _TAKEN[request] = _clock.monotonic()


def turn_taken(request: Request) -> bool:
    """Whether ``request`` took its turn in the Redis queue (asked once). However
    late it goes, it is in time: the queue holds the slot until the request
    reaches the site, and counts the next turn from then."""
    return _TAKEN.pop(request, None) is not None


Pace = Literal["paced", "local", "closing"]
"""How waiting for a cluster-wide turn ended (:meth:`ClusterDelay.pace`)."""
PACED: Final = "paced"
"""The request may go now, its slot's local delay at 0."""
LOCAL: Final = "local"
"""Redis is unavailable: the slot's local delay must pace the request."""
CLOSING: Final = "closing"
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

    async def pace(self, slot: str, spacing: float, sleep: Sleep) -> Pace:
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

    async def _wait_turn(self, slot: str, spacing: float, sleep: Sleep) -> Pace:
        stats = self._stats
        for attempt in range(1, RESERVE_ATTEMPTS + 1):
            try:
                wait = await self.reserve(slot, spacing)
            except RedisUnavailable:
                stats.inc_value("rep/redis/delay/local")
                return LOCAL
            due = _clock.monotonic() + wait
            if wait > 0 and not await sleep(wait):
                stats.inc_value("rep/redis/delay/dropped_closing")
                return CLOSING
            if _clock.monotonic() - due <= LATE:
                break
            stats.inc_value("rep/redis/delay/late")
            if attempt == RESERVE_ATTEMPTS:
                # It goes late after all (a busy worker): the next turn, any
                # worker's, moves on by a spacing, so that it is no closer.
                try:
                    await self.reserve(slot, spacing)
                except RedisUnavailable:
                    stats.inc_value("rep/redis/delay/local")
                    return LOCAL
                break
        stats.inc_value("rep/redis/delay/paced")
        return PACED
