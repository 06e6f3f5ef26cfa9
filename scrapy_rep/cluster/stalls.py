"""How long this worker's own event loop was stalled: a timeout is judged by it.

A busy loop (a crawl's start: thousands of start requests pushed) reads a
Redis answer that came at once only when it runs again, past the call's
timeout: the worker's slowness, not Redis's. :class:`LoopStalls` ticks every
``TICK`` seconds and notes each tick that came late.
"""

from __future__ import annotations

import asyncio
from collections import deque

from scrapy_rep import _clock

TICK = 0.05
"""Seconds between two ticks of the watch."""
LATE = 0.05
"""A tick this much later than due marks a stall (the loop ran nothing meanwhile)."""
KEPT = 256
"""Stalls remembered, the newest ones (a call spans a few at most)."""


class LoopStalls:
    """The stalls of the running event loop, from :meth:`start` on."""

    def __init__(self) -> None:
        self._stalls: deque[tuple[float, float]] = deque(maxlen=KEPT)  # (began, ended)
        self._last = 0.0  # _clock.monotonic() of the last tick
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Start ticking (needs a running asyncio loop); again: nothing."""
        if self._handle is None:
            self._last = _clock.monotonic()
            self._handle = asyncio.get_running_loop().call_later(TICK, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self) -> None:
        now = _clock.monotonic()
        due = self._last + TICK
        if now - due > LATE:
            self._stalls.append((due, now))
        self._last = now
        self._handle = asyncio.get_running_loop().call_later(TICK, self._tick)

    def stalled(self, since: float) -> float:
        """Seconds of ``_clock.monotonic()`` from ``since`` to now during which the
        loop ran nothing (0 when not started)."""
        if self._handle is None:
            return 0.0
        now = _clock.monotonic()
        total = 0.0
        for began, ended in reversed(self._stalls):
            if ended <= since:
                break
            total += ended - max(began, since)
        due = self._last + TICK  # a stall under way: the next tick has not run yet
        if now - due > LATE:
            total += now - max(due, since)
        return total
