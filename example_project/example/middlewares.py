"""Downloader middlewares of the example project."""

from __future__ import annotations

from scrapy import Request, Spider
from scrapy.utils.httpobj import urlparse_cached


class SlotPerOriginMiddleware:
    """Give every origin (host and port) its own download slot.

    Scrapy keys download slots by hostname alone, so the demo site's origins,
    which are ports of 127.0.0.1, would share one slot and one Crawl-delay.
    Real sites have distinct hostnames and do not need this.
    """

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        request.meta.setdefault("download_slot", urlparse_cached(request).netloc)
