"""Now and call-later: the one module of scrapy-rep that reads the time.

Every rule of time (Crawl-delay turns, pauses and probes, backoff, fetch
timeouts, freshness, the frontier's sleeping slots) reads ``now()`` or
``monotonic()`` and sets its timers with ``call_later()``, so a test can move
that time forward by hand with ``advance()`` and see a 30 s rule act at once,
on the crawl it runs for real (the model is Twisted's ``task.Clock``; here the
reactor's own timers stay underneath, so a test that does not advance runs in
real time).

Only tests call ``advance()`` and ``reset()``; the offset is per process, so a
cluster of workers (one process each) is never advanced.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

_offset = 0.0  # seconds added by advance()
_pending: set[Timer] = set()


def now() -> float:
    """Wall-clock seconds since the epoch (``time.time()``), as the rules see them."""
    return time.time() + _offset


def monotonic() -> float:
    """Seconds for deadlines and gaps (``time.monotonic()``), as the rules see them."""
    return time.monotonic() + _offset


class Timer:
    """A call ``delay`` seconds from now, on the running reactor (or asyncio loop),
    brought forward when the clock is advanced past its time."""

    __slots__ = ("__weakref__", "_args", "_call", "_due", "_function")

    def __init__(self, delay: float, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._due = monotonic() + delay
        self._function, self._args = function, args
        self._call: Any = None
        self._schedule(delay)

    def _schedule(self, delay: float) -> None:
        from scrapy.utils.asyncio import call_later

        self._call = call_later(max(delay, 0.0), self._fire)
        _pending.add(self)

    def _fire(self) -> None:
        _pending.discard(self)
        self._call = None
        self._function(*self._args)

    def active(self) -> bool:
        """Whether the call is still to come."""
        return self._call is not None

    def cancel(self) -> None:
        """Call it off (nothing if it already ran or was called off)."""
        if self._call is not None:
            self._call.cancel()
            self._call = None
            _pending.discard(self)


def call_later(delay: float, function: Callable[..., Any], *args: Any) -> Timer:
    """Call ``function(*args)`` after ``delay`` seconds of this clock."""
    return Timer(delay, function, args)


def advance(seconds: float) -> None:
    """Move the rules' time forward by ``seconds`` (tests only): every timer now
    due is called on the reactor's next turn, the others come that much sooner."""
    global _offset
    if seconds < 0:
        raise ValueError(f"the clock only moves forward, not by {seconds!r} s")
    _offset += seconds
    at = monotonic()
    for timer in list(_pending):
        if timer._call is not None:
            timer._call.cancel()
            timer._schedule(timer._due - at)


def reset() -> None:
    """Back to real time, as a test ends (its crawl's timers are gone with it)."""
    global _offset
    _offset = 0.0
    _pending.clear()
