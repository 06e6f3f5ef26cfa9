"""Now: the one module of scrapy-rep that reads the time.

Every rule of time reads ``now()`` or ``monotonic()`` here and sets its timers
with :mod:`scrapy_rep._timers`, which count in this time. A test moves it
forward with ``advance()`` and sees a 600 s backoff pass at once in a crawl it
runs for real (the reactor's own timers stay underneath, so a test that does
not advance runs in real time). The offset is per process.
"""

from __future__ import annotations

import time
from typing import Protocol

_offset = 0.0  # seconds added by advance()


class Moved(Protocol):
    def moved(self) -> None:
        """The clock was advanced: come due sooner."""


_watching: set[Moved] = set()  # the timers still to come


def now() -> float:
    """Wall-clock seconds since the epoch (``time.time()``), as the rules see them."""
    return time.time() + _offset


def monotonic() -> float:
    """Seconds for deadlines and gaps (``time.monotonic()``), as the rules see them."""
    return time.monotonic() + _offset


def watch(timer: Moved) -> None:
    """Tell ``timer`` when the clock is advanced (until :func:`unwatch`)."""
    _watching.add(timer)


def unwatch(timer: Moved) -> None:
    _watching.discard(timer)


def advance(seconds: float) -> None:
    """Move the rules' time forward by ``seconds`` (tests only): every timer
    now due runs on the reactor's next turn, the others come that much sooner."""
    global _offset
    if seconds < 0:
        raise ValueError(f"the clock only moves forward, not by {seconds!r} s")
    _offset += seconds
    for timer in list(_watching):
        timer.moved()


def reset() -> None:
    """Back to real time, as a test ends (its crawl's timers are gone with it)."""
    global _offset
    _offset = 0.0
    _watching.clear()
