"""``scrapy_rep.BoundedDecompressionMiddleware``: robots.txt answers decoded with a bound.

Scrapy's ``HttpCompressionMiddleware`` (590) inflates every answer up to
``DOWNLOAD_MAXSIZE`` (1 GiB) per coding: a few kilobytes of ``br`` became a
gigabyte in memory. Just after it (595: it sees responses first), this one
decodes scrapy-rep's own robots.txt and tdmrep.json answers with
:mod:`scrapy_rep._inflate`, at most ``REP_MAX_SIZE`` + 1 bytes, then drops
``Content-Encoding`` so Scrapy's leaves the body alone (docs/robotstxt.md,
"Compression"). :func:`problem` tells the fetcher when it is missing or misplaced.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.exceptions import NotConfigured

from scrapy_rep import _compat
from scrapy_rep._context import crawl_context
from scrapy_rep._inflate import Undecodable, decode, ignored
from scrapy_rep._meta_keys import DECODED_META, ROBOTS_META, WELL_KNOWN_META

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

__all__ = ["ORDER", "BoundedDecompressionMiddleware", "problem"]

logger = logging.getLogger(__name__)

ORDER = 595
"""Just after HttpCompressionMiddleware (590), before RedirectMiddleware (600)."""


class BoundedDecompressionMiddleware:
    """Decodes scrapy-rep's robots.txt answers, at most ``REP_MAX_SIZE`` of text."""

    def __init__(self, max_size: int, stats: StatsCollector | None) -> None:
        self.max_size = max_size
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BoundedDecompressionMiddleware:
        config = crawl_context(crawler).config
        if not config.obey:
            raise NotConfigured("ROBOTSTXT_OBEY is off: scrapy-rep fetches no robots.txt")
        return cls(config.max_size, crawler.stats)

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        if ROBOTS_META not in request.meta:
            return response
        values = response.headers.getlist(b"Content-Encoding")
        if not values:
            return response
        well_known = request.meta.get(WELL_KNOWN_META)
        what = "robots.txt" if not well_known else well_known.lstrip("/")
        names = ignored(values)
        if names:
            logger.info(
                "%s at %s names content codings that transform nothing (%s): read as sent",
                what,
                response.url,
                ", ".join(name.decode("latin-1")[:40] for name in names[:5]),
            )
        try:
            # one byte more than REP_MAX_SIZE: the parser then knows the file went on
            body = decode(response.body, values, self.max_size + 1)
        except Undecodable as exc:
            body = b""
            if self.stats is not None:
                self.stats.inc_value(
                    "rep/usage/tdmrep/undecodable" if well_known else "rep/robotstxt/undecodable"
                )
            logger.info(
                "%s at %s cannot be decoded (%s): read as an empty file",
                what,
                response.url,
                exc,
            )
        request.meta[DECODED_META] = ", ".join(v.decode("latin-1") for v in values)
        headers = response.headers.copy()
        del headers[b"Content-Encoding"]
        return response.replace(body=body, headers=headers)


def problem(settings: BaseSettings) -> str | None:
    """Why robots.txt answers would be decoded by Scrapy's middleware, unbounded
    (None when this middleware runs after it)."""
    orders = dict(_compat.downloader_middlewares(settings))
    ours = orders.get(BoundedDecompressionMiddleware)
    scrapys = orders.get(HttpCompressionMiddleware)
    if scrapys is None:
        return None  # nothing inflates answers
    if ours is None:
        return (
            "scrapy_rep.BoundedDecompressionMiddleware is not enabled (the add-on "
            f"enables it at {ORDER})"
        )
    if ours <= scrapys:
        return (
            f"scrapy_rep.BoundedDecompressionMiddleware runs at {ours:g}, not after "
            f"HttpCompressionMiddleware ({scrapys:g})"
        )
    return None
