"""Asking the engine for its next request at a given time: the frontier's wake-up.

The engine pulls requests from the scheduler when something happens and on a
5 s heartbeat; the frontier, holding requests none of which is due, asks to be
called when the first one is, through ``ExecutionEngine._slot.nextcall``. Its
``schedule(delay)`` keeps a call already pending, so a delayed one would
postpone every other wake-up (a download ending) until it fires: hence a
timer of our own, which calls ``schedule()`` without delay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_rep import _clock, _timers

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler


def wakeup_problems(engine: Any) -> list[str]:
    """What :class:`EngineWakeup` needs from Scrapy's engine and does not find."""
    if engine is None:
        return ["no engine"]
    slot = getattr(engine, "_slot", None)
    if not callable(getattr(getattr(slot, "nextcall", None), "schedule", None)):
        return ["ExecutionEngine._slot.nextcall.schedule() is missing"]
    return []


class EngineWakeup:
    """Wakes the engine now or at a time; ``on_timer`` is called each time a
    timer set by :meth:`at` wakes it (for a stat)."""

    def __init__(self, crawler: Crawler, on_timer: Callable[[], None] | None = None) -> None:
        self._crawler = crawler
        self._on_timer = on_timer
        self._call: _timers.Timer | None = None
        self._when = 0.0  # _clock.monotonic() at which _call fires

    def now(self) -> None:
        """Ask the engine for requests at its next loop turn."""
        slot = getattr(self._crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def at(self, when: float) -> None:
        """Ask the engine for requests at ``when`` (``_clock.monotonic()``), unless
        a timer fires earlier already."""
        if self._call is not None:
            if self._when <= when:
                return
            self._call.cancel()
        self._when = when
        self._call = _timers.call_later(max(when - _clock.monotonic(), 0.0), self._fire)

    def cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None

    def _fire(self) -> None:
        self._call = None
        if self._on_timer is not None:
            self._on_timer()
        self.now()
