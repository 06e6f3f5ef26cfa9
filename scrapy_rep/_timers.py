"""Call-later on scrapy-rep's clock (:mod:`scrapy_rep._clock`).

A :class:`Timer` runs on the running reactor (or asyncio loop, through Scrapy's
``call_later``) and is brought forward when a test advances the clock past
its time. Scrapy's downloader may hold one as a slot's ``latercall``: it only
tests it for truth and calls ``cancel()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy.utils.asyncio import call_later as _reactor_call_later

from scrapy_rep import _clock


class Timer:
    """``function(*args)``, ``delay`` seconds of the clock from now."""

    __slots__ = ("__weakref__", "_args", "_call", "_due", "_function")

    def __init__(self, delay: float, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._due = _clock.monotonic() + delay
        self._function, self._args = function, args
        self._call: Any = _reactor_call_later(max(delay, 0.0), self._fire)
        _clock.watch(self)

    def _fire(self) -> None:
        _clock.unwatch(self)
        self._call = None
        self._function(*self._args)

    def moved(self) -> None:
        """The clock was advanced: run at the new time of ``_due``."""
        if self._call is not None:
            self._call.cancel()
            self._call = _reactor_call_later(max(self._due - _clock.monotonic(), 0.0), self._fire)

    def active(self) -> bool:
        """Whether the call is still to come."""
        return self._call is not None

    def cancel(self) -> None:
        """Call it off (nothing if it already ran or was called off)."""
        if self._call is not None:
            self._call.cancel()
            self._call = None
            _clock.unwatch(self)


def call_later(delay: float, function: Callable[..., Any], *args: Any) -> Timer:
    """Call ``function(*args)`` after ``delay`` seconds of scrapy-rep's clock."""
    return Timer(delay, function, args)
