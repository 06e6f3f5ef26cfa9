"""One origin's robots.txt, downloaded through Scrapy with what a hostile server sends bounded.

``crawler.engine.download_async`` runs the user's downloader middlewares
(proxies, auth, headers, cookies, caches), so robots.txt is asked for the way
pages are. On top, what any server on the web can make a robots.txt download
cost is bounded here:

- **bytes**: the body is cut at ``REP_MAX_SIZE`` with ``StopDownload(fail=False)``
  from a ``bytes_received`` handler (connected only while robots.txt downloads
  run); compressed answers are decoded with the same bound
  (:mod:`scrapy_rep.decompression`), so Scrapy's ``DOWNLOAD_MAXSIZE`` is lifted
  for them (a 10 GiB ``Content-Length`` is read up to the cap, as RFC 9309 §2.5
  allows) only when that middleware is in place; status line and headers are
  bounded too (:mod:`scrapy_rep._slots.headers`: every request of ours, each
  hop, each policy file, as it reaches the downloader);
- **time**: ``REP_FETCH_TIMEOUT`` for the whole fetch: every hop and attempt
  gets the time left (:class:`_Budget`); only the waits before a retry (each
  at most ``REP_FETCH_TIMEOUT``, ``REP_FETCH_RETRIES`` for the whole fetch too)
  come on top, so a fetch ends within ``REP_FETCH_TIMEOUT x (REP_FETCH_RETRIES
  + 1)``, inside the cluster's fetch lock;
- **places**: a robots.txt download in flight is taken out of the downloader's
  active set (at most ``REP_MAX_FETCHES`` at once), so slow robots.txt files
  never hold the places of pages of origins whose rules are known;
- **retries**: Scrapy's RetryMiddleware is off for these requests (it asks
  again at once and logs every give-up as an ERROR); a 429, a 5xx or a network
  error is tried again, up to ``REP_FETCH_RETRIES`` times in a fetch (all its
  hops together), after the server's ``Retry-After`` or a backoff (1 s, 2 s,
  ...), and not within this fetch when
  the server asks for longer than ``REP_FETCH_TIMEOUT`` (the origin is then
  unreachable until the time it asked for) or did not answer in time (a
  server that hangs would hold its waiting requests twice as long).

Redirects are followed here, hop by hop (up to ``REP_MAX_REDIRECTS``); what
the final answer means is :mod:`scrapy_rep.policy`'s job.

Another file of the origin (``/.well-known/tdmrep.json``, :mod:`scrapy_rep.usage_middleware`)
is downloaded with the same bounds by an instance of its own
(``well_known=True``, :meth:`RobotsDownload.well_known_file`): one attempt per
hop, no retry. Its requests carry ``rep_robotstxt`` too (so they are decoded
with a bound) and ``rep_well_known``; each instance handles only its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlparse

from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider, IgnoreRequest, StopDownload
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.misc import load_object
from w3lib.url import safe_url_string

from scrapy_rep import _compat, _slots
from scrapy_rep._inflate import accept_encoding
from scrapy_rep._slots import headers
from scrapy_rep.origin import origin_text, robots_url
from scrapy_rep.policy import header_text, retry_after

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

    from scrapy_rep.cluster.link import Sleep
    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Entry

ROBOTS_META = "rep_robotstxt"
"""Meta key marking scrapy-rep's own robots.txt requests (value: the origin text)."""
WELL_KNOWN_META = "rep_well_known"
"""Meta key marking scrapy-rep's requests for another file of the origin
(/.well-known/tdmrep.json), which carry ROBOTS_META too (value: the file's path)."""
_SCRAPY_HANDLERS = "scrapy.core.downloader.handlers."
FIRST_RETRY = 1.0
"""Seconds before the first retry without Retry-After (then doubling), and at least."""


