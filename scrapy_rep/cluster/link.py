"""The Redis client of a worker, and whether Redis is worth trying now.

Calls time out after ``REP_REDIS_TIMEOUT`` and are not retried, but for a
busy worker: a timeout that this worker's own stalled event loop explains
(:mod:`~scrapy_rep.cluster.stalls`) is made again, up to ``STALLED_ATTEMPTS``
times. Calls beyond ``CALLS_AT_ONCE`` queue for a place, below the pool's
size, so a call never finds the pool empty. A failure switches to local
state for ``REP_REDIS_RETRY`` seconds, one WARNING per outage (:class:`Outage`).
docs/cluster.md, "When Redis is down or slow", says what a crawl sees.
Needs an asyncio loop (:func:`reactor_problem`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from scrapy_rep import _clock
from scrapy_rep.cluster.stalls import LoopStalls

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy.statscollectors import StatsCollector

    from scrapy_rep.config import Config

    Sleep = Callable[[float], Awaitable[bool]]
    """Sleep that many seconds; False when woken early because the spider closes."""

logger = logging.getLogger(__name__)

POOL_SIZE = 32
"""Connections to Redis per worker."""
CALLS_AT_ONCE = POOL_SIZE - 2
"""Script calls in flight at once; more queue for a place. The pool keeps one
connection for the slow-down subscriber and one spare."""


STALLED_ATTEMPTS = 3
"""Tries of a call whose timeouts this worker's stalled event loop explains. The
scripts are safe to run again (a claim of a lock this worker holds already
answers that the lock is its own)."""

SAME_OUTAGE = 60.0
"""Seconds after Redis answers again during which a new failure continues the
outage (no second WARNING): a slow or full Redis answers some calls only."""
RETRY_MIN = 1.0
"""Seconds at least between two tries of what Redis did not take (a call made
again, a subscription)."""


class Outage:
    """Whether one client of Redis is in an outage (not tried again for
    ``retry`` seconds after a failure), and which of its failures and answers
    deserve more than DEBUG: one WARNING per outage, one INFO when it ends
    (see the module docstring)."""

    def __init__(self, retry: float = 0.0) -> None:
        self.on = False
        self.since = 0.0  # _clock.monotonic() at which it began
        self.retry = retry
        self.next_try = 0.0
        self._told = False  # this outage was logged as a WARNING
        self._same_until = 0.0

    @property
    def down(self) -> bool:
        """In the pause after a failure: Redis is not tried."""
        return self.on and _clock.monotonic() < self.next_try

    def begin(self) -> bool:
        """A call failed: True when that begins an outage to warn about."""
        self.next_try = _clock.monotonic() + self.retry
        if self.on:
            return False
        self.on, self.since = True, _clock.monotonic()
        self._told = self.since >= self._same_until
        return self._told

    def end(self) -> bool:
        """Redis answered: True when that ends an outage that was warned about."""
        if not self.on:
            return False
        self.on = False
        self._same_until = _clock.monotonic() + SAME_OUTAGE
        return self._told


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
        import redis
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import TimeoutError as RedisTimeout
        from redis.retry import Retry as SyncRetry

        assert config.redis_url is not None
        self.url = safe_url(config.redis_url)
        # A pool that waits for a free connection rather than failing: with
        # calls bounded below its size it never has to, but a subscriber
        # reconnecting meanwhile must not make a call fail.
        pool = BlockingConnectionPool.from_url(
            config.redis_url,
            max_connections=POOL_SIZE,
            timeout=None,
            socket_timeout=config.redis_timeout,
            socket_connect_timeout=config.redis_timeout,
            retry=Retry(NoBackoff(), 0),  # our own fallback replaces retries
        )
        self._pool = pool
        self.client: Any = Redis(connection_pool=pool)
        # Slow-down pauses are written at once, by a blocking client of their
        # own (see ``call_now``).
        self._now_client: Any = redis.Redis.from_url(
            config.redis_url,
            socket_timeout=config.redis_timeout,
            socket_connect_timeout=config.redis_timeout,
            retry=SyncRetry(NoBackoff(), 0),
        )
        # A burst of calls (hundreds of new origins at once) queues here for
        # a place. Queueing is no sign of a slow Redis (a busy worker queues
        # too), so it has no timeout; calls do.
        self._places = asyncio.Semaphore(CALLS_AT_ONCE)
        self._errors: tuple[type[BaseException], ...] = _redis_errors()
        self._timeouts = (RedisTimeout, asyncio.TimeoutError, TimeoutError)
        self._timeout = config.redis_timeout
        self._stalls = LoopStalls()
        self._stats = stats
        self._outage = Outage(config.redis_retry)

    @property
    def up(self) -> bool:
        """False during the pause after a failure (``REP_REDIS_RETRY``)."""
        return not self._outage.down

    def script(self, source: str) -> Any:
        return self.client.register_script(source)

    def script_now(self, source: str) -> Any:
        """A script for :meth:`call_now`."""
        return self._now_client.register_script(source)

    def call_now(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """One script call made at once, blocking the event loop for its round
        trip (``REP_REDIS_TIMEOUT`` at most); RedisUnavailable when it fails.
        For what other workers must learn before this one goes on (a pause):
        through :meth:`call`, queued behind a crawl's start, it came 1.5 s late."""
        if not self.up:
            raise RedisUnavailable
        self._stats.inc_value("rep/redis/calls")
        started = _clock.monotonic()
        try:
            reply = script(keys=keys, args=args)
        except self._errors as exc:
            self._failed(exc)
            raise RedisUnavailable from exc
        self._answered(started)
        return reply

    async def call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """One script call (one round trip); RedisUnavailable when it fails."""
        if not self.up:
            raise RedisUnavailable
        async with self._places:
            if not self.up:  # failed while this call queued
                raise RedisUnavailable
            self._stalls.start()
            first = _clock.monotonic()
            for attempt in range(1, STALLED_ATTEMPTS + 1):
                self._stats.inc_value("rep/redis/calls")
                started = _clock.monotonic()
                try:
                    reply = await script(keys=keys, args=args)
                    break
                except self._errors as exc:
                    if attempt < STALLED_ATTEMPTS and self.stalled_out(exc, started):
                        continue
                    self._failed(exc)
                    raise RedisUnavailable from exc
        self._answered(first)
        return reply

    async def call_again(
        self, script: Any, keys: list[str], args: list[Any], until: float = math.inf
    ) -> bool:
        """A call Redis did not take, made again every ``REP_REDIS_RETRY`` (1 s
        at least) until it does (True) or ``until`` (``_clock.monotonic()``)
        would pass first (False). For a write whose loss would leave a claim or
        a lock of this worker's standing, the other workers waiting on it."""
        pause = max(self._outage.retry, RETRY_MIN)
        while _clock.monotonic() + pause < until:
            await asyncio.sleep(pause)
            try:
                await self.call(script, keys, args)
            except RedisUnavailable:
                continue
            return True
        return False

    def _answered(self, started: float) -> None:
        # Only a call made after the outage began ends it: one that was under
        # way before proves little.
        if self._outage.on and started >= self._outage.since:
            if self._outage.end():
                logger.info("Redis at %s answers again: shared state resumed", self.url)
            else:
                logger.debug("Redis at %s answers again", self.url)

    def own_time(self, since: float) -> float:
        """Seconds of ``_clock.monotonic()`` from ``since`` to now in which this
        worker's event loop was not stalled (the watch starts here if not yet)."""
        self._stalls.start()
        return _clock.monotonic() - since - self._stalls.stalled(since)

    def stalled_out(self, exc: BaseException, started: float) -> bool:
        """Whether ``exc`` is a timeout that this worker's own stalled event
        loop explains: without the stall, the call had time left."""
        if not isinstance(exc, self._timeouts):
            return False
        busy = self.own_time(started)
        if busy >= self._timeout:
            return False
        self._stats.inc_value("rep/redis/stalled")
        logger.debug(
            "A Redis call timed out while this worker's event loop was stalled "
            "(%.2f s of the call's own time): not an outage, calling again",
            busy,
        )
        return True

    def _failed(self, exc: BaseException) -> None:
        self._stats.inc_value("rep/redis/errors")
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if not self._outage.begin():  # under way, or again soon after its end
            logger.debug("Redis at %s still unavailable (%s)", self.url, reason)
            return
        self._stats.inc_value("rep/redis/outages")
        logger.warning(
            "Redis at %s unavailable (%s): this worker fetches robots.txt and "
            "applies Crawl-delay on its own until Redis answers again (next try in %g s)",
            self.url,
            reason,
            self._outage.retry,
        )

    async def close(self) -> None:
        self._stalls.stop()
        with contextlib.suppress(*self._errors):
            await self.client.aclose()
            await self._pool.disconnect()  # a pool given to the client is not closed by it
            self._now_client.close()


def reply_text(value: bytes | str) -> str:
    """A Redis reply's string (bytes decoded as UTF-8, errors replaced)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _redis_errors() -> tuple[type[BaseException], ...]:
    from redis.exceptions import RedisError

    return (RedisError, OSError, asyncio.TimeoutError)


def reactor_problem() -> str | None:
    """Why shared state cannot run here, or None (it needs an asyncio loop)."""
    from scrapy.utils.asyncio import is_asyncio_available

    try:
        if is_asyncio_available():
            return None
    except RuntimeError:
        return "no Twisted reactor and no asyncio loop is running"
    return "the Twisted reactor is not the asyncio one"
