"""Many sites on one local server, and a broad crawl over them, for tests/test_frontier.py.

``Sites`` is one HTTP server on 127.0.0.1 that answers for every host name
(``http://oN.test:PORT``, resolved to 127.0.0.1 by ``crawls.loopback_names``):
a robots.txt per host (``robots(host)``; None: 404) answered after
``robots_wait(host)`` seconds (``HANG``: not before the server closes), pages
that take ``page_delay`` seconds, and a record of every request (host, path,
arrival) with the most page requests a host had in flight at once and the most
robots.txt requests in flight at once (all hosts together).

``BroadSpider`` requests its URLs (given as start requests) and can close the
crawl once a set of URLs has been answered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider, signals
from scrapy.exceptions import CloseSpider
from scrapy.http import Response
from sent_stamp import let_go_at
from twisted.python.failure import Failure

from scrapy_rep import _clock

PAGE = b"<html><body><p>ok</p></body></html>"
HANG = float("inf")
"""A ``robots_wait``: robots.txt is not answered before the server closes."""


@dataclass(frozen=True)
class SiteHit:
    host: str
    path: str
    time: float


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        sites = self.server.sites
        host = (self.headers.get("Host") or "").split(":")[0]
        path = self.path
        robots = path == "/robots.txt"
        sites._arrived(host, path, page=not robots)
        answering = False
        try:
            if robots:
                wait = sites.robots_wait(host)
                if wait:
                    sites._closing.wait(None if wait == HANG else wait)
                    if sites._closing.is_set():
                        self.close_connection = True
                        return
                body = sites.robots(host)
                status = 404 if body is None else 200
                payload = (body or "").encode()
                kind = "text/plain"
            else:
                if sites.page_delay:
                    time.sleep(sites.page_delay)
                status, payload, kind = 200, PAGE, "text/html"
            # Counted out before the answer is written: once the client has it, it
            # may send the next request before this thread runs again.
            answering = True
            sites._left(host, page=not robots)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            if not answering:
                sites._left(host, page=not robots)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    sites: Sites


class Sites:
    """One server for many host names (see the module docstring)."""

    def __init__(
        self,
        robots: Callable[[str], str | None] = lambda host: None,
        page_delay: float = 0.0,
        robots_wait: Callable[[str], float] = lambda host: 0.0,
    ) -> None:
        self.robots = robots
        self.page_delay = page_delay
        self.robots_wait = robots_wait
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.hits: list[SiteHit] = []
        self._in_flight: dict[str, int] = {}
        self.max_in_flight: dict[str, int] = {}
        self._robots_in_flight = 0
        self.max_robots_in_flight = 0
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.sites = self
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.port}{path}"

    def _arrived(self, host: str, path: str, *, page: bool) -> None:
        with self._lock:
            self.hits.append(SiteHit(host, path, time.time()))
            if page:
                now = self._in_flight[host] = self._in_flight.get(host, 0) + 1
                self.max_in_flight[host] = max(self.max_in_flight.get(host, 0), now)
            else:
                self._robots_in_flight += 1
                self.max_robots_in_flight = max(self.max_robots_in_flight, self._robots_in_flight)

    def _left(self, host: str, *, page: bool) -> None:
        with self._lock:
            if page:
                self._in_flight[host] -= 1
            else:
                self._robots_in_flight -= 1

    def sent(self, crawler: Any) -> dict[str, list[float]]:
        """When the crawler sent each page, by host (``_clock.now()``), read on
        the crawler's side: when its download slot let it go (sent_stamp.py),
        else when the download ended less its latency (the time to the response
        headers, which a busy event loop delivers late). Filled while
        ``crawler`` runs."""
        sent: dict[str, list[float]] = {}

        def downloaded(response: Response, request: Request) -> None:
            if urlsplit(request.url).path == "/robots.txt":
                return
            at = let_go_at(request)
            latency = request.meta.get("download_latency")
            if at is None and latency is not None:
                at = _clock.now() - latency
            if at is not None:
                sent.setdefault(urlsplit(request.url).hostname or "", []).append(at)

        crawler.signals.connect(downloaded, signal=signals.response_downloaded, weak=False)
        return sent

    def page_times(self, host: str) -> list[float]:
        """When the pages of ``host`` arrived (robots.txt excepted), in order."""
        with self._lock:
            return sorted(h.time for h in self.hits if h.host == host and h.path != "/robots.txt")

    def first(self, host: str, path: str) -> float | None:
        """When ``path`` of ``host`` first arrived."""
        with self._lock:
            return next((h.time for h in self.hits if h.host == host and h.path == path), None)

    def release_hanging(self) -> None:
        """Hanging robots.txt requests end now (the connection is closed unanswered)."""
        self._closing.set()

    def close(self) -> None:
        self.release_hanging()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Sites:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BroadSpider(Spider):
    """Requests ``urls`` (and what ``follow(response)`` returns); closes the
    crawl once every URL of ``close_after`` is answered (if given).
    ``answered``: URL -> when its answer reached the spider (``time.time()``);
    ``failed``: URL -> exception class name."""

    name = "frontier-test"

    def __init__(
        self,
        urls: list[str | Request],
        answered: dict[str, float],
        failed: dict[str, str],
        close_after: set[str] | None = None,
        follow: Callable[[Response], list[Request]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.follow = follow
        self.urls = urls
        self.answered = answered
        self.failed_urls = failed
        self.close_after = set(close_after) if close_after else None

    async def start(self) -> AsyncIterator[Request]:
        for url in self.urls:
            request = url if isinstance(url, Request) else Request(url, dont_filter=True)
            yield request.replace(callback=self.parse, errback=self.failed)

    def parse(self, response: Response) -> Iterator[Request]:
        assert response.request is not None
        self.answered[response.request.url] = time.time()
        self._done(response.request.url)
        for request in self.follow(response) if self.follow is not None else ():
            yield request.replace(callback=self.parse, errback=self.failed)

    def failed(self, failure: Failure) -> None:
        request = getattr(failure, "request", None)
        url = request.url if request is not None else "?"
        self.failed_urls[url] = type(failure.value).__name__
        self._done(url)

    def _done(self, url: str) -> None:
        if self.close_after is None:
            return
        self.close_after.discard(url)
        if not self.close_after:
            self.close_after = None
            raise CloseSpider("finished")
