"""scrapy-rep's own downloads (robots.txt, a policy file) through Scrapy, what servers send bounded.

``crawler.engine.download_async`` runs the user's downloader middlewares
(proxies, auth, headers, cookies, caches), so scrapy-rep asks for its files
the way pages are asked for. On top, what a server can make one of them cost
is bounded here (docs/robotstxt.md, "What a server can make a robots.txt fetch
cost"): bytes (``REP_MAX_SIZE``), time for the whole fetch (:class:`Budget`),
places (at most ``REP_MAX_FETCHES`` at once out of the downloader's active
set) and redirects (followed hop by hop: :meth:`OwnDownloads.follow`). One
core, two users: robots.txt (:class:`scrapy_rep.fetcher.RobotsDownload`) and
``/.well-known/tdmrep.json`` (:mod:`scrapy_rep._tdmrep_files`). Every request
carries ``rep_robotstxt`` (decoded with a bound), one for another file
``rep_well_known`` too: each :class:`OwnDownloads` handles only its own file's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Literal, NamedTuple
from urllib.parse import urljoin, urlparse

from scrapy import Request, signals
from scrapy.exceptions import StopDownload
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.misc import load_object
from w3lib.url import safe_url_string

from scrapy_rep import _clock, _compat, _slots
from scrapy_rep._context import crawl_context
from scrapy_rep._inflate import accept_encoding
from scrapy_rep._meta_keys import ROBOTS_META, WELL_KNOWN_META
from scrapy_rep._slots import headers
from scrapy_rep.evidence import Evidence
from scrapy_rep.origin import ROBOTS_PATH

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin

_SCRAPY_HANDLERS = "scrapy.core.downloader.handlers."

Stop = Literal["no_location", "too_many"]
"""Why a redirect was not followed: no usable Location, or past REP_MAX_REDIRECTS."""


class Hops(NamedTuple):
    """Where following redirects ended."""

    response: Response | None
    """The last answer (None: the last hop failed)."""
    redirects: int
    """Redirects followed (one more than taken when there were too many)."""
    stopped: Stop | None
    """Why a redirect was not followed; None when the last answer is no redirect."""


class OwnDownloads:
    """Downloads of one file of origins, bounded (see the module docstring)."""

    def __init__(self, crawler: Crawler, config: Config, path: str, *, uncapped: bool) -> None:
        """``path``: the file ("/robots.txt", "/.well-known/tdmrep.json").
        ``uncapped``: answers are decoded with a bound and Scrapy's own handlers
        report received bytes, so DOWNLOAD_MAXSIZE can be lifted."""
        self.crawler = crawler
        self.config = config
        self.path = path
        self._well_known = None if path == ROBOTS_PATH else path
        self._size_meta = {"download_maxsize": 0, "download_warnsize": 0} if uncapped else {}
        self._headers = {b"Accept-Encoding": accept_encoding()}
        self._running = 0  # downloads in flight: the signal handlers are connected
        self._sizes: dict[Request, int] = {}
        self._bounded: dict[Request, bytes | None] = {}  # header bound keys (_slots.headers)
        self._out: set[Request] = set()  # taken out of the downloader's active set
        self._ledger = crawl_context(crawler).waiting.ledger
        self.most_out = config.max_fetches  # of them at once
        self._can_leave: bool | None = None  # engine internals there (checked once)
        self._parting = False  # the frontier watches the active set: _left not followed
        self._evidence = Evidence.of(crawler, config)  # None unless REP_EVIDENCE
        headers.install(config.headers_max)  # once per process; a problem was logged at start

    @property
    def busy(self) -> bool:
        """As many downloads as may leave the active set are running (never
        with REP_MAX_FETCHES = 0: then they all count, as in Scrapy)."""
        return 0 < self.config.max_fetches <= self._running

    def budget(self, retries: int = 0) -> Budget:
        """What one fetch may spend: REP_FETCH_TIMEOUT, and ``retries``."""
        return Budget(self.config.fetch_timeout, retries)

    def request(
        self,
        url: str,
        origin: Origin,
        budget: Budget,
        extra_headers: dict[bytes, bytes] | None = None,
    ) -> Request:
        """The request for ``url`` with the time left (and ``extra_headers``:
        validators); raises the timeout Scrapy would when none is left (the
        fetch took REP_FETCH_TIMEOUT already)."""
        left = budget.left()
        if left <= 0:
            raise TIMEOUT(
                f"Getting {url} took longer than {self.config.fetch_timeout:g} seconds "
                "(REP_FETCH_TIMEOUT, for the whole fetch, redirects included)."
            )
        meta = {
            "dont_obey_robotstxt": True,
            ROBOTS_META: origin.text,
            "download_timeout": left,
            "dont_retry": True,  # retried by the caller, on the server's terms
            "dont_redirect": True,  # followed by follow(), hop by hop
            "handle_httpstatus_all": True,
            "allow_offsite": True,
            **self._size_meta,
        }
        if self._well_known is not None:
            meta[WELL_KNOWN_META] = self._well_known
        # HttpCacheMiddleware neither reads nor stores it: when told so, and for
        # a conditional request (its 304 would replace a cached 200)
        if extra_headers or not self.config.httpcache_robotstxt:
            meta["dont_cache"] = True
        return Request(
            url,
            callback=NO_CALLBACK,
            dont_filter=True,
            # only codings decoded with a bound
            headers={**self._headers, **extra_headers} if extra_headers else self._headers,
            meta=meta,
        )

    async def follow(self, url: str, get: Callable[[str], Awaitable[Response | None]]) -> Hops:
        """The answers ``get`` gives for ``url``, then for each redirect's
        target, up to REP_MAX_REDIRECTS hops."""
        most = self.config.max_redirects
        for hop in range(most + 1):
            response = await get(url)
            if response is None or not is_redirect(response.status):
                return Hops(response, hop, None)
            location = response.headers.get(b"Location")
            target = _redirect_target(response.url, location) if location else None
            if target is None:
                return Hops(response, hop, "no_location")
            if hop == most:
                return Hops(response, hop + 1, "too_many")
            url = target
        raise AssertionError("unreachable")  # the loop always returns

    async def file(self, origin: Origin) -> Response:
        """The origin's file with one attempt per hop, all within
        REP_FETCH_TIMEOUT: the final answer (a 3xx when redirects lead nowhere
        or too far). Network errors, timeouts and refusals raise, as Scrapy's do."""
        budget = self.budget()

        async def get(url: str) -> Response:
            return await self.send(self.request(url, origin, budget))

        hops = await self.follow(origin.text + self.path, get)
        assert hops.response is not None  # get() raises rather than answer None
        return hops.response

    async def send(self, request: Request) -> Response:
        """Download ``request`` through the crawl's engine, bounded."""
        engine = self.crawler.engine
        if engine is None:
            raise RuntimeError("the crawler has no engine")
        self._running += 1
        if self._running == 1:
            self._connect(True)
        evidence = self._evidence
        started = _clock.now()
        deadline = _slots.clock_deadline(request)  # download_timeout, on scrapy-rep's clock too
        try:
            response = await engine.download_async(request)
        except Exception as exc:
            if evidence is not None:
                evidence.failed(request, exc)
            raise
        else:
            if evidence is not None:
                evidence.exchange(request, response, started)
            return response
        finally:
            if deadline is not None:
                deadline.cancel()
            self._sizes.pop(request, None)
            if request in self._bounded:
                headers.release(self._bounded.pop(request))
            self._running -= 1
            if not self._running:
                self._connect(False)

    def _ours(self, request: Request) -> bool:
        meta = request.meta
        return ROBOTS_META in meta and meta.get(WELL_KNOWN_META) == self._well_known

    # -- while downloads run ------------------------------------------------------

    def _connect(self, on: bool) -> None:
        """The handlers run only while downloads do: every response's every
        chunk would pay for them otherwise."""
        change = self.crawler.signals.connect if on else self.crawler.signals.disconnect
        change(self._bytes_received, signal=signals.bytes_received)
        follow = self._ledger.follow if on else self._ledger.unfollow
        follow("reached", self._reached)
        if on:
            # With the frontier's active set, a request taken out stays out until
            # Scrapy removes it (Ledger.part): pages are spared the receiver below.
            self._parting = self._ledger.watched()
        if not self._parting:
            follow("left", self._left)
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
        if len(self._out) >= self.most_out:
            return
        if self._can_leave is None:  # what is missing was logged at start (_slots)
            self._can_leave = not _slots.waiting_problems(self.crawler.engine)
        if self._can_leave and self._ledger.detach(request):
            self._out.add(request)
            if self._parting:
                self._ledger.part(request, self._out.discard)

    def _left(self, request: Request, spider: Spider | None = None) -> None:
        # Sent before the downloader removes the request from its active set.
        if request in self._out:
            self._out.discard(request)
            self._ledger.rejoin(request)


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


TIMEOUT = _compat.TIMEOUT_ERRORS[-1]
"""What Scrapy raises for a download past its timeout (Scrapy's class from 2.15)."""


class Budget:
    """What a whole fetch, all its hops, may still spend: download time
    (REP_FETCH_TIMEOUT) and retries (REP_FETCH_RETRIES)."""

    def __init__(self, seconds: float, retries: int) -> None:
        self._end = _clock.monotonic() + seconds
        self.retries = retries

    def left(self) -> float:
        return self._end - _clock.monotonic()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A wait that does not count (before a retry the server asked for)."""
        start = _clock.monotonic()
        try:
            yield
        finally:
            self._end += _clock.monotonic() - start


def is_redirect(status: int) -> bool:
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
