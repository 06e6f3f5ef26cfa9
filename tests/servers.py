"""Real local HTTP servers for component tests (import as ``from servers import ...``).

``ScriptedServer`` listens on 127.0.0.1, port 0, in a thread. Each path can be
scripted with a :class:`Reply` (or a list of them, served in turn, the last
one repeated, or a function of the hit number); unscripted paths answer 200
with a small HTML page. Every hit is recorded (path, time, headers) so tests
assert on what reached the server.

    with ScriptedServer() as site:
        site.script("/robots.txt", Reply(body=b"User-agent: *\\nDisallow: /private\\n"))
        ...crawl site.url("/private/a")...
        assert site.hits("/private/a") == 0
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count, pairwise
from typing import Any, BinaryIO
from urllib.parse import urlsplit


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] | list[tuple[str, str]] = field(default_factory=dict)
    """Response headers; a list of pairs may repeat a name (two X-Robots-Tag lines)."""
    delay: float = 0.0
    """Seconds to wait before answering (timeouts, slow robots.txt)."""
    wait_for: threading.Event | None = None
    """Answer only once this event is set (or after ``wait_timeout``)."""
    wait_timeout: float = 10.0
    chunk_size: int = 0
    """Send the body in chunks of this size (0: at once)."""
    stream: Callable[[BinaryIO], None] | None = None
    """Write the whole answer, status line included, to the socket (a header
    flood, a lying Content-Length): the other fields are then unused."""


Script = Reply | Sequence[Reply] | Callable[[int], Reply]


SENT_HEADER = "X-Test-Sent"
"""Set by the test crawls' download handler (sent_stamp.py): when the crawler sent it."""


@dataclass(frozen=True)
class Hit:
    path: str
    time: float
    """When the crawler sent the request (``SENT_HEADER``), else when it arrived."""
    headers: dict[str, str]


PAGE = b"<html><body><p>ok</p></body></html>"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        owner = self.server.owner
        path = urlsplit(self.path).path
        number = owner._record(self.path, path, dict(self.headers.items()))
        reply = owner._reply_for(path, number)
        if reply.wait_for is not None:
            reply.wait_for.wait(reply.wait_timeout)
        if reply.delay:
            time.sleep(reply.delay)
        if reply.stream is not None:
            self.close_connection = True
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                reply.stream(self.wfile)  # the client may give up, as it should
            return
        try:
            self.send_response(reply.status)
            headers = reply.headers
            pairs = list(headers.items() if isinstance(headers, dict) else headers)
            if not any(name.lower() == "content-type" for name, _ in pairs):
                content_type = "text/html" if reply.status == 200 else "text/plain"
                pairs.insert(0, ("Content-Type", content_type))
            for name, value in pairs:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if not reply.chunk_size:
                self.wfile.write(reply.body)
                return
            for start in range(0, len(reply.body), reply.chunk_size):
                self.wfile.write(reply.body[start : start + reply.chunk_size])
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (size cap, timeout)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many origins connect at once in broad-crawl tests
    owner: ScriptedServer


class ScriptedServer:
    """An HTTP server on 127.0.0.1 with per-path scripted replies and hit counts."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, Script] = {}
        self._hits: list[Hit] = []
        self._counts: dict[str, int] = {}
        self.host = host
        self._httpd = _Server((host, 0), _Handler)
        self._httpd.owner = self
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    # -- scripting -------------------------------------------------------------

    def script(self, path: str, reply: Script) -> None:
        with self._lock:
            self._scripts[path] = reply

    def robots(self, body: bytes | str, **kwargs: Any) -> None:
        """Script /robots.txt as a 200 with this body."""
        if isinstance(body, str):
            body = body.encode()
        self.script(
            "/robots.txt", Reply(body=body, headers={"Content-Type": "text/plain"}, **kwargs)
        )

    def _reply_for(self, path: str, number: int) -> Reply:
        with self._lock:
            script = self._scripts.get(path)
        if script is None:
            return Reply(body=PAGE)
        if isinstance(script, Reply):
            return script
        if callable(script):
            return script(number)
        return script[min(number, len(script)) - 1]

    # -- what reached the server ---------------------------------------------

    def _record(self, raw_path: str, path: str, headers: dict[str, str]) -> int:
        with self._lock:
            sent = headers.get(SENT_HEADER)  # when the crawler sent it (sent_stamp.py)
            self._hits.append(Hit(raw_path, float(sent) if sent else time.time(), headers))
            self._counts[path] = self._counts.get(path, 0) + 1
            return self._counts[path]

    def hits(self, path: str | None = None) -> int:
        """Hits on ``path`` (query ignored), or on all paths."""
        with self._lock:
            if path is None:
                return len(self._hits)
            return self._counts.get(path, 0)

    def paths(self) -> list[str]:
        """Every path requested (with query), in arrival order."""
        with self._lock:
            return [hit.path for hit in self._hits]

    def log(self) -> list[Hit]:
        with self._lock:
            return list(self._hits)

    def page_hits(self, prefix: str = "/") -> list[Hit]:
        """Hits on paths starting with ``prefix``, robots.txt excepted, in order."""
        return [h for h in self.log() if h.path.startswith(prefix) and h.path != "/robots.txt"]

    def pages(self) -> list[str]:
        """Paths requested, robots.txt excepted, in arrival order."""
        return [hit.path for hit in self.page_hits()]

    # -- addresses -------------------------------------------------------------

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str = "/") -> str:
        return self.origin + path

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gaps(hits: Iterable[Hit | float]) -> list[float]:
    """Seconds between consecutive arrivals (hits or times), in time order, to the ms."""
    times = sorted(h.time if isinstance(h, Hit) else h for h in hits)
    return [round(b - a, 3) for a, b in pairwise(times)]


_OWN_ADDRESSES = count()


def own_address() -> str:
    """A loopback address few other tests use (127.0.0.20 to 127.0.0.249), for a site
    whose stop or pause, kept by host, must touch no other test's site."""
    return f"127.0.0.{next(_OWN_ADDRESSES) % 230 + 20}"


def refused_port() -> int:
    """A local port nothing listens on (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
