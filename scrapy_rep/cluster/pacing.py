"""Crawl-delay held cluster-wide: send times reserved per download slot in Redis.

See :mod:`scrapy_rep.cluster` for why the slot's local delay is then zero.
A request's turn holds its slot (``<prefix>hold:<slot>``) until the request
reaches the site (its answer begins, or it ends without one): the next turn,
any worker's, is a spacing from then on Redis's clock. Counted from the
reservation, a busy worker that sent late let the site see 0.028 s for 0.25 s
asked (four workers on two cores). docs/cluster.md, "Crawl-delay".
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
import weakref
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

from scrapy import signals

from scrapy_rep import _clock, _timers
from scrapy_rep._context import crawl_context
from scrapy_rep.cluster.link import RedisUnavailable

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from scrapy_rep._slots import Ledger
    from scrapy_rep.cluster.link import RedisLink, Sleep
    from scrapy_rep.config import Config

HOLD_MAX = 30.0
"""Seconds at most a slot is held for a request on its way (less with a
shorter DOWNLOAD_TIMEOUT), past its turn: a worker that dies meanwhile, or a
request never reported sent, holds the slot no longer (the frontier's too)."""
HOLD_MARGIN = 1.0
SWEEP_EVERY = 2.0
"""Seconds between looks for requests that ended without a signal this module
hears (a later middleware dropped or answered them): their holds end then."""
HELD_POLL_MIN = 0.01
"""Seconds at least between two asks of a worker whose slot is held."""

# KEYS: the slot's next free send time (microseconds, Redis's clock).
# ARGV: spacing (microseconds). -> microseconds to wait.
# (A turn counted, not held: the robots.txt request, already answered.)
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local at = math.max(now, tonumber(redis.call('GET', KEYS[1]) or '0'))
local after = at + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%.0f', after), 'PX',
           math.ceil((after - now) / 1000) + 1000)
return at - now
"""

# KEYS: the slot's next free send time, its hold. ARGV: spacing (us), the
# request's token, how long the hold lasts past the turn (ms).
# -> {microseconds to wait for the turn taken, 0}, or {-1, milliseconds the
# hold still lasts} while another request of the slot is on its way.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[2] then
  return {-1, redis.call('PTTL', KEYS[2])}
end
local at = math.max(now, tonumber(redis.call('GET', KEYS[1]) or '0'))
local after = at + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%.0f', after), 'PX',
           math.ceil((after - now) / 1000) + 1000)
redis.call('SET', KEYS[2], ARGV[2], 'PX', math.ceil((at - now) / 1000) + tonumber(ARGV[3]))
return {at - now, 0}
"""

# KEYS: the slot's next free send time, its hold. ARGV: the token, spacing (us).
# The request that took the turn with that token reached the site, or never
# will: the next turn is a spacing from now at the earliest (never earlier
# than a turn already set: another worker's, a pause's end). The Redis queue's
# SENT (frontier/_redis_scripts.py) goes on from here.
ARRIVED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
local turn = math.max(now + tonumber(ARGV[2]), tonumber(redis.call('GET', KEYS[1]) or '0'))
redis.call('SET', KEYS[1], string.format('%.0f', turn), 'PX',
           math.ceil((turn - now) / 1000) + 1000)
