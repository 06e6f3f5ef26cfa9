"""When the crawler sent each request, as the test servers record it.

A crawl's pacing (Crawl-delay, pauses) decides when a request's download slot
lets it go (Scrapy's ``Slot.lastseen``). On a busy machine the download
handler may run a few tenths of a second later, and the server's thread later
still: gaps measured on arrival shrink or grow with the load, not with the
crawler. ``StampingHandler`` is Scrapy's HTTP handler that writes the moment
the slot let the request go into a request header (wall-clock seconds); the
test servers (servers.py) record it as the hit's time. Every test crawl uses
it (``SETTINGS``), in process and in subprocesses.
"""

from __future__ import annotations

import time

from scrapy import Request
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.crawler import Crawler
from scrapy.http import Response
from servers import SENT_HEADER

SETTINGS = {"DOWNLOAD_HANDLERS": {"http": "sent_stamp.StampingHandler"}}


class StampingHandler(HTTP11DownloadHandler):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._crawler = crawler

    async def download_request(self, request: Request) -> Response:  # type: ignore[override]
        request.headers[SENT_HEADER] = repr(self._let_go_at(request))
        return await super().download_request(request)

    def _let_go_at(self, request: Request) -> float:
        now = time.time()
        downloader = getattr(self._crawler.engine, "downloader", None)
        slots = getattr(downloader, "slots", {})
        slot = slots.get(request.meta.get("download_slot"))
        seen = getattr(slot, "lastseen", 0)
        if not seen:
            return now
        if seen > 1e9:  # Scrapy < 2.19: time.time()
            return float(seen)
        return now - (time.monotonic() - seen)  # Scrapy 2.19: time.monotonic()
