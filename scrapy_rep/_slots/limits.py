"""At most a download slot's concurrency of requests in flight, on every reactor.

On the asyncio reactor ``Downloader._process_queue`` starts every request
queued in a slot in one loop turn, before any counts as transferring: requests
that enter a slot together all go at once (40 released by their robots.txt
reached a ``CONCURRENT_REQUESTS_PER_DOMAIN = 2`` site 14 at a time).
:class:`SlotLimits` keeps the count itself, for the requests leaving the robots
middleware that no scrapy-rep queue handed out (those hold the slot
themselves): docs/crawl-delay.md, "At most the slot's concurrency in flight".
A request that may go costs a few dict lookups, about 1 microsecond.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.core.downloader import Downloader
from scrapy.exceptions import IgnoreRequest
from twisted.internet.defer import Deferred

from scrapy_rep._slots.active import OnDownloader, engine_closing, missing_slot_attributes

if TYPE_CHECKING:
    from collections.abc import Coroutine
    from urllib.parse import ParseResult

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from scrapy_rep._slots.waiting import Waiting

MAX_HOSTS = 10_000
"""Host names remembered by network location (then forgotten all at once)."""


def limit_problems(downloader: object) -> list[str]:
    """What SlotLimits needs from Scrapy's downloader and does not find."""
    problems = []
    for name in ("slots", "per_slot_settings"):
        if not isinstance(getattr(downloader, name, None), dict):
            problems.append(f"Downloader.{name} is missing")
    if not callable(getattr(downloader, "get_slot_key", None)):
        problems.append("Downloader.get_slot_key(request) is missing")
    for name in ("domain_concurrency", "ip_concurrency"):
        if not isinstance(getattr(downloader, name, None), int):
            problems.append(f"Downloader.{name} is missing")
    return problems + missing_slot_attributes("concurrency", "active")


class SlotLimits(OnDownloader):
    """Places per download slot for requests leaving the robots middleware
    (see the module docstring)."""

    problems = staticmethod(limit_problems)

    def __init__(self, crawler: Crawler, stats: StatsCollector, waiting: Waiting) -> None:
        super().__init__(crawler)
        self._stats = stats
        self._waiting = waiting
        self._out: dict[str, int] = {}  # slot key -> places taken (no entry: none)
        self._held: dict[str, deque[tuple[Request, Deferred[bool]]]] = {}
        self._by_host = False  # slot key = host name (no download_slot meta), set by _bind
        self._hosts: dict[str, str] = {}  # URL netloc -> host name, while _by_host
        self._ledger = waiting.ledger
        self._handed = self._ledger.handed
        self._ledger.track(self._done)
        crawler.signals.connect(self._stopped, signal=signals.engine_stopped)

    def admit(
        self, request: Request, url: ParseResult | None = None
    ) -> Coroutine[Any, Any, None] | None:
        """None if ``request`` may go now (it takes a place of its slot), else a
        coroutine that waits for one (IgnoreRequest if the spider closes). ``url``:
        its URL, parsed already (host names are read once per network location)."""
        handed = self._handed
        if handed and request in handed:  # its scheduler queue holds the slot's concurrency
            return None
        downloader = self._downloader
        if downloader is None:
            downloader = self._bind()
            if downloader is None:
                return None
        key = request.meta.get("download_slot")
        if key is None:
            key = self._hosts.get(url.netloc) if url is not None else None
            if key is None:
                key = self._key(downloader, request, url)
        out = self._out.get(key, 0)
        slot = downloader.slots.get(key)
        limit = slot.concurrency if slot is not None else self._new_limit(downloader, key)
        if out < limit and key not in self._held:
            self._out[key] = out + 1
            self._ledger.let_go(request, key)
            return None
        wake: Deferred[bool] = Deferred()
        self._held.setdefault(key, deque()).append((request, wake))  # in arrival order
        return self._wait(request, key, wake)

    def _key(self, downloader: Downloader, request: Request, url: ParseResult | None) -> str:
        """Scrapy's slot key for ``request`` (without a download_slot meta)."""
        if url is None or not self._by_host:
            return downloader.get_slot_key(request)
        if len(self._hosts) >= MAX_HOSTS:
            self._hosts.clear()
        key = self._hosts[url.netloc] = url.hostname or ""
        return key

    def _bind(self) -> Downloader | None:
        downloader = super()._bind()
        # Scrapy's own keys, read without it: the host name, unless a slot per
        # IP address or a Downloader of the project's own keys otherwise.
        self._by_host = (
            downloader is not None
            and not downloader.ip_concurrency
            and getattr(type(downloader), "get_slot_key", None) is Downloader.get_slot_key
        )
        return downloader

    def _limit(self, downloader: Downloader, key: str) -> int:
        slot = downloader.slots.get(key)
        return int(slot.concurrency) if slot is not None else self._new_limit(downloader, key)

    @staticmethod
    def _new_limit(downloader: Downloader, key: str) -> int:
        """The concurrency Scrapy gives a new slot ``key``."""
        own = downloader.per_slot_settings.get(key, {}).get("concurrency")
        if own is None:
            own = downloader.ip_concurrency or downloader.domain_concurrency
        return max(int(own), 1)

    async def _wait(self, request: Request, key: str, wake: Deferred[bool]) -> None:
        self._stats.inc_value("rep/slot_limit/held")
        if not await self._waiting.woken(request, wake):
            self._stats.inc_value("rep/slot_limit/dropped_closing")
            raise IgnoreRequest(
                f"the spider closed while the request waited for a place in "
                f"download slot {key!r}: {request}"
            )

    # -- places freed ----------------------------------------------------------------

    def _done(self, request: Request, key: str, reached: bool) -> None:
        """A place of slot ``key`` is free: the first waiting request takes it."""
        if not reached:
            self._stats.inc_value("rep/slot_limit/not_reached")
        self._count(key, -1)
        held = self._held.get(key)
        if not held:
            return
        if engine_closing(self._crawler.engine):
            self._drop(key)
            return
        downloader = self._downloader
        assert downloader is not None  # it let requests go
        # The counts are written before each wake-up: on Twisted's reactor the
        # woken request runs on at once, into the downloader, maybe back here.
        while held and self._out.get(key, 0) < self._limit(downloader, key):
            request, wake = held.popleft()
            if not held and self._held.get(key) is held:
                del self._held[key]
            if not wake.called:
                self._count(key, 1)
                self._ledger.let_go(request, key)
                wake.callback(True)

    def _count(self, key: str, change: int) -> None:
        out = self._out.get(key, 0) + change
        if out > 0:
            self._out[key] = out
        else:
            self._out.pop(key, None)

    # -- the spider closes --------------------------------------------------------------

    def _drop(self, key: str) -> None:
        for _, wake in self._held.pop(key, ()):
            if not wake.called:
                wake.callback(False)

    def _stopped(self) -> None:
        for key in list(self._held):
            self._drop(key)
