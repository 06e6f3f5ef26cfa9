"""The readiness of each slot's first request, remembered between pops.

Full slots become candidates again on every pop, so in a broad crawl a slot's
first request is looked at about eight times before it leaves (32,045 looks
for 4,229 pops, 200 origins x 20 pages), each matching the URL against
robots.txt again. The answer is kept per slot while the first request, its
origin's cache entry (a fetch, refresh or eviction stores a new one) and the
origin's stops (a changed pin, a stop signal) are unchanged. UNKNOWN answers
and unreachable origins (whose answer depends on the time) are never kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_rep._robots import UNKNOWN

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_rep._robots import Readiness, RobotsService
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Entry

Found = tuple["Readiness", float, "Origin | None"]


class HeadVerdicts:
    """``robots.readiness(head)`` per slot, kept while it cannot have changed."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[Request, Entry, Found]] = {}

    def readiness(self, robots: RobotsService, slot: str, head: Request) -> Found:
        kept = self._kept.get(slot)
        if kept is not None and kept[0] is head:
            origin = kept[2][2]
            assert origin is not None  # only kept with an origin
            pins, challenges = robots.pins, robots.pacing.challenges
            if (
                robots.cache.get(origin) is kept[1]
                and (pins is None or origin not in pins.stopped)
                and (challenges is None or not challenges.is_stopped(head))
            ):
                return kept[2]
        found = robots.readiness(head)
        origin = found[2]
        entry = robots.cache.get(origin) if origin is not None and found[0] != UNKNOWN else None
        if entry is not None and entry.robots is not None:
            self._kept[slot] = (head, entry, found)
        elif kept is not None:
            del self._kept[slot]
        return found

    def forget(self, slot: str) -> None:
        """``slot``'s queue is gone."""
        self._kept.pop(slot, None)

    def clear(self) -> None:
        self._kept.clear()
