"""The downloader's active set and the engine's state, for requests that wait in a middleware.

A request waiting inside a downloader middleware (for its robots.txt, a
Crawl-delay turn, a paused slot's gate) is in ``Downloader.active``, so it
counts against ``CONCURRENT_REQUESTS``: :func:`leave_active` takes it out and
wakes the engine (``ExecutionEngine._slot.nextcall``) to fill its place.
:func:`waiting_problems` lists what is missing (logged at start).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from scrapy.utils.httpobj import urlparse_cached

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.core.downloader import Downloader, Slot
    from scrapy.crawler import Crawler


def waiting_problems(engine: Any) -> list[str]:
    """What :mod:`scrapy_rep._slots.waiting` needs from Scrapy's engine and does not find."""
    if engine is None:
        return ["no engine"]
    problems = []
    active = getattr(getattr(engine, "downloader", None), "active", None)
    if not isinstance(active, set):
        problems.append(f"Downloader.active is {type(active).__name__}, expected set")
    slot = getattr(engine, "_slot", None)
    if slot is not None:
        if not callable(getattr(getattr(slot, "nextcall", None), "schedule", None)):
            problems.append("ExecutionEngine._slot.nextcall.schedule() is missing")
        if not hasattr(slot, "closing"):
            problems.append("ExecutionEngine._slot.closing is missing")
    return problems


def leave_active(engine: Any, request: Request) -> bool:
    """Take ``request`` out of the downloader's active set and wake the engine to
    fill its place; False if it was not there (:func:`waiting_problems` empty)."""
    active: set[Request] = engine.downloader.active
    if request not in active:
        return False
    active.discard(request)
    slot = engine._slot
    if slot is not None:
        slot.nextcall.schedule()
    return True


def slot_key(engine: Any, request: Request) -> str:
    """``request``'s download slot key (``Downloader.get_slot_key``); without a
    downloader, its ``download_slot`` meta or host name, as Scrapy would key it."""
    downloader = getattr(engine, "downloader", None)
    if downloader is None:
        slot = request.meta.get("download_slot")
        return str(slot) if slot is not None else urlparse_cached(request).hostname or ""
    key: str = downloader.get_slot_key(request)
    return key


def engine_closing(engine: Any) -> bool:
    """True once the engine has started closing the spider (or has none)."""
    if engine is None:
        return True
    slot = getattr(engine, "_slot", None)
    return slot is None or getattr(slot, "closing", None) is not None


def missing_slot_attributes(*names: str) -> list[str]:
    """Problems naming the ``Slot`` attributes, of ``names``, that Scrapy's
    ``Slot.__init__`` no longer assigns. Its signature differs between
    releases, so the names it assigns are read instead of building one (through
    any wrapper another library put around it)."""
    from scrapy.core.downloader import Slot

    assigned = inspect.unwrap(Slot.__init__).__code__.co_names
    return [f"Slot.{name} is missing" for name in names if name not in assigned]


class OnDownloader:
    """Acts on the running downloader, bound on first use (middlewares are built
    before the engine exists) once ``problems`` finds all it needs there."""

    problems: Callable[[object], list[str]]

    def __init__(self, crawler: Crawler) -> None:
        self._crawler = crawler
        self._downloader: Downloader | None = None
        self._unsupported = False

    def _bind(self) -> Downloader | None:
        if self._unsupported:
            return None
        engine = self._crawler.engine
        if engine is None:
            return None
        downloader = getattr(engine, "downloader", None)
        if type(self).problems(downloader):
            self._unsupported = True
            return None
        self._downloader = downloader
        return downloader

    def _slot(self, key: str) -> Slot | None:
        """The downloader's slot ``key``, if it has one now."""
        downloader = self._downloader or self._bind()
        return downloader.slots.get(key) if downloader is not None else None

    def key(self, request: Request) -> str:
        """The request's download slot key (Scrapy's ``get_slot_key``)."""
        return slot_key(self._crawler.engine, request)
