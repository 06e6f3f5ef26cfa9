"""Sitemaps from robots.txt for spiders: ``RobotsSitemapSpider`` and its mixin (docs/sitemaps.md).

The ``Sitemap:`` lines come from the robots service's entry of each site (one
fetch per origin, shared with the rules), and each sitemap is parsed by
Scrapy's own ``SitemapSpider`` helpers, so its attributes keep their meaning.
Without the middleware (``ROBOTSTXT_OBEY = False``), the spider downloads
robots.txt itself, for its Sitemap lines only.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from scrapy import Request, signals
from scrapy.spiders import SitemapSpider
from scrapy.spiders.sitemap import iterloc
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.sitemap import Sitemap
from twisted.python.failure import Failure

from scrapy_rep import _compat
from scrapy_rep import signals as rep_signals
from scrapy_rep._robots import RobotsService, robots_off, robots_service
from scrapy_rep.exceptions import ForbiddenByRobots
from scrapy_rep.origin import Origin, origin_of
from scrapy_rep.robotstxt import RobotsTxt

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.internet.defer import Deferred
    from typing_extensions import Self

    from scrapy_rep.policy import Entry

    _Base = SitemapSpider
else:
    _Base = object

__all__ = ["RobotsSitemapMixin", "RobotsSitemapSpider"]

logger = logging.getLogger(__name__)

SITEMAP_META = "rep_sitemap"
"""Meta flag of sitemap (and fallback robots.txt) requests: not pages, so
MetaRobotsMiddleware leaves their X-Robots-Tag alone."""
DEPTH_META = "rep_sitemap_depth"
"""Index hops from robots.txt (or ``sitemap_urls``) to this sitemap."""

_UTF8_BOM = b"\xef\xbb\xbf"


class RobotsSitemapMixin(_Base):
    """Sitemaps of robots.txt for a ``SitemapSpider``; list it before
    ``SitemapSpider`` (or your subclass of it) in the bases."""

    # the spider attributes of docs/sitemaps.md
    sitemap_sites: Sequence[str] = ()
    sitemap_discover: bool = False
    sitemap_max_depth: int = 5
    sitemap_obey_robotstxt: bool = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self, SitemapSpider):
            raise TypeError(
                f"{type(self).__name__}: RobotsSitemapMixin needs scrapy.spiders.SitemapSpider "
                "among the bases, after the mixin"
            )
        # attributes may come as strings from `scrapy crawl -a name=value`
        self.sitemap_sites = _sites(self.sitemap_sites)
        self.sitemap_discover = _flag(self.sitemap_discover)
        self.sitemap_obey_robotstxt = _flag(self.sitemap_obey_robotstxt)
        # the meta of sitemap and page requests, by sitemap_obey_robotstxt
        self._rep_meta = {} if self.sitemap_obey_robotstxt else {"dont_obey_robotstxt": True}
        self.sitemap_max_depth = int(self.sitemap_max_depth)
        self._rep_origins: set[str] = set()  # origins whose Sitemap lines were taken
        self._rep_seen: set[str] = set()  # sitemap URLs requested
        self._rep_robots_requested: set[str] = set()  # fallback: origins asked for robots.txt

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)
        if spider.sitemap_discover:
            crawler.signals.connect(spider._rep_sitemaps_found, signal=rep_signals.sitemaps_found)
        return spider

    # -- start ----------------------------------------------------------------

    async def start(self) -> AsyncIterator[Any]:
        for url in self.start_urls:
            yield Request(url, dont_filter=True)
        sites = list(self.sitemap_sites)
        for url in self.sitemap_urls:
            if urlparse(url).path == "/robots.txt":  # read once, as a site's
                sites.append(url)
            else:
                for request in self._rep_sitemap_requests([url], 0):
                    yield request
        robots = robots_service(self.crawler)
        if robots is None:
            if sites or self.sitemap_discover:
                logger.info(
                    "robots.txt is not obeyed (%s): the spider downloads robots.txt "
                    "itself, for its Sitemap lines only, and does not obey its rules",
                    robots_off(self.crawler),
                    extra={"spider": self},
                )
            if self.sitemap_discover:  # no sitemaps_found signal without the middleware
                self.crawler.signals.connect(
                    self._rep_response_received, signal=signals.response_received
                )
            for site in sites:
                robots_request = self._rep_robots_request(site)
                if robots_request is not None:
                    yield robots_request
            return
        async for origin, entry in self._rep_entries(robots, sites):
            sitemaps = entry.robots.sitemaps if entry is not None and entry.robots else ()
            if entry is not None and entry.robots is None:
                logger.info(
                    "robots.txt of %s unavailable (%s): its sitemaps are unknown",
                    origin,
                    entry.reason,
                    extra={"spider": self},
                )
            for request in self._rep_from_robots(origin, sitemaps):
                yield request

    async def _rep_entries(
        self, robots: RobotsService, sites: Iterable[str]
    ) -> AsyncIterator[tuple[str, Entry | None]]:
        """(origin, robots.txt entry) of each site, a bounded number fetched at once."""
        window = max(self.crawler.settings.getint("CONCURRENT_REQUESTS", 16), 1)
        origins = iter(dict.fromkeys(o for o in map(self._rep_origin, sites) if o is not None))
        pending: deque[tuple[str, Deferred[Entry | None]]] = deque()
        while True:
            while len(pending) < window:
                origin = next(origins, None)
                if origin is None:
                    break
                pending.append((origin, deferred_from_coro(robots.entry_for(origin + "/"))))
            if not pending:
                return
            origin, waiting = pending.popleft()
            try:
                entry = await maybe_deferred_to_future(waiting)
            except Exception:
                logger.exception("Could not read the robots.txt of %s", origin)
                continue
            yield origin, entry

    def _rep_origin(self, site: str) -> str | None:
        origin = _site_origin(site)
        if origin is None:
            self.crawler.stats.inc_value("rep/sitemaps/invalid_site")
            logger.warning("sitemap_sites: %r is not an http(s) site, ignored", site)
            return None
        return origin.text

    # -- robots.txt -> sitemap requests ----------------------------------------

    def _rep_from_robots(self, origin: str, urls: Sequence[str]) -> list[Request]:
        """Requests for the Sitemap lines of ``origin`` (once per origin)."""
        if origin in self._rep_origins:
            return []
        self._rep_origins.add(origin)
        stats = self.crawler.stats
        stats.inc_value("rep/sitemaps/sites")
        if not urls:
            logger.debug("robots.txt of %s lists no sitemaps", origin, extra={"spider": self})
            return []
        stats.inc_value("rep/sitemaps/found", len(urls))
        try:  # robots.txt gives a location only: a filter reading e.g. "lastmod" may fail
            entries = list(self.sitemap_filter([{"loc": url} for url in urls]))
        except Exception:
            stats.inc_value("rep/sitemaps/filter_error")
            logger.exception(
                "sitemap_filter failed on the robots.txt sitemaps of %s (entries hold only "
                "'loc'): they are skipped",
                origin,
                extra={"spider": self},
            )
            return []
        followed = self._rep_followed(entries, f"robots.txt of {origin}")
        return list(self._rep_sitemap_requests(followed, 0))

    def _rep_sitemaps_found(self, urls: Sequence[str], origin: str) -> None:
        """sitemap_discover: an origin's robots.txt was just read by the middleware."""
        engine = self.crawler.engine
        if engine is None:
            return
        for request in self._rep_from_robots(origin, urls):
            engine.crawl(request)

    def _rep_response_received(self, response: Response, request: Request) -> None:
        """sitemap_discover without the middleware: a response from a new origin."""
        engine = self.crawler.engine
        if engine is None:
            return
        robots = self._rep_robots_request(response.url, quiet=True)
        if robots is not None:
            engine.crawl(robots)

    def _rep_robots_request(self, site: str, *, quiet: bool = False) -> Request | None:
        """Fallback: an ordinary request for the site's robots.txt (once per origin)."""
        origin = _site_origin(site)
        if origin is None:
            if not quiet:
                self._rep_origin(site)  # counts and logs it
            return None
        text = origin.text
        if text in self._rep_robots_requested:
            return None
        self._rep_robots_requested.add(text)
        self.crawler.stats.inc_value("rep/sitemaps/robotstxt_requested")
        return Request(
            origin.robots_url,
            callback=self._rep_parse_robots,
            errback=self._rep_robots_failed,
            cb_kwargs={"origin": text},
            meta={"dont_obey_robotstxt": True, SITEMAP_META: True},
            dont_filter=True,
        )

    def _rep_parse_robots(self, response: Response, origin: str) -> Iterator[Request]:
        sitemaps = RobotsTxt.parse(response.body, url=response.url).sitemaps
        yield from self._rep_from_robots(origin, sitemaps)

    def _rep_robots_failed(self, failure: Failure) -> None:
        self.crawler.stats.inc_value("rep/sitemaps/robotstxt_failed")
        logger.info(
            "robots.txt not read for its sitemaps: %s",
            _why(failure),
            extra={"spider": self},
        )

    # -- sitemaps --------------------------------------------------------------

    def _rep_sitemap_requests(self, urls: Iterable[str], depth: int) -> Iterator[Request]:
        """Requests for sitemaps not requested yet, within the depth limit."""
        stats = self.crawler.stats
        meta = {SITEMAP_META: True, DEPTH_META: depth, **self._rep_meta}
        for url in urls:
            try:
                request = Request(
                    url,
                    callback=self._parse_sitemap,
                    errback=self._rep_sitemap_failed,
                    meta=dict(meta),
                )
            except ValueError as exc:  # relative or otherwise unusable URL
                stats.inc_value("rep/sitemaps/invalid_url")
                logger.debug("Ignored sitemap URL %r: %s", url, exc, extra={"spider": self})
                continue
            if request.url in self._rep_seen:
                stats.inc_value("rep/sitemaps/duplicates")
                continue
            if depth > self.sitemap_max_depth:
                stats.inc_value("rep/sitemaps/depth_exceeded")
                logger.info(
                    "Sitemap not fetched: %s is %d index levels deep (sitemap_max_depth = %d)",
                    request.url,
                    depth,
                    self.sitemap_max_depth,
                    extra={"spider": self},
                )
                continue
            self._rep_seen.add(request.url)
            stats.inc_value("rep/sitemaps/requested")
            yield request

    def _parse_sitemap(self, response: Response) -> Iterator[Request]:
        stats = self.crawler.stats
        stats.inc_value("rep/sitemaps/fetched")
        depth = int(response.meta.get(DEPTH_META, 0))
        body = _compat.sitemap_body(self, response)
        if body is None and _is_plain_text(response):
            body = response.body
        if body is not None and body.strip() and not _looks_like_xml(body):
            yield from self._rep_pages(response, _text_entries(body), "text")
            return
        try:
            sitemap = Sitemap(body) if body is not None else None
            kind = sitemap.type if sitemap is not None else ""
        except Exception:  # unparsable: lxml errors, empty documents
            sitemap, kind = None, ""
        if sitemap is not None and kind == "sitemapindex":
            try:
                entries = list(self.sitemap_filter(sitemap))
            except Exception:
                logger.warning("Broken sitemap index: %s", response, extra={"spider": self})
                stats.inc_value("rep/sitemaps/invalid")
                return
            followed = self._rep_followed(entries, response.url)
            yield from self._rep_sitemap_requests(followed, depth + 1)
        elif sitemap is not None and kind == "urlset":
            yield from self._rep_pages(response, sitemap, "xml")
        else:
            stats.inc_value("rep/sitemaps/invalid")
            logger.warning("Ignoring invalid sitemap: %s", response, extra={"spider": self})

    def _rep_pages(
        self, response: Response, entries: Iterable[dict[str, Any]], kind: str
    ) -> Iterator[Request]:
        """Page requests of a urlset (or text sitemap), by ``sitemap_rules``."""
        stats = self.crawler.stats
        try:
            pairs = list(_compat.urlset_urls_and_callbacks(self, self.sitemap_filter(entries)))
        except Exception:
            logger.warning("Broken sitemap: %s", response, extra={"spider": self})
            stats.inc_value("rep/sitemaps/invalid")
            return
        if kind == "text":
            stats.inc_value("rep/sitemaps/text")
        for url, callback in pairs:
            try:
                request = Request(url, callback=callback, meta=dict(self._rep_meta))
            except ValueError:
                stats.inc_value("rep/sitemaps/invalid_url")
                continue
            stats.inc_value("rep/sitemaps/pages")
            yield request

    def _rep_followed(self, entries: list[dict[str, Any]], where: str) -> list[str]:
        """The sitemaps of an index (or robots.txt) that ``sitemap_follow`` keeps."""
        followed = list(_compat.sitemapindex_urls(self, entries))
        skipped = len(list(iterloc(entries, self.sitemap_alternate_links))) - len(followed)
        if skipped > 0:
            self.crawler.stats.inc_value("rep/sitemaps/follow_skipped", skipped)
            logger.debug(
                "%d sitemap(s) listed by %s skipped by sitemap_follow",
                skipped,
                where,
                extra={"spider": self},
            )
        return followed

    def _rep_sitemap_failed(self, failure: Failure) -> None:
        stats = self.crawler.stats
        if isinstance(failure.value, ForbiddenByRobots):
            stats.inc_value("rep/sitemaps/forbidden")
        else:
            stats.inc_value("rep/sitemaps/failed")
        logger.info("Sitemap not fetched: %s", _why(failure), extra={"spider": self})