class RobotsDownload:
    """Downloads origins' robots.txt (see the module docstring)."""

    def __init__(
        self,
        crawler: Crawler,
        config: Config,
        *,
        sleep: Sleep | None = None,
        uncapped: bool,
        well_known: bool = False,
    ) -> None:
        """``uncapped``: robots.txt answers are decoded with a bound
        (:func:`scrapy_rep.decompression.problem` found nothing) and Scrapy's own
        handlers report received bytes, so DOWNLOAD_MAXSIZE can be lifted.
        ``well_known``: this instance downloads other files of origins
        (:meth:`well_known_file`), not robots.txt. ``sleep`` waits between
        robots.txt attempts (other files are not retried)."""
        self.well_known = well_known
        self.crawler = crawler
        self.config = config
        self._policy = config.policy
        self._stats = crawler.stats
        self._sleep = sleep
        self._size_meta = {"download_maxsize": 0, "download_warnsize": 0} if uncapped else {}
        self._headers = {b"Accept-Encoding": accept_encoding()}
        self._running = 0  # downloads in flight: the signal handlers are connected
        self._sizes: dict[Request, int] = {}
        self._bounded: dict[Request, bytes | None] = {}  # header bound keys (_slots.headers)
        self._out: set[Request] = set()  # taken out of the downloader's active set
        self._can_leave: bool | None = None  # engine internals there (checked once)
        crawler.signals.connect(self._spider_idle, signal=signals.spider_idle)
        headers.install()  # once per process; what is missing was logged at start

    @property
    def busy(self) -> bool:
        """As many robots.txt downloads as may leave the active set are running
        (never with REP_MAX_FETCHES = 0: then they all count, as in Scrapy)."""
        return 0 < self.config.max_fetches <= self._running

    async def entry(self, origin: Origin, previous: Entry | None) -> tuple[Entry, Response | None]:
        """The origin's robots.txt as an entry (``previous``: what was known), and
        the last response (None when there was none)."""
        policy = self._policy
        url = robots_url(origin)
        budget = _Budget(self.config.fetch_timeout, self.config.fetch_retries)
        for hop in range(self.config.max_redirects + 1):
            response, failed = await self._get(url, origin, previous, budget)
            if response is None:
                assert failed is not None
                return failed, None
            status = response.status
            if _is_redirect(status):
                location = response.headers.get(b"Location")
                target = _redirect_target(response.url, location) if location else None
                if target is None or hop == self.config.max_redirects:
                    # nowhere to go, or too far: as if there were no robots.txt (§2.3.1.2)
                    if target is None:
                        reason = f"HTTP {status} without a usable Location"
                    else:
                        self._stats.inc_value("rep/robotstxt/redirects_exceeded")
                        reason = f"more than {self.config.max_redirects} redirects"
                    entry = policy.unavailable(reason, now=time.time())
                    hops = hop if target is None else hop + 1
                    entry = dataclasses.replace(
                        entry, status=status, url=response.url, redirects=hops
                    )
                    return entry, response
                url = target
                continue
            headers = response.headers
            entry = policy.on_response(
                status,
                response.body,
                url=response.url,
                now=time.time(),
                previous=previous,
                cache_control=header_text(headers.get(b"Cache-Control")),
                retry_after_header=header_text(headers.get(b"Retry-After")),
                date_header=header_text(headers.get(b"Date")),
            )
            entry = dataclasses.replace(
                entry,
                truncated=entry.truncated or "download_stopped" in response.flags,
                status=status,
                url=response.url,
                redirects=hop,
                size=len(response.body),
            )
            return entry, response
        raise AssertionError("unreachable")  # the loop always returns

    async def _get(
        self, url: str, origin: Origin, previous: Entry | None, budget: _Budget
    ) -> tuple[Response | None, Entry | None]:
        """One hop, tried again on the server's terms within the fetch's
        ``budget``: its last response, or the entry of the last failure."""
        failed: Entry | None = None
        for attempt in itertools.count():
            response: Response | None = None
            try:
                response = await self._download(self._request(url, origin, budget))
            except IgnoreRequest as exc:
                # Refused by a downloader middleware of this crawl, not by the site.
                self._stats.inc_value("rep/robotstxt/refused_locally")
                return None, self._policy.refused_locally(_reason(exc), now=time.time())
            except Exception as exc:
                name = f"{type(exc).__module__}.{type(exc).__qualname__}"
                self._stats.inc_value(f"rep/robotstxt/exception_count/{name}")
                failed = self._policy.on_error(_reason(exc), now=time.time(), previous=previous)
                if isinstance(exc, _compat.TIMEOUT_ERRORS):
                    break  # it had REP_FETCH_TIMEOUT already: asked again after REP_RETRY_MIN
            else:
                if response.status != 429 and response.status < 500:
                    return response, None
            wait = self._retry_wait(response, attempt)
            if wait is None or not budget.retries:
                break
            budget.retries -= 1
            self._stats.inc_value("rep/robotstxt/retry_count")
            assert self._sleep is not None  # robots.txt downloads are given one
            with budget.paused():  # the server asked for the wait: not download time
                if not await self._sleep(wait):  # the spider closes
                    break
        if response is not None:
            return response, None  # its status says unreachable, with its Retry-After
        return None, failed

    def _retry_wait(self, response: Response | None, attempt: int) -> float | None:
        """Seconds before the next try: the server's Retry-After, else a doubling
        backoff; None when the server asks for longer than a fetch may take."""
        asked = None
        if response is not None:
            headers = response.headers
            asked = retry_after(
                header_text(headers.get(b"Retry-After")),
                time.time(),
                date=header_text(headers.get(b"Date")),
            )
        if asked is None:
            return min(FIRST_RETRY * 2.0**attempt, self.config.fetch_timeout)
        if asked > self.config.fetch_timeout:
            return None  # the entry's retry time honours it
        return max(asked, FIRST_RETRY)

    def _request(self, url: str, origin: Origin, budget: _Budget) -> Request:
        """The request for ``url`` with the time left; raises the timeout Scrapy
        would when none is left (the fetch took REP_FETCH_TIMEOUT already)."""
        left = budget.left()
        if left <= 0:
            raise _TIMEOUT(
                f"Getting {url} took longer than {self.config.fetch_timeout:g} seconds "
                "(REP_FETCH_TIMEOUT, for the whole fetch, redirects included)."
            )
        return Request(
            url,
            callback=NO_CALLBACK,
            dont_filter=True,
            headers=self._headers,  # only codings decoded with a bound
            meta={
                "dont_obey_robotstxt": True,
                ROBOTS_META: origin_text(origin),
                "download_timeout": left,
                "dont_retry": True,  # retried above, on the server's terms
                "dont_redirect": True,  # followed above, hop by hop
                "handle_httpstatus_all": True,
                "allow_offsite": True,
                **self._size_meta,
            },
        )

    async def well_known_file(self, path: str, origin: Origin) -> Response:
        """Another file of the origin (``path``: "/.well-known/tdmrep.json") with
        the bounds of robots.txt downloads: the final answer, redirects followed
        up to REP_MAX_REDIRECTS (a 3xx when they lead nowhere or too far); one
        attempt per hop, all within REP_FETCH_TIMEOUT. Network errors, timeouts
        and refusals raise, as Scrapy's do."""
        url = origin_text(origin) + path
        budget = _Budget(self.config.fetch_timeout, retries=0)
        for _ in range(self.config.max_redirects + 1):
            request = self._request(url, origin, budget)
            request.meta[WELL_KNOWN_META] = path
            response = await self._send(request)
            location = response.headers.get(b"Location")
            status = response.status
            if not (_is_redirect(status) and location):
                return response
            target = _redirect_target(response.url, location)
            if target is None:
                return response
            url = target
        return response

    async def _download(self, request: Request) -> Response:
        response = await self._send(request, "rep/robotstxt/request_count")
        status = response.status
        self._stats.inc_value("rep/robotstxt/response_count")
        self._stats.inc_value(f"rep/robotstxt/response_status_count/{status}")
        self._stats.inc_value(f"rep/robotstxt/response_status_class/{status // 100}xx")
        return response

    async def _send(self, request: Request, count: str | None = None) -> Response:
        engine = self.crawler.engine
        if engine is None:
            raise RuntimeError("the crawler has no engine")
        if count is not None:
            self._stats.inc_value(count)
        self._running += 1
        if self._running == 1:
            self._connect(True)
        try:
            return await engine.download_async(request)
        finally:
            self._sizes.pop(request, None)
            if request in self._bounded:
                headers.release(self._bounded.pop(request))
            self._running -= 1
            if not self._running:
                self._connect(False)

    def _ours(self, request: Request) -> bool:
        """A request of this instance: robots.txt, or another file when ``well_known``."""
        meta = request.meta
        return ROBOTS_META in meta and (WELL_KNOWN_META in meta) == self.well_known

    # -- while downloads run ------------------------------------------------------

    def _connect(self, on: bool) -> None:
        """The handlers run only while robots.txt downloads do: every response's
        every chunk would pay for them otherwise."""
        change = self.crawler.signals.connect if on else self.crawler.signals.disconnect
        change(self._bytes_received, signal=signals.bytes_received)
        change(self._reached, signal=signals.request_reached_downloader)
        change(self._left, signal=signals.request_left_downloader)
        if not on:
            self._sizes.clear()
            for key in self._bounded.values():
                headers.release(key)
            self._bounded.clear()

    def _bytes_received(self, data: bytes, request: Request, spider: Spider | None = None) -> None:
        if ROBOTS_META not in request.meta or not self._ours(request):
            return
        size = self._sizes.get(request, 0) + len(data)
        self._sizes[request] = size
        if size > self.config.max_size:
            raise StopDownload(fail=False)

    def _reached(self, request: Request, spider: Spider | None = None) -> None:
        if not self._ours(request):
            return
        if request not in self._bounded:  # at its final URL, whatever a middleware did
            self._bounded[request] = headers.bound_headers(request.url)
        if len(self._out) >= self.config.max_fetches:
            return
        engine = self.crawler.engine
        if self._can_leave is None:  # what is missing was logged at start (_slots)
            self._can_leave = not _slots.waiting_problems(engine)
        if self._can_leave and _slots.leave_active(engine, request):
            self._out.add(request)

    def _left(self, request: Request, spider: Spider | None = None) -> None:
        # Sent before the downloader removes the request from its active set.
        if request in self._out:
            self._out.discard(request)
            _slots.rejoin_active(self.crawler.engine, request)

    def _spider_idle(self) -> None:
        # Requests out of the active set are invisible to the engine's idle check.
        if self._out:
            raise DontCloseSpider