"""


_TAKEN: weakref.WeakKeyDictionary[Request, float] = weakref.WeakKeyDictionary()


def hand_over_turn(request: Request) -> None:
    """``request`` took its slot's cluster-wide turn as it left the Redis queue
    (:mod:`scrapy_rep.frontier.redis_queue`), now."""
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


class _Hold(NamedTuple):
    slot: str
    token: str
    spacing: int  # microseconds
    let_go: bool  # by the middleware: in the downloader until it ends


class ClusterDelay:
    """Cluster-wide spacing of requests per download slot (see the module docstring)."""

    def __init__(self, link: RedisLink, config: Config, stats: StatsCollector) -> None:
        self.link = link
        self._prefix = config.redis_prefix
        self._stats = stats
        self._reserve = link.script(_RESERVE)
        self._take = link.script(_TAKE)
        # Written at once (a blocking round trip, rare: one per paced request):
        # a call queued behind the loop's other work would count the next
        # turn from later than the arrival, costing the site's pages time.
        self._arrived = link.script_now(ARRIVED)
        self._turns: dict[str, _Turns] = {}
        self._tokens = (f"{uuid.uuid4().hex[:12]}:{n}" for n in itertools.count())
        self._holding: dict[Request, _Hold] = {}
        self._hold_ms = int((HOLD_MAX + HOLD_MARGIN) * 1000)
        self._ledger: Ledger | None = None
        self._sweep_timer: _timers.Timer | None = None

    def watch(self, crawler: Crawler) -> None:
        """End each hold when its request reaches the site (see the module docstring)."""
        timeout = crawler.settings.getfloat("DOWNLOAD_TIMEOUT")
        self._hold_ms = int((min(timeout, HOLD_MAX) + HOLD_MARGIN) * 1000)
        # it arrived: its answer begins
        crawler.signals.connect(self._reached, signal=signals.headers_received)
        self._ledger = ledger = crawl_context(crawler).waiting.ledger
        ledger.follow("left", self._reached)  # ended without an answer (or with one)
        ledger.follow("received", self._reached)  # answered before the downloader (a cache)
        crawler.signals.connect(self._stop_sweeping, signal=signals.engine_stopped)

    async def reserve(self, slot: str, spacing: float) -> float:
        """Count a turn of the slot without holding it (a request already
        answered: robots.txt); seconds until it (RedisUnavailable)."""
        micros = await self.link.call(
            self._reserve, [f"{self._prefix}delay:{slot}"], [max(int(spacing * 1e6), 0)]
        )
        return int(micros) / 1e6

    async def pace(self, slot: str, spacing: float, sleep: Sleep, request: Request) -> Pace:
        """Wait for ``request``'s cluster-wide turn in ``slot``: PACED (the
        slot is held for it until :meth:`release`), LOCAL or CLOSING."""
        turns = self._turns.setdefault(slot, _Turns())
        turns.users += 1
        try:
            async with turns.lock:
                return await self._wait_turn(slot, spacing, sleep, request)
        except BaseException:
            self.release(request)
            raise
        finally:
            turns.users -= 1
            if not turns.users:
                del self._turns[slot]

    async def _wait_turn(self, slot: str, spacing: float, sleep: Sleep, request: Request) -> Pace:
        stats = self._stats
        micros = max(int(spacing * 1e6), 0)
        held = self._holding.get(request)  # its turn again, after a pause
        token = held.token if held is not None else next(self._tokens)
        keys = [f"{self._prefix}delay:{slot}", f"{self._prefix}hold:{slot}"]
        waited = False
        while True:
            try:
                wait, lasts = await self.link.call(self._take, keys, [micros, token, self._hold_ms])
            except RedisUnavailable:
                stats.inc_value("rep/redis/delay/local")
                return LOCAL
            if int(wait) >= 0:
                break
            # Another request of the slot is on its way: its arrival sets the
            # next turn a spacing later, so asking again a spacing from now
            # loses no time (or when its hold ends, if sooner: a dead worker).
            if not waited:
                waited = True
                stats.inc_value("rep/redis/delay/held")
            if not await sleep(max(min(spacing, int(lasts) / 1000), HELD_POLL_MIN)):
                stats.inc_value("rep/redis/delay/dropped_closing")
                return CLOSING
        self._holding[request] = _Hold(slot, token, micros, let_go=False)
        if self._sweep_timer is None and self._ledger is not None:
            self._sweep_timer = _timers.call_later(SWEEP_EVERY, self._sweep)
        if int(wait) > 0 and not await sleep(int(wait) / 1e6):
            self.release(request)
            stats.inc_value("rep/redis/delay/dropped_closing")
            return CLOSING
        stats.inc_value("rep/redis/delay/paced")
        return PACED

    # -- holds --------------------------------------------------------------------

    def let_go(self, request: Request) -> None:
        """The middleware let ``request`` go, at its turn: from now on it is
        in the downloader until it ends."""
        hold = self._holding.get(request)
        if hold is not None:
            self._holding[request] = hold._replace(let_go=True)

    def release(self, request: Request) -> None:
        """``request`` reached its site, or never will: its slot's next turn,
        any worker's, is a spacing from now (Redis unavailable: the hold ends
        by its expiry)."""
        hold = self._holding.pop(request, None)
        if hold is None or not self.link.up:
            return
        keys = [f"{self._prefix}delay:{hold.slot}", f"{self._prefix}hold:{hold.slot}"]
        with contextlib.suppress(RedisUnavailable):
            self.link.call_now(self._arrived, keys, [hold.token, hold.spacing])

    def _reached(self, request: Request) -> None:
        if self._holding:  # every request's answer passes here: one test when none is held
            self.release(request)

    def _sweep(self) -> None:
        """End the holds of requests let go that are no longer under way (a
        later middleware dropped them, or answered them): neither in the
        downloader nor detached (the ledger)."""
        self._sweep_timer = None
        if self._ledger is None:
            return
        for request, hold in list(self._holding.items()):
            if hold.let_go and not self._ledger.alive(request):
                self.release(request)
        if self._holding:
            self._sweep_timer = _timers.call_later(SWEEP_EVERY, self._sweep)

    def _stop_sweeping(self) -> None:
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
