"""What a download slot can take now, read off Scrapy's downloader: for the frontier.

The frontier hands a request out only when its download slot can start it at
once: that takes the requests the slot holds (``Slot.active``), its
concurrency, its delay (each from the slot, else its ``DOWNLOAD_SLOTS`` entry,
else the setting) and when it last started a request (``Slot.lastseen``, on
:data:`scrapy_rep._compat.SLOT_CLOCK`). Requests handed out but still in the
middlewares are the ledger's (:meth:`~scrapy_rep._slots.ledger.Ledger.out`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_rep._compat import SLOT_CLOCK
from scrapy_rep._slots.active import OnDownloader, missing_slot_attributes

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from scrapy import Request
    from scrapy.crawler import Crawler


def readiness_problems(downloader: object) -> list[str]:
    """What :class:`SlotReadiness` needs from Scrapy's downloader and does not find."""
    problems = []
    for name, kind in (("slots", dict), ("per_slot_settings", dict), ("active", set)):
        if not isinstance(getattr(downloader, name, None), kind):
            problems.append(f"Downloader.{name} is not a {kind.__name__}")
    if not isinstance(getattr(downloader, "domain_concurrency", None), int):
        problems.append("Downloader.domain_concurrency is missing")
    if not callable(getattr(downloader, "get_slot_key", None)):
        problems.append("Downloader.get_slot_key(request) is missing")
    return problems + missing_slot_attributes("active", "concurrency", "delay", "lastseen")


class SlotReadiness(OnDownloader):
    """Reads download slots for the frontier; without the internals (logged at
    start), a slot reads as empty, with the settings' concurrency and delay."""

    problems = staticmethod(readiness_problems)

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        self._default_concurrency = max(settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN"), 1)
        self._default_delay = settings.getfloat("DOWNLOAD_DELAY")

    def holding(self, key: str) -> AbstractSet[Request]:
        """The requests slot ``key`` holds now: queued in it or transferring."""
        slot = self._slot(key)
        return slot.active if slot is not None else _NONE

    def concurrency(self, key: str) -> int:
        """How many requests slot ``key`` may have out at once."""
        downloader = self._downloader or self._bind()
        if downloader is None:
            return self._default_concurrency
        slot = downloader.slots.get(key)
        if slot is not None:
            return max(int(slot.concurrency), 1)
        own = downloader.per_slot_settings.get(key, {})
        return max(int(own.get("concurrency", downloader.domain_concurrency)), 1)

    def delay(self, key: str) -> float:
        """Slot ``key``'s delay between request starts (jitter aside)."""
        downloader = self._downloader or self._bind()
        if downloader is None:
            return self._default_delay
        slot = downloader.slots.get(key)
        if slot is not None:
            return float(slot.delay)
        own: dict[str, Any] = downloader.per_slot_settings.get(key, {})
        return float(own.get("delay", self._default_delay))

    def since_start(self, key: str) -> float | None:
        """Seconds since slot ``key`` last started a request (None: it has no slot
        or never started one)."""
        slot = self._slot(key)
        if slot is None or not slot.lastseen:
            return None
        return float(SLOT_CLOCK() - slot.lastseen)


_NONE: frozenset[Any] = frozenset()
