"""A real crawl stepped through a rule of time on scrapy-rep's clock (the ``rep_clock`` fixture).

The test waits, in real time, until the crawl shows it now waits on the rule
(a request reached the server, a signal fired, a stat changed), then moves the
clock over the wait with ``rep_clock.advance(seconds)``: to just before the
rule's time, lets the crawl act (``settle()``), then past it. A 30 s deadline
then costs a moment of real time. The send stamps (sent_stamp.py) are in the
clock's time: the test asserts on them, as the rule saw them.

    await until(lambda: site.hits("/robots.txt"))
    rep_clock.advance(queued + 30 - 1 - rep_clock.now())  # 1 s before the deadline
    await settle()  # a page let go now is stamped before its time
    rep_clock.advance(2)

The clock is real time plus what the test added: it runs on meanwhile, so a
step leaves the rule a margin of real time (here 1 s) before its own time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import ModuleType

from crawls import sleep
from sent_stamp import TRANSFERS
from twisted.internet.defer import ensureDeferred
from twisted.python.failure import Failure

POLL = 0.01
SETTLE = 0.3
"""Real seconds in which the crawl acts on a move of the clock (a timer due
runs on the loop's next turn)."""


async def until(condition: Callable[[], object], within: float = 30.0) -> None:
    """Real time: until ``condition()`` is true; fails after ``within`` seconds
    (what the crawl should have shown long before, on any machine)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {within:g} s of real time")
        await sleep(POLL)


async def settle(seconds: float = SETTLE) -> None:
    """Real time: give the crawl ``seconds`` to act on a move of the clock.
    What it did meanwhile shows in the send stamps, in the clock's time: a
    rule that let a request go too early stamps it too early. (Should the
    machine hold the crawl up, the clock runs on in real time meanwhile, and
    the rule's own time comes, never an early one.)"""
    await sleep(seconds)


LEAD = 0.5
"""Seconds of the clock before a pause's end to which the first step goes."""


class PauseSteps:
    """Steps the clock over each pause scrapy-rep announces: the slow-down's
    INFO line "... no request to it for N s" (``source="slowdown"``), or a stop
    signal's "...; paused N s (REP_CHALLENGE_PAUSE)" (``source="challenges"``),
    logged as the crawler gets the answer that starts it. Once no request is
    being downloaded (their answers may lengthen a slow-down pause, as they
    would have in real time), to ``lead`` before the pause's end, then, after
    ``settle()``, to its end. A request let go before the end is stamped
    before it; a pause that runs longer than it said ends in real time, late.
    ``windows`` holds each pause as (start, end) in ``clock.now()``'s time.
    Use as a context manager around the crawl."""

    def __init__(self, clock: ModuleType, source: str = "slowdown", lead: float = LEAD) -> None:
        self.clock = clock
        self.lead = lead
        self.pauses: list[float] = []
        self.windows: list[tuple[float, float]] = []
        self._source = source
        self._handler = _Announced(self._announced, _SECONDS[source])
        self._logger = logging.getLogger(f"scrapy_rep.{source}")
        self._level = self._logger.level
        self._errors: list[Failure] = []

    def __enter__(self) -> PauseSteps:
        level = _LEVEL[self._source]
        if not self._logger.isEnabledFor(level):
            self._logger.setLevel(level)
        self._logger.addHandler(self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.setLevel(self._level)
        for failure in self._errors:
            failure.raiseException()

    def _announced(self, seconds: float) -> None:
        self.pauses.append(seconds)
        now = self.clock.now()
        self.windows.append((now, now + seconds))
        end = self.clock.monotonic() + seconds
        ensureDeferred(self._over(end)).addErrback(self._errors.append)

    async def _over(self, end: float) -> None:
        for to in (end - self.lead, end):
            await until(lambda: not TRANSFERS)
            self.clock.advance(max(to - self.clock.monotonic(), 0.0))
            if to < end:
                await settle()


def _slowdown_pause(record: logging.LogRecord) -> float | None:
    if isinstance(record.msg, str) and record.msg.endswith("no request to it for %.1f s"):
        assert isinstance(record.args, tuple)
        return float(record.args[-1])  # type: ignore[arg-type]
    return None


def _challenge_pause(record: logging.LogRecord) -> float | None:
    if isinstance(record.msg, str) and "; paused %g s%s (REP_CHALLENGE_PAUSE)" in record.msg:
        assert isinstance(record.args, tuple)
        return float(record.args[2])  # type: ignore[arg-type]
    return None


_SECONDS: dict[str, Callable[[logging.LogRecord], float | None]] = {
    "slowdown": _slowdown_pause,
    "challenges": _challenge_pause,
}


_LEVEL = {
    "slowdown": logging.INFO,
    "challenges": logging.DEBUG,
}  # a challenge's later pauses: DEBUG


class _Announced(logging.Handler):
    def __init__(
        self,
        announced: Callable[[float], None],
        seconds: Callable[[logging.LogRecord], float | None],
    ) -> None:
        super().__init__(logging.DEBUG)
        self._announced = announced
        self._seconds = seconds

    def emit(self, record: logging.LogRecord) -> None:
        seconds = self._seconds(record)
        if seconds is not None:
            self._announced(seconds)
