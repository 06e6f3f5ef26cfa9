"""Per download slot: the next turn, as the frontier keeps it.

The downloader knows when a slot last started a request
(:class:`~scrapy_rep._slots.readiness.SlotReadiness`), not a request handed
out that has not reached it yet (on the asyncio reactor, downloader
middlewares run at the next loop turn): :class:`SlotTurns` remembers each
slot's last hand-out. A Crawl-delay slot is also held by its request until
that request is sent, its next turn counted from then (docs/scheduling.md);
``DOWNLOAD_DELAY`` and AutoThrottle alone count from the hand-out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_rep.cluster.pacing import HOLD_MAX  # the Redis queue's bound too

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_rep._slots.readiness import SlotReadiness

HORIZON = 300.0
"""Seconds a slot's last hand-out is remembered: longer than any delay that
matters (REP_MAX_CRAWL_DELAY is 60 s by default)."""


class SlotTurns:
    """The slots' turns of one crawl, in memory (see the module docstring; the
    Redis queue keeps them in Redis). ``sent`` answers the key of the slot the
    request held."""

    def __init__(self, slots: SlotReadiness, bound: int) -> None:
        self._slots = slots
        self._bound = bound
        self._limit = bound
        self._last: dict[str, float] = {}  # slot -> _clock.monotonic() of its last hand-out
        self._crawl_delayed: set[str] = set()  # slots whose last look had a Crawl-delay
        self._holds: dict[str, tuple[Request, float]] = {}  # slot -> its request, held until
        self._held_by: dict[Request, str] = {}

    @property
    def holding(self) -> bool:
        """True while a request holds its slot (cheap: asked on every answer)."""
        return bool(self._held_by)

    def wait(self, key: str, delay: float, now: float) -> float:
        if delay > 0:
            self._crawl_delayed.add(key)
        else:
            self._crawl_delayed.discard(key)
        delay = max(delay, self._slots.delay(key))
        if delay <= 0:
            return 0.0
        hold = self._holds.get(key)
        if hold is not None:
            if hold[1] > now:
                return hold[1] - now  # until sent (the queue is told), at most HOLD_MAX
            self._unhold(key)
        wait = 0.0
        last = self._last.get(key)
        if last is not None:
            wait = last + delay - now
        since = self._slots.since_start(key)
        if since is not None:
            wait = max(wait, delay - since)
        return wait

    def handed(self, key: str, request: Request, now: float) -> None:
        self._last[key] = now
        if key in self._crawl_delayed:  # looked at in this pop, just before
            self._unhold(key)
            self._holds[key] = (request, now + HOLD_MAX)
            self._held_by[request] = key
        if len(self._last) > self._limit:
            self._forget(now)

    def sent(self, request: Request, now: float) -> str | None:
        key = self._held_by.pop(request, None)
        if key is None:
            return None
        del self._holds[key]
        self._last[key] = max(self._last.get(key, now), now)
        return key

    def _unhold(self, key: str) -> None:
        hold = self._holds.pop(key, None)
        if hold is not None:
            del self._held_by[hold[0]]

    def _forget(self, now: float) -> None:
        """Drop turns past :data:`HORIZON`."""
        self._last = {key: last for key, last in self._last.items() if now - last < HORIZON}
        self._crawl_delayed = {key for key in self._crawl_delayed if key in self._last}
        for key in [key for key, (_, until) in self._holds.items() if until <= now]:
            self._unhold(key)
        # Many slots busy at once: look again only once they have doubled.
        self._limit = max(self._bound, 2 * len(self._last))
