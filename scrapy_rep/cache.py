"""Where robots.txt rules live between requests: :class:`RulesCache`, synchronous
``get``/``put`` on the hot path (a shared Redis cache implements the same two).

:class:`MemoryRulesCache` is an LRU bounded by ``REP_CACHE_MAX_ORIGINS``; an
unreachable origin pushed out keeps only its backoff
(:mod:`scrapy_rep._backoff_table`) until it answers again.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol, TypeVar

from scrapy_rep import _clock
from scrapy_rep._backoff_table import DEFAULT_BOUND, BackoffTable
from scrapy_rep.origin import Origin
from scrapy_rep.policy import UNREACHABLE, Entry

__all__ = ["MemoryRulesCache", "RulesCache", "lru_put"]

K = TypeVar("K")
V = TypeVar("V")


def lru_put(table: OrderedDict[K, V], key: K, value: V, bound: int) -> None:
    """Store ``key`` as ``table``'s most recent entry, forgetting the least
    recent past ``bound``: every per-origin or per-slot table stays bounded."""
    table[key] = value
    table.move_to_end(key)
    while len(table) > bound:
        table.popitem(last=False)


class RulesCache(Protocol):
    def get(self, origin: Origin) -> Entry | None:
        """The entry of ``origin``, fresh or not, or None if unknown."""

    def put(self, origin: Origin, entry: Entry) -> None:
        """Store (replace) the entry of ``origin``."""


class MemoryRulesCache:
    """In-process LRU of origins' rules; evicts the least recently used."""

    __slots__ = ("_backoffs", "_entries", "max_origins")

    def __init__(self, max_origins: int, backoff_origins: int = DEFAULT_BOUND) -> None:
        self.max_origins = max_origins
        self._entries: OrderedDict[Origin, Entry] = OrderedDict()
        # Evicted unreachable origins (REP_BACKOFF_MAX_ORIGINS of them)
        self._backoffs = BackoffTable(backoff_origins)

    def get(self, origin: Origin) -> Entry | None:
        entry = self._entries.get(origin)
        if entry is not None:
            self._entries.move_to_end(origin)
            return entry
        if self._backoffs:
            return self._backoff(origin)
        return None

    def put(self, origin: Origin, entry: Entry) -> None:
        entries = self._entries
        entries[origin] = entry
        entries.move_to_end(origin)
        if self._backoffs:
            self._backoffs.pop(origin)
        while len(entries) > self.max_origins:
            evicted, old = entries.popitem(last=False)
            if old.failed:  # its backoff over or not: its failures count on
                self._backoffs.remember(evicted, old.expires, old.failures, old.reason)

    def _backoff(self, origin: Origin) -> Entry | None:
        """An evicted origin's backoff, back in the LRU (expired or not: the
        next fetch counts its failures on)."""
        kept = self._backoffs.pop(origin)
        if kept is None:
            return None
        # (when it failed is not kept: it only matters for last good rules, not kept either)
        entry = Entry(None, UNREACHABLE, kept.retry_at, _clock.now(), kept.failures, kept.reason)
        self.put(origin, entry)
        return entry

    def __len__(self) -> int:
        return len(self._entries)
