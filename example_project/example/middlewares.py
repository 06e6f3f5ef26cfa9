"""Middlewares of the example project."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from scrapy import Request, Spider
from scrapy.http import Response
from scrapy.utils.httpobj import urlparse_cached


def _own_slot(item_or_request: Any) -> Any:
    if isinstance(item_or_request, Request):
        item_or_request.meta.setdefault("download_slot", urlparse_cached(item_or_request).netloc)
    return item_or_request


class SlotPerOriginMiddleware:
    """Give every origin (host and port) its own download slot.

    Scrapy keys download slots by hostname alone, so the demo site's origins,
    which are ports of 127.0.0.1, would share one slot and one Crawl-delay.
    Real sites have distinct hostnames and do not need this.

    Enabled twice: as a spider middleware it names the slot of each request the
    spider yields, before the scheduler's queue (scrapy-rep's) files it under
    its slot; as a downloader middleware, of the requests that skip the
    scheduler (robots.txt fetches).
    """

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for item_or_request in start:
            yield _own_slot(item_or_request)

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Spider | None = None
    ) -> Iterator[Any]:
        for item_or_request in result:
            yield _own_slot(item_or_request)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        async for item_or_request in result:
            yield _own_slot(item_or_request)

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        _own_slot(request)
