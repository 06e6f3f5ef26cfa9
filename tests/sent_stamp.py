"""When the crawler sent each request, as the test servers record it.

A crawl's pacing (Crawl-delay, pauses, slot concurrency) decides when a
request's download slot lets it go. On a busy machine the download handler may
run a second later, and the server's thread later still: gaps measured on
arrival shrink or grow with the load, not with the crawler. So the test crawls
note the moment a slot's queue lets a request go (``Slot.queue.popleft``), and
``StampingHandler``, Scrapy's HTTP handler, writes it into a request header;
the test servers (servers.py) record it as the hit's time. Every test crawl
uses it (``SETTINGS``), in process and in subprocesses. The stamps are in
scrapy-rep's time (``_clock.now()``): wall-clock time, plus what a test moved
that clock forward (``rep_clock``), so a test of a rule of time compares them
with the time the rule saw.
"""

from __future__ import annotations

import functools
from collections import deque
from typing import Any

from scrapy import Request
from scrapy.core.downloader import Slot
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.http import Response
from servers import SENT_HEADER

from scrapy_rep import _clock

SETTINGS = {"DOWNLOAD_HANDLERS": {"http": "sent_stamp.StampingHandler"}}
_LET_GO = "_test_let_go_at"


class _StampingQueue(deque):  # type: ignore[type-arg]
    """A download slot's queue that notes when it lets each request go."""

    def popleft(self) -> Any:
        request, deferred = super().popleft()
        request.meta[_LET_GO] = _clock.now()
        return request, deferred


def _stamping_slot_init(init: Any) -> Any:
    @functools.wraps(init)
    def __init__(self: Slot, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.queue = _StampingQueue(self.queue)

    return __init__


if not getattr(Slot.__init__, "_stamping", False):
    Slot.__init__ = _stamping_slot_init(Slot.__init__)  # type: ignore[method-assign]
    Slot.__init__._stamping = True  # type: ignore[attr-defined]


def let_go_at(request: Request) -> float | None:
    """When ``request``'s download slot let it go (scrapy-rep's ``_clock.now()``:
    ``time.time()`` unless the test moved that clock), if stamped."""
    stamp = request.meta.get(_LET_GO)
    return float(stamp) if stamp is not None else None


TRANSFERS: set[Request] = set()
"""The requests being downloaded now, by every test crawl of the process: a
test that moves scrapy-rep's clock waits until their answers are in (an
answer the crawler gets later than it would have in real time starts its
pause later)."""


class StampingHandler(HTTP11DownloadHandler):
    async def download_request(self, request: Request) -> Response:  # type: ignore[override]
        request.headers[SENT_HEADER] = repr(request.meta.get(_LET_GO) or _clock.now())
        TRANSFERS.add(request)
        try:
            return await super().download_request(request)
        finally:
            TRANSFERS.discard(request)
