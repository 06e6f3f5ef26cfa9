"""Crawl sites by following their links, recording what robots.txt dropped."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.http import Response
from twisted.python.failure import Failure


class LinksSpider(scrapy.Spider):
    """``scrapy crawl links -a urls=URL[,URL...]``: start from each URL and
    follow every link that stays on one of the start URLs' origins.

    Yields one item per page fetched (``kind: page``, with the links it
    follows and whether the page asked not to be indexed) and one per request
    that was dropped (``kind: dropped``, with the exception and, when
    robots.txt forbade it, the deciding line and rule; when robots.txt was
    unreachable, the reason).

    Page-level directives need no code here: scrapy-rep's MetaRobotsMiddleware
    drops the requests yielded from a page that says ``nofollow`` (counted in
    ``rep/meta/nofollow_dropped``), and sets ``response.meta["rep_noindex"]``
    before ``parse`` runs.
    """

    name = "links"

    def __init__(self, urls: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = [url.strip() for url in urls.split(",") if url.strip()]
        if not self.urls:
            raise ValueError("give the start URLs: -a urls=URL[,URL...]")
        self.origins = {_origin(url) for url in self.urls}

    async def start(self) -> AsyncIterator[scrapy.Request]:
        for url in self.urls:
            yield scrapy.Request(url, callback=self.parse, errback=self.dropped)

    def parse(self, response: Response) -> Iterator[Any]:
        links = [
            url
            for url in dict.fromkeys(map(response.urljoin, response.css("a::attr(href)").getall()))
            if _origin(url) in self.origins
        ]
        yield {
            "kind": "page",
            "url": response.url,
            "status": response.status,
            "title": response.css("title::text").get(),
            # True: the page said noindex to us; the item is kept, the choice is yours
            "noindex": response.meta.get("rep_noindex"),
            "links": links,
        }
        for url in links:
            yield scrapy.Request(url, callback=self.parse, errback=self.dropped)

    def dropped(self, failure: Failure) -> Iterator[dict[str, Any]]:
        request = failure.request  # type: ignore[attr-defined]
        error = failure.value
        decision = getattr(error, "decision", None)
        yield {
            "kind": "dropped",
            "url": request.url,
            "exception": f"{type(error).__module__}.{type(error).__qualname__}",
            "message": str(error),
            "line": getattr(decision, "line", None),
            "rule": getattr(decision, "rule", None),
            "reason": getattr(error, "reason", None),  # RobotsTxtUnavailable's
        }


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
