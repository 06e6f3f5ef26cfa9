"""When the crawler sent each request, as the test servers record it.

A crawl's pacing (Crawl-delay, pauses) decides when Scrapy hands a request to
its download handler. On a busy machine the server's thread may see the
request much later, and gaps measured on arrival shrink or grow with the load,
not with the crawler. ``StampingHandler`` is Scrapy's HTTP handler that writes
the moment of sending (``time.time()``) into a request header; the test
servers (servers.py) record it as the hit's time. Every test crawl uses it
(``SETTINGS``), in process and in subprocesses.
"""

from __future__ import annotations

import time

from scrapy import Request
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.http import Response
from servers import SENT_HEADER

SETTINGS = {"DOWNLOAD_HANDLERS": {"http": "sent_stamp.StampingHandler"}}


class StampingHandler(HTTP11DownloadHandler):
    async def download_request(self, request: Request) -> Response:  # type: ignore[override]
        request.headers[SENT_HEADER] = repr(time.time())
        return await super().download_request(request)
