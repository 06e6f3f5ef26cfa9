"""Told when a request leaves the downloader: for the frontier's full slots and Crawl-delay holds.

Scrapy signals ``request_left_downloader`` while the request is still in its
slot's ``active`` set, and nothing for one that never reaches its slot (a
cache hit, a request a middleware drops). What every request does last is
leave ``Downloader.active`` (``Downloader.fetch`` removes it), so
:class:`Departures` replaces that set with one that reports each request
leaving it: by ``remove`` (done with the downloader, ``final``) or by
``discard`` (detached to wait in a middleware). Others told of the final
departures (:func:`follow_departures`) are called directly from the set: a
``request_left_downloader`` receiver costs every request about 30,000
instructions, most of it Scrapy's dispatch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger("scrapy_rep._slots")


def departure_problems(downloader: object) -> list[str]:
    """What :class:`Departures` needs from Scrapy's downloader and does not find."""
    active = getattr(downloader, "active", None)
    if not isinstance(active, set):
        return [f"Downloader.active is {type(active).__name__}, expected set"]
    return []


class _ReportingSet(set["Request"]):
    """``Downloader.active`` that reports each request leaving it."""

    __slots__ = ("_failed", "_finals", "_parted", "_report")

    def __init__(self, requests: Iterable[Request], report: Callable[[Request, bool], None]):
        super().__init__(requests)
        self._report = report
        self._finals: list[Callable[[Request], None]] = []
        self._parted: dict[Request, Callable[[Request], None]] = {}
        self._failed = False

    def remove(self, request: Request) -> None:
        parted = self._parted.pop(request, None) if self._parted else None
        if parted is None:
            super().remove(request)
        else:  # taken out by part(): not put back before Scrapy removes it
            super().discard(request)
            self._safely(parted, request)
        self._tell(request, final=True)

    def discard(self, request: object) -> None:
        if request in self:
            super().discard(request)
            self._tell(cast("Request", request), final=False)

    def _tell(self, request: Request, *, final: bool) -> None:
        self._safely(self._report, request, final)
        if final:
            for told in self._finals:
                self._safely(told, request)

    def _safely(self, told: Callable[..., None], *args: object) -> None:
        # Runs inside Scrapy's fetch: whatever goes wrong here must not reach it.
        try:
            told(*args)
        except Exception:
            if not self._failed:
                self._failed = True
                logger.exception(
                    "A request leaving the downloader was not passed on to the frontier "
                    "(its slot is looked at again within a second)"
                )


def follow_departures(downloader: object, told: Callable[[Request], None]) -> bool:
    """Have ``told`` called with each request leaving ``downloader``'s active set
    for good; False if the frontier does not watch it (Scrapy's signals tell)."""
    active = getattr(downloader, "active", None)
    if not isinstance(active, _ReportingSet):
        return False
    active._finals.append(told)
    return True


def watched(downloader: object) -> bool:
    """Whether the frontier watches ``downloader``'s active set (:func:`part` works)."""
    return isinstance(getattr(downloader, "active", None), _ReportingSet)


def part(downloader: object, request: Request, told: Callable[[Request], None]) -> None:
    """``request``, taken out of the watched active set, stays out until
    Scrapy's fetch removes it; then ``told(request)``. Its owner needs no
    ``request_left_downloader`` receiver to put it back first (one costs each
    request downloaded meanwhile about 23,000 instructions)."""
    active = getattr(downloader, "active", None)
    assert isinstance(active, _ReportingSet)  # watched() said so
    active._parted[request] = told


class Departures:
    """Reports requests leaving ``Downloader.active`` (see the module docstring)."""

    def __init__(self, crawler: Crawler, report: Callable[[Request, bool], None]) -> None:
        self._crawler = crawler
        self._report = report
        self._watched: _ReportingSet | None = None
        self._downloader: object = None

    def install(self) -> list[str]:
        """Watch the running downloader's active set; what is missing, if anything."""
        downloader = getattr(self._crawler.engine, "downloader", None)
        problems = departure_problems(downloader)
        if problems:
            return problems
        active = _ReportingSet(downloader.active, self._report)  # type: ignore[union-attr]
        downloader.active = active  # type: ignore[union-attr]
        self._watched = active
        self._downloader = downloader
        return []

    @property
    def watching(self) -> bool:
        """True while departures are reported (the downloader's set is still ours)."""
        watched = self._watched
        return watched is not None and getattr(self._downloader, "active", None) is watched
