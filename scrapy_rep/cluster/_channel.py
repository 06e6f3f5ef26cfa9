"""A cluster-wide state kept by publish/subscribe: the pauses' and the stops' common part.

Each worker subscribes when the spider opens, reads the state already written
(``_catch_up``) each time it subscribes, and hands each message to
``_received``; a subscriber that fails subscribes again later. The crawl waits
for the first subscription (:meth:`Channel.start`), so that a
worker joining late acts on the cluster's state from its first request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from scrapy_rep import _clock
from scrapy_rep.cluster.link import RETRY_MIN, STALLED_ATTEMPTS, _redis_errors

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from scrapy_rep.cluster.link import RedisLink
    from scrapy_rep.config import Config

logger = logging.getLogger(__name__)

ApplyT = TypeVar("ApplyT")


class Channel(Generic[ApplyT]):
    """Subscribe, catch up, receive; ``apply`` (given to :meth:`start`) is what
    the subclass calls with the other workers' news."""

    what = "cluster"  # for the log: whose subscriber stopped

    def __init__(
        self, link: RedisLink, config: Config, stats: StatsCollector, channel: str
    ) -> None:
        self.link = link
        self.channel = channel
        self._stats = stats
        self._me = uuid.uuid4().hex  # a worker ignores its own messages
        self._timeout = config.redis_timeout
        self._resubscribe = max(config.redis_retry, RETRY_MIN)
        self._apply: ApplyT | None = None
        self._ready = asyncio.Event()  # the first subscription and catch-up are done
        self._listener: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)  # the loop keeps weak references only
        task.add_done_callback(self._tasks.discard)

    async def start(self, apply: ApplyT) -> None:
        """Subscribe (at spider_opened). Returns once the state already written
        is known, or after twice REP_REDIS_TIMEOUT of this worker's own time
        (at most STALLED_ATTEMPTS times that on the clock)."""
        self._apply = apply
        if self._listener is not None:
            return
        self._listener = asyncio.ensure_future(self._listen())
        since = _clock.monotonic()
        budget = self._timeout * 2
        while not self._ready.is_set():
            left = budget - self.link.own_time(since)
            if left <= 0 or _clock.monotonic() - since >= budget * STALLED_ATTEMPTS:
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ready.wait(), left)

    def close(self) -> None:
        """Stop listening (at engine_stopped, before the link closes)."""
        if self._listener is not None:
            self._listener.cancel()
            self._listener = None
        for task in list(self._tasks):
            task.cancel()

    async def _listen(self) -> None:
        redis_errors = _redis_errors()
        errors: tuple[type[BaseException], ...] = (*redis_errors, ValueError, TypeError)
        tries = 0
        while True:
            pubsub = self.link.client.pubsub(ignore_subscribe_messages=True)
            started = _clock.monotonic()
            try:
                await pubsub.subscribe(self.channel)
                await self._catch_up()
                self._ready.set()
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None:
                        self._received(message["data"])
            except errors as exc:
                tries += 1
                if (
                    not self._ready.is_set()
                    and tries < STALLED_ATTEMPTS
                    and self.link.stalled_out(exc, started)
                ):
                    continue  # this worker was busy, not Redis: subscribe again now
                self._ready.set()  # the crawl does not wait for Redis any longer
                logger.debug("%s subscriber stopped (%r); again later", self.what, exc)
            finally:
                with contextlib.suppress(*redis_errors):
                    await pubsub.aclose()
            await asyncio.sleep(self._resubscribe)

    async def _catch_up(self) -> None:
        """The state written before this worker (re)subscribed."""
        raise NotImplementedError

    def _received(self, data: bytes | str) -> None:
        """One message of another worker (or this one's: ignored by ``_me``)."""
        raise NotImplementedError
