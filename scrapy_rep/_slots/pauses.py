"""Download slots paused for a 429/503 answer: their queue held, then given back a few at a time.

A paused slot's ``latercall``, the timer that holds its queue until its delay
has passed (``Downloader._process_queue`` sends nothing while one is set), is
replaced by one that fires when the pause ends; nothing else of the slot is
written, so its own delay applies again after. The requests queued in it when
the pause begins are taken out and given back a few at a time after it
(:meth:`SlotPauses.take_queued`), or, if the spider closes meanwhile, ended
with IgnoreRequest instead of keeping the crawl open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.core.downloader import Slot
from scrapy.exceptions import IgnoreRequest

from scrapy_rep import _clock, _timers
from scrapy_rep._slots.active import OnDownloader, missing_slot_attributes

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http import Response
    from twisted.internet.defer import Deferred

    Queued = tuple[Request, Deferred[Response]]
    """A request in a download slot's queue, and what its download fires."""


def pause_problems(downloader: object) -> list[str]:
    """What SlotPauses needs to hold a slot's queue and does not find."""
    problems = []
    if not isinstance(getattr(downloader, "slots", None), dict):
        problems.append("Downloader.slots is missing")
    if not callable(getattr(downloader, "get_slot_key", None)):
        problems.append("Downloader.get_slot_key(request) is missing")
    if not callable(getattr(downloader, "_latercall", None)):
        problems.append("Downloader._latercall(slot) is missing")
    if not isinstance(getattr(downloader, "active", None), set):
        problems.append("Downloader.active is missing")
    return problems + missing_slot_attributes("latercall", "concurrency", "queue")


class SlotPauses(OnDownloader):
    """Download slots held still until a time: nothing queued in them leaves.

    A slot created during a pause (the old one was garbage-collected) has no
    timer: :mod:`scrapy_rep.slowdown` holds it again when a request reaches it.
    """

    problems = staticmethod(pause_problems)

    def concurrency(self, key: str, default: int) -> int:
        """The slot's own concurrency (``default`` if it has no slot now)."""
        slot = self._slot(key)
        return default if slot is None else max(int(slot.concurrency), 1)

    def hold(self, key: str, until: float) -> _timers.Timer | None:
        """Nothing queued in slot ``key`` leaves before ``until`` (monotonic):
        the timer that holds it now (then lets the downloader go on as its own
        timer would), None if the downloader has no such slot."""
        slot = self._slot(key)
        if slot is None:
            return None
        if slot.latercall is not None:
            slot.latercall.cancel()  # the delay's timer, or an earlier end: the pause ends later
        call = _timers.call_later(max(until - _clock.monotonic(), 0.0), self._release, slot)
        slot.latercall = call  # type: ignore[assignment]  # Scrapy only tests and cancel()s it
        return call

    def holds(self, key: str, timer: _timers.Timer | None) -> bool:
        """True while slot ``key`` is held by ``timer`` (its latercall)."""
        slot = self._slot(key) if timer is not None else None
        return slot is not None and _held_by(slot, timer)

    def take_queued(self, key: str) -> list[Queued]:
        """Take the requests queued in slot ``key`` out of its queue, for
        :meth:`requeue` to give back a few at a time (a slot sends everything
        queued in one go, whatever its concurrency). The downloader keeps them
        active meanwhile."""
        slot = self._slot(key)
        if slot is None or not slot.queue:
            return []
        queued = list(slot.queue)
        slot.queue.clear()
        return queued

    def requeue(self, key: str, queued: Queued, reason: str | IgnoreRequest | None = None) -> bool:
        """Give back a request taken by :meth:`take_queued`; with a ``reason``
        (the spider closes; or the exception to end it with: its origin is
        stopped), end it with IgnoreRequest instead if the downloader counts it
        as active (see :meth:`drop_queued`). True if it was ended."""
        downloader = self._downloader or self._bind()
        assert downloader is not None  # take_queued found it
        request, waiter = queued
        slot = downloader.slots.get(key)
        if slot is None or (reason is not None and request in downloader.active):
            if isinstance(reason, IgnoreRequest):
                waiter.errback(reason)
            else:
                waiter.errback(IgnoreRequest(f"{reason or 'its download slot is gone'}: {request}"))
            return True
        slot.queue.append(queued)
        downloader._process_queue(slot)
        return False

    def drop_queued(self, key: str, reason: str, timer: _timers.Timer | None) -> int:
        """The spider closes during a pause: end the requests queued in slot ``key``
        with IgnoreRequest if ``timer`` holds it (else they would wait it out); how many."""
        slot = self._slot(key)
        if slot is None or timer is None or not _held_by(slot, timer):
            return 0
        # Only requests the downloader counts as active: it removes them from
        # there when they fail. One taken out (a robots.txt download) goes back
        # when the downloader signals it left, which it never would here.
        assert self._downloader is not None  # _slot found it
        active = self._downloader.active
        queued = list(slot.queue)
        dropped = [(request, waiter) for request, waiter in queued if request in active]
        slot.queue.clear()
        slot.queue.extend(entry for entry in queued if entry[0] not in active)
        for request, waiter in dropped:
            waiter.errback(IgnoreRequest(f"{reason}: {request}"))
        return len(dropped)

    def _release(self, slot: Slot) -> None:
        assert self._downloader is not None
        self._downloader._latercall(slot)  # clears latercall, sends what the delay allows


def _held_by(slot: Slot, timer: _timers.Timer | None) -> bool:
    """Whether ``timer`` (set by :meth:`SlotPauses.hold`) is the slot's latercall."""
    latercall: object = slot.latercall  # a Timer, which Scrapy's type does not allow
    return latercall is timer
