"""Spider middleware obeying page-level robots directives (docs/page-directives.md).

``nofollow`` drops the requests a callback yields from the page; ``noindex``
sets ``response.meta["rep_noindex"]`` and, with ``REP_META_NOINDEX = "drop"``,
drops its items. Part of obeying robots: off when ``ROBOTSTXT_OBEY`` is.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse, Response, TextResponse

from scrapy_rep import _clock
from scrapy_rep._context import crawl_context
from scrapy_rep._page_directives import (
    MAX_TAGS,
    NO_DIRECTIVES,
    Directives,
    header_directives,
    parse_rules,
    robots_meta_tags,
)
from scrapy_rep.config import Config

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

__all__ = ["MetaRobotsMiddleware"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Page:
    """What one response's directives mean for its callback's output."""

    nofollow: str | None  # why its requests are dropped, None to keep them
    noindex: str | None  # why it is noindex (now), None when indexable


class MetaRobotsMiddleware:
    """Obeys ``nofollow``, ``none``, ``noindex`` and ``unavailable_after`` of each page."""

    def __init__(self, crawler: Crawler, config: Config) -> None:
        self.crawler = crawler
        self.user_agent: str = config.user_agent
        self.drop_noindex: bool = config.meta_noindex == "drop"
        # <meta name="robots"> speaks to every crawler, <meta name="examplebot"> to ours alone
        self._meta_names = frozenset({"robots", self.user_agent.strip().lower()} - {""})
        # one evaluation per response, shared by process_spider_input and _output
        self._pages: WeakKeyDictionary[Response, _Page | None] = WeakKeyDictionary()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MetaRobotsMiddleware:
        config = crawl_context(crawler).config
        if not config.obey:
            raise NotConfigured("ROBOTSTXT_OBEY is off: page directives are not obeyed either")
        if not config.meta_robots:
            raise NotConfigured("REP_META_ROBOTS is off")
        return cls(crawler, config)

    def process_spider_input(self, response: Response, spider: Spider | None = None) -> None:
        # before the callback runs, so it can read response.meta["rep_noindex"]
        self._page(response)

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Spider | None = None
    ) -> Iterable[Any]:
        page = self._page(response)
        for output in result:
            if page is None or self._admit(output, response, page):
                yield output

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        page = self._page(response)
        async for output in result:
            if page is None or self._admit(output, response, page):
                yield output

    def _page(self, response: Response) -> _Page | None:
        """The response's evaluated directives; None when it opted out."""
        if response not in self._pages:
            self._pages[response] = self._evaluate(response)
        return self._pages[response]

    def _evaluate(self, response: Response) -> _Page | None:
        meta = _request_meta(response)
        # rep_sitemap: sitemaps often send X-Robots-Tag: noindex, nofollow to stay out of
        # search results, which says nothing about crawling the pages they list
        if meta is None or meta.get("dont_obey_robotstxt") or meta.get("rep_sitemap"):
            return None
        sources: list[tuple[str, Directives]] = []
        capped = ""
        if is_html(response):
            assert isinstance(response, TextResponse)
            tags = robots_meta_tags(response.text, names=self._meta_names)
            for name, content in tags:
                sources.append((f'<meta name="{name}">', parse_rules(content)))
            capped = tags.capped
        headers = response.headers.getlist(b"X-Robots-Tag")
        if headers:
            if len(headers) > MAX_TAGS:
                capped = capped or f"more than {MAX_TAGS} X-Robots-Tag values: the first read"
            values = [v.decode("latin-1") for v in headers[:MAX_TAGS]]
            sources.append(("X-Robots-Tag", header_directives(values, user_agent=self.user_agent)))
        if capped:  # read up to a bound (docs/page-directives.md)
            self.crawler.stats.inc_value("rep/meta/capped")
            logger.debug(
                "Directives of %(page)s read in part: %(why)s",
                {"page": response, "why": capped},
                extra={"spider": self.crawler.spider},
            )

        directives = NO_DIRECTIVES
        for _, found in sources:
            directives = directives.merge(found)
        now = datetime.fromtimestamp(_clock.now(), timezone.utc)
        page = _Page(
            nofollow=_reason(sources, "nofollow", lambda d: d.nofollow),
            noindex=(
                _reason(sources, "noindex", lambda d: d.noindex)
                or _reason(
                    sources,
                    f"unavailable_after {_iso(directives.unavailable_after)}, now past",
                    lambda d: d.expired(now),
                )
            ),
        )
        meta["rep_noindex"] = page.noindex is not None
        meta["rep_directives"] = directives
        stats = self.crawler.stats
        if page.nofollow:
            stats.inc_value("rep/meta/nofollow_pages")
        if page.noindex:
            stats.inc_value("rep/meta/noindex_pages")
        return page

    def _admit(self, output: Any, response: Response, page: _Page) -> bool:
        """Whether one object of the callback's output may go on."""
        if isinstance(output, Request):
            if page.nofollow is None or output.meta.get("dont_obey_robotstxt"):
                return True
            self.crawler.stats.inc_value("rep/meta/nofollow_dropped")
            logger.debug(
                "Dropped %(request)s found on %(page)s: the page says %(reason)s",
                {"request": output, "page": response, "reason": page.nofollow},
                extra={"spider": self.crawler.spider},
            )
            return False
        if page.noindex is None or not self.drop_noindex:
            return True
        self.crawler.stats.inc_value("rep/meta/noindex_dropped")
        logger.debug(
            "Dropped an item from %(page)s: the page says %(reason)s (REP_META_NOINDEX = 'drop')",
            {"page": response, "reason": page.noindex},
            extra={"spider": self.crawler.spider},
        )
        return False


def _request_meta(response: Response) -> dict[str, Any] | None:
    try:
        meta: dict[str, Any] = response.meta
    except AttributeError:  # a response not tied to a request has nowhere to say so
        return None
    return meta


def _iso(date: datetime | None) -> str:
    return date.isoformat() if date else ""


def is_html(response: Response) -> bool:
    """Whether a response is an HTML page (where meta tags are read)."""
    if isinstance(response, HtmlResponse):
        return True
    if not isinstance(response, TextResponse):
        return False
    content_type = response.headers.get(b"Content-Type") or b""
    return b"html" in content_type.lower()


def _reason(
    sources: list[tuple[str, Directives]], rule: str, says: Callable[[Directives], bool]
) -> str | None:
    """``"nofollow (X-Robots-Tag)"``: the rule and every source stating it; None if none."""
    where = list(dict.fromkeys(source for source, directives in sources if says(directives)))
    return f"{rule} ({', '.join(where)})" if where else None
