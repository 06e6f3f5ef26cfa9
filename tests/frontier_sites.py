"""Many sites on one local server, and a broad crawl over them, for tests/test_frontier.py.

``Sites`` is one HTTP server on 127.0.0.1 that answers for every host name
(``http://oN.test:PORT``, resolved to 127.0.0.1 by ``crawls.loopback_names``):
a robots.txt (``robots``, or ``robots(host)``; None: 404) answered after
``robots_wait`` (or ``robots_wait(host)``) seconds (``HANG``: not before the server closes), pages
that take ``page_delay`` seconds, and a record of every request (host, path,
arrival) with the most page requests a host had in flight at once and the most
robots.txt requests in flight at once (all hosts together).

``BroadSpider`` requests its URLs (given as start requests) and can close the
crawl once a set of URLs has been answered.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider, signals
from scrapy.exceptions import CloseSpider
from scrapy.http import Response
from sent_stamp import let_go_at
from servers import PAGE, Gate, Reply, ScriptedServer
from twisted.python.failure import Failure

from scrapy_rep import _clock

HANG = float("inf")
"""A ``robots_wait``: robots.txt is not answered before the server closes."""


@dataclass(frozen=True)
class SiteHit:
    host: str
    path: str
    time: float


class Sites:
    """One server for many host names (see the module docstring), listening in
    the test servers' process (servers.py): pages, and robots.txt when it is
    the same for every host, are answered there; a robots.txt by host asks
    ``robots(host)`` and ``robots_wait(host)`` here."""

    def __init__(
        self,
        robots: str | Callable[[str], str | None] | None = None,
        page_delay: float = 0.0,
        robots_wait: float | Callable[[str], float] = 0.0,
    ) -> None:
        self._closing = Gate()
        self._server = ScriptedServer()
        self.port: int = self._server.port
        self._server.answer_unscripted(Reply(body=PAGE, delay=page_delay))
        if callable(robots) or callable(robots_wait):  # by host: asked here
            by_host = robots if callable(robots) else lambda host: robots
            wait = robots_wait if callable(robots_wait) else lambda host: robots_wait
            self._server.script_by_host(
                "/robots.txt", lambda host, number: self._robots_txt(by_host(host), wait(host))
            )
        else:  # the same for every host: played there
            self._server.script("/robots.txt", self._robots_txt(robots, robots_wait))

    def _robots_txt(self, body: str | None, wait: float) -> Reply:
        return Reply(
            status=404 if body is None else 200,
            body=(body or "").encode(),
            headers={"Content-Type": "text/plain"},
            delay=wait,
            hang_up_on=self._closing,
        )

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.port}{path}"

    @property
    def hits(self) -> list[SiteHit]:
        """Every request, in arrival order."""
        return [SiteHit(hit.host, hit.path, hit.arrived) for hit in self._server.log()]

    @property
    def max_in_flight(self) -> dict[str, int]:
        """The most page requests each host had in flight at once."""
        return self._server.in_flight_peaks()[0]

    @property
    def max_robots_in_flight(self) -> int:
        """The most robots.txt requests in flight at once (all hosts together)."""
        return self._server.in_flight_peaks()[1]

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
        return sorted(h.time for h in self.hits if h.host == host and h.path != "/robots.txt")

    def first(self, host: str, path: str) -> float | None:
        """When ``path`` of ``host`` first arrived."""
        return next((h.time for h in self.hits if h.host == host and h.path == path), None)

    def release_hanging(self) -> None:
        """Hanging robots.txt requests end now (the connection is closed unanswered)."""
        self._closing.set()

    def close(self) -> None:
        self.release_hanging()
        self._server.close()

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
