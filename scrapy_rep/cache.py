"""Where robots.txt rules live between requests.

:class:`RulesCache` is the whole interface the middleware needs: synchronous
``get``/``put`` on the hot path. :class:`MemoryRulesCache` (the default) is an
LRU bounded by ``REP_CACHE_MAX_ORIGINS``; a shared (Redis) cache implements
the same two methods.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from scrapy_rep.origin import Origin
from scrapy_rep.policy import Entry


class RulesCache(Protocol):
    def get(self, origin: Origin) -> Entry | None:
        """The entry of ``origin``, fresh or not, or None if unknown."""

    def put(self, origin: Origin, entry: Entry) -> None:
        """Store (replace) the entry of ``origin``."""


class MemoryRulesCache:
    """In-process LRU of origins' rules; evicts the least recently used."""

    __slots__ = ("_entries", "max_origins")

    def __init__(self, max_origins: int) -> None:
        self.max_origins = max_origins
        self._entries: OrderedDict[Origin, Entry] = OrderedDict()

    def get(self, origin: Origin) -> Entry | None:
        entry = self._entries.get(origin)
        if entry is not None:
            self._entries.move_to_end(origin)
        return entry

    def put(self, origin: Origin, entry: Entry) -> None:
        entries = self._entries
        entries[origin] = entry
        entries.move_to_end(origin)
        while len(entries) > self.max_origins:
            entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