def handlers_count_bytes(settings: BaseSettings) -> bool:
    """Whether http and https go through Scrapy's own download handlers (or
    subclasses of them), which send bytes_received (the size cap's signal);
    another handler may not."""
    handlers = settings.getwithbase("DOWNLOAD_HANDLERS")
    for scheme in ("http", "https"):
        handler = handlers.get(scheme)
        try:
            cls = load_object(handler) if isinstance(handler, str) else handler
        except (ImportError, AttributeError, ValueError, NameError):
            return False  # Scrapy reports it when it loads the handlers
        if not any(
            getattr(base, "__module__", "").startswith(_SCRAPY_HANDLERS)
            for base in getattr(cls, "__mro__", ())
        ):
            return False
    return True


_TIMEOUT = _compat.TIMEOUT_ERRORS[-1]
"""What Scrapy raises for a download past its timeout (Scrapy's class from 2.15)."""


class _Budget:
    """What a whole fetch, all its hops, may still spend: download time
    (REP_FETCH_TIMEOUT) and retries (REP_FETCH_RETRIES)."""

    def __init__(self, seconds: float, retries: int) -> None:
        self._end = time.monotonic() + seconds
        self.retries = retries

    def left(self) -> float:
        return self._end - time.monotonic()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A wait that does not count (before a retry the server asked for)."""
        start = time.monotonic()
        try:
            yield
        finally:
            self._end += time.monotonic() - start


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _is_redirect(status: int) -> bool:
    """A 3xx that sends elsewhere (304 Not Modified does not)."""
    return 300 <= status < 400 and status != 304


def _redirect_target(base: str, location: bytes) -> str | None:
    """The absolute http(s) URL a Location header names; None for anything
    else ('http://[', a port past 65535, another scheme, no host, blank)."""
    text = location.decode("latin-1").strip()
    if not text:
        return None
    try:
        target = urljoin(base, safe_url_string(text))
        parts = urlparse(target)
        parts.port  # noqa: B018  (raises ValueError when out of range)
        Request(target)  # what Scrapy would refuse to download
    except ValueError:
        return None
    return target if parts.scheme in ("http", "https") and parts.hostname else None
