"""A compact memory of unreachable origins' backoff, far larger than the rules cache.

An unreachable origin pushed out of the rules cache must keep its retry time
and failure count, or its next request asks again at once and opens a new
"outage" (docs/robotstxt.md, "When robots.txt is unreachable"). This table
holds 14 bytes per origin in flat arrays: a 64-bit fingerprint (two origins
sharing one, about 1 in 10**9 at a million origins, share a backoff), the
retry time in tenths of a second rounded up, the failure count and the kind
of failure. An origin lives in the emptier of two buckets of :data:`WAYS`
slots its fingerprint names; the arrays double when both are full, up to the
bound, past which it takes the place of the one of them whose retry time
comes first.
"""

from __future__ import annotations

import math
from array import array
from typing import NamedTuple

from scrapy_rep import _clock
from scrapy_rep.origin import Origin

DEFAULT_BOUND = 1_000_000
"""REP_BACKOFF_MAX_ORIGINS's default: 14 MB when full (0.1 % of a crawl that big)."""
WAYS = 8
"""Slots per bucket."""
BYTES_PER_ORIGIN = 8 + 4 + 1 + 1
_FIRST_SLOTS = 1024
_TICK = 0.1  # seconds per unit of retry time
_MAX_TICKS = (1 << 32) - 1  # 13.6 years: later is "never before the crawl ends"
_MAX_SECONDS = _MAX_TICKS * _TICK
_MAX_FAILURES = 255
_MAX_KINDS = 255
_MASK = (1 << 64) - 1


class Backoff(NamedTuple):
    """What the table recalls of one origin."""

    retry_at: float
    """``_clock.now()`` after which its robots.txt may be asked again."""
    failures: int
    reason: str
    """The kind of its latest failure (``HTTP 503``), or "" if not kept."""


class BackoffTable:
    """Origin -> :class:`Backoff`, in :data:`BYTES_PER_ORIGIN` bytes each, for
    ``bound`` origins at most (see the module docstring)."""

    def __init__(self, bound: int) -> None:
        self._capacity = -(-max(bound, 0) // WAYS) * WAYS
        self._epoch = _clock.now()
        self._count = 0
        self._kinds: list[str] = [""]
        self._kind_of: dict[str, int] = {"": 0}
        self._allocate(min(self._capacity, _FIRST_SLOTS))

    def _allocate(self, slots: int) -> None:
        self._buckets = slots // WAYS
        self._fingerprints = array("Q", bytes(8 * slots))  # 0: an empty slot
        self._retry = array("I", bytes(4 * slots))
        self._failures = array("B", bytes(slots))
        self._reason = array("B", bytes(slots))

    @property
    def bound(self) -> int:
        """Origins the table may hold."""
        return self._capacity

    def __len__(self) -> int:
        return self._count

    def remember(self, origin: Origin, retry_at: float, failures: int, reason: str) -> None:
        """Keep ``origin``'s backoff (replacing what was kept of it)."""
        if not self._capacity:
            return
        offset = retry_at - self._epoch
        if not offset > 0:  # (NaN too)
            offset = 0.0
        ticks = min(math.ceil(min(offset, _MAX_SECONDS) / _TICK), _MAX_TICKS)
        self._put(_fingerprint(origin), ticks, min(failures, _MAX_FAILURES), self._kind(reason))

    def pop(self, origin: Origin) -> Backoff | None:
        """``origin``'s backoff, forgotten here (its entry is back in the cache), or None."""
        if not self._count:
            return None
        slot = self._find(_fingerprint(origin))
        if slot is None:
            return None
        kept = Backoff(
            self._epoch + self._retry[slot] * _TICK,
            self._failures[slot],
            self._kinds[self._reason[slot]],
        )
        self._fingerprints[slot] = 0
        self._count -= 1
        return kept

    # -- slots ----------------------------------------------------------------------

    def _bucket_pair(self, fingerprint: int) -> tuple[int, int]:
        """The first slots of the two buckets ``fingerprint`` may live in."""
        buckets = self._buckets
        return fingerprint % buckets * WAYS, (fingerprint >> 32) % buckets * WAYS

    def _find(self, fingerprint: int) -> int | None:
        fingerprints = self._fingerprints
        for first in self._bucket_pair(fingerprint):
            for slot in range(first, first + WAYS):
                if fingerprints[slot] == fingerprint:
                    return slot
        return None

    def _put(self, fingerprint: int, ticks: int, failures: int, kind: int) -> None:
        slot = self._find(fingerprint)
        if slot is None:
            slot = self._free_slot(fingerprint)
            if slot is None and len(self._fingerprints) < self._capacity:
                self._grow()
                slot = self._free_slot(fingerprint)
            if slot is None:  # full: the soonest-over backoff of both buckets gives way
                slot = self._soonest(fingerprint)
            else:
                self._count += 1
        self._fingerprints[slot] = fingerprint
        self._retry[slot] = ticks
        self._failures[slot] = failures
        self._reason[slot] = kind

    def _free_slot(self, fingerprint: int) -> int | None:
        """An empty slot in the emptier of the origin's two buckets (two choices
        keep buckets even: the table fills to ~75 % before one overflows)."""
        fingerprints = self._fingerprints
        best, most = None, 0
        for first in self._bucket_pair(fingerprint):
            empty, count = None, 0
            for slot in range(first, first + WAYS):
                if not fingerprints[slot]:
                    count += 1
                    if empty is None:
                        empty = slot
            if count > most:
                best, most = empty, count
        return best

    def _soonest(self, fingerprint: int) -> int:
        """The slot of the two buckets whose retry time comes first."""
        retry = self._retry
        best = -1
        for first in self._bucket_pair(fingerprint):
            for slot in range(first, first + WAYS):
                if best < 0 or retry[slot] < retry[best]:
                    best = slot
        return best

    def _grow(self) -> None:
        old = (self._fingerprints, self._retry, self._failures, self._reason)
        self._allocate(min(len(self._fingerprints) * 2, self._capacity))
        self._count = 0
        for slot, fingerprint in enumerate(old[0]):
            if fingerprint:
                self._put(fingerprint, old[1][slot], old[2][slot], old[3][slot])

    def _kind(self, reason: str) -> int:
        kind = reason.partition(": ")[0][:200]
        number = self._kind_of.get(kind)
        if number is None:
            if len(self._kinds) > _MAX_KINDS:
                return 0
            number = len(self._kinds)
            self._kinds.append(kind)
            self._kind_of[kind] = number
        return number


def _fingerprint(origin: Origin) -> int:
    """The origin's 64-bit hash (stable within the process), never 0."""
    return hash(origin) & _MASK or 1