class RobotsSitemapSpider(RobotsSitemapMixin, SitemapSpider):
    """``SitemapSpider`` reading sitemaps from the robots.txt of ``sitemap_sites``."""


def _site_origin(site: str) -> Origin | None:
    return origin_of(urlparse(site if "://" in site else "https://" + site))


def _why(failure: Failure) -> str:
    request = getattr(failure, "request", None)
    response = getattr(failure.value, "response", None)
    reason = f"HTTP {response.status}" if response is not None else str(failure.value)
    reason = reason or type(failure.value).__name__
    return f"{request.url if request is not None else '?'} ({reason})"


def _is_plain_text(response: Response) -> bool:
    content_type = (response.headers.get(b"Content-Type") or b"").lower()
    return content_type.startswith(b"text/plain") or urlparse(response.url).path.endswith(".txt")


def _looks_like_xml(body: bytes) -> bool:
    return body.removeprefix(_UTF8_BOM).lstrip().startswith(b"<")


def _text_entries(body: bytes) -> Iterator[dict[str, Any]]:
    """A text sitemap: one absolute http(s) URL a line (sitemaps.org); other lines skipped."""
    text = body.removeprefix(_UTF8_BOM).decode("utf-8", "replace")
    for line in text.splitlines():
        url = line.strip()
        if url.startswith(("http://", "https://")):
            yield {"loc": url}


def _flag(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)


def _sites(value: object) -> tuple[str, ...]:
    if isinstance(value, str):  # "-a sitemap_sites=https://a.example,https://b.example"
        return tuple(part for part in value.replace(",", " ").split() if part)
    return tuple(str(site) for site in value) if isinstance(value, Iterable) else ()
