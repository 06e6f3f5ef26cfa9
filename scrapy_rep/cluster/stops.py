"""Stopped download slots held cluster-wide: one worker's stop signal stops the slot for all.

A worker that stops a slot (:mod:`scrapy_rep.challenges`) writes it to the
hash ``stopped`` (who stopped it and why, as JSON) and publishes it on the
channel ``stopped``; a late worker reads the hash when it subscribes
(docs/stop-signals.md, "Many workers"). It rides on the slow-down's Redis
link (``REP_REDIS_SLOWDOWN``); no Redis call is made per request.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from scrapy_rep.cluster._channel import Channel
from scrapy_rep.cluster.link import RedisUnavailable, reply_text

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.statscollectors import StatsCollector

    from scrapy_rep.cluster.link import RedisLink
    from scrapy_rep.config import Config

    Apply = Callable[[str, dict[str, Any]], None]
    """(slot, what stopped it: origin, provider, kind, marker, price, scheme, probes) -> None"""

logger = logging.getLogger(__name__)

# KEYS: the hash of stopped slots. ARGV: slot, why (JSON), how long the hash
# lives (ms), channel, message.
_STOP = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
"""
_ALL = "return redis.call('HGETALL', KEYS[1])"
_MAX_FIELD = 256  # characters kept of each text field of a message


class ClusterStops(Channel["Apply"]):
    """This worker's side of the cluster-wide stops (see the module docstring)."""

    what = "Stop"

    def __init__(self, link: RedisLink, config: Config, stats: StatsCollector) -> None:
        # the hash of stopped slots and the channel have the one name
        super().__init__(link, config, stats, f"{config.redis_prefix}stopped")
        self._keep_ms = int(max(config.redis_keep, 60.0) * 1000)
        self._stop = link.script(_STOP)
        self._all = link.script(_ALL)

    def publish(self, slot: str, what: dict[str, Any]) -> None:
        """This worker stopped ``slot`` (``what``: why); returns at once."""
        self._background(self._publish(slot, what))

    async def _publish(self, slot: str, what: dict[str, Any]) -> None:
        args = [slot, json.dumps(what), self._keep_ms, self.channel]
        args.append(json.dumps({"slot": slot, "by": self._me, **what}))
        try:
            await self.link.call(self._stop, [self.channel], args)
        except RedisUnavailable:
            self._stats.inc_value("rep/challenge/redis/local")
            logger.warning(
                "Redis unavailable: the stop of download slot %r holds for this worker only",
                slot,
            )
            return
        self._stats.inc_value("rep/challenge/redis/published")

    async def _catch_up(self) -> None:
        try:
            found = await self.link.call(self._all, [self.channel], [])
        except RedisUnavailable:
            return
        for index in range(0, len(found) - 1, 2):
            message = {**_loads(found[index + 1]), "slot": reply_text(found[index])}
            self._received(json.dumps(message))

    def _received(self, data: bytes | str) -> None:
        message = _loads(data)
        slot = message.pop("slot", None)
        if not isinstance(slot, str) or message.pop("by", None) == self._me:
            return
        what = {key: _field(value) for key, value in message.items()}
        self._stats.inc_value("rep/challenge/redis/received")
        if self._apply is not None:
            self._apply(slot, what)


def _field(value: Any) -> str | int | None:
    """A field of another worker's message, as far as it is readable."""
    if isinstance(value, str):
        return value[:_MAX_FIELD]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
        return value
    return None


def _loads(data: bytes | str) -> dict[str, Any]:
    try:
        message = json.loads(data)
    except (ValueError, TypeError):
        return {}
    return message if isinstance(message, dict) else {}
