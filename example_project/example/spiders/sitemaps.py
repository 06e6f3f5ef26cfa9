"""Crawl the pages that sites list in the sitemaps named by their robots.txt."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.http import Response

from scrapy_rep import RobotsSitemapSpider


class SitemapsSpider(RobotsSitemapSpider):
    """``scrapy crawl sitemaps -a sitemap_sites=URL[,URL...]``: for each site,
    take the ``Sitemap:`` lines of its robots.txt (the one scrapy-rep fetches
    for its rules anyway: one download per site), follow them through sitemap
    indexes, gzipped and plain-text sitemaps, and fetch every page they list
    that robots.txt allows.

    Yields one item per page (``kind: page``). The page requests come from
    Scrapy's sitemap code, which gives them no errback: those robots.txt
    forbids are counted in ``rep/forbidden``, told at INFO and in the report
    at spider close, and written to ``REP_REPORT`` when set.
    """

    name = "sitemaps"
    # Scrapy's default sitemap_rules send every listed page to parse();
    # sitemap_rules, sitemap_follow and sitemap_filter narrow it as usual

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.sitemap_sites and not self.sitemap_discover:
            raise ValueError("give the sites: -a sitemap_sites=URL[,URL...]")

    def parse(self, response: Response, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield {
            "kind": "page",
            "url": response.url,
            "status": response.status,
            "title": response.css("title::text").get(),
            "noindex": response.meta.get("rep_noindex"),
        }
