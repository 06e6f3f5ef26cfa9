"""Many small websites in one process, for crawl benchmarks.

Each origin is its own loopback address (127.0.1.1, 127.0.1.2, ...) with its
own port, so Scrapy gives each one its own download slot as it would real
hosts. Where only 127.0.0.1 can be bound (macOS), origins are ports of
127.0.0.1 and the result says so (``shared_host``), so that the crawler can
key download slots by port.

Every origin serves the same robots.txt (allowing most pages, disallowing
``/private``) and the same PAGES pages, each linking to others of its origin.
HTTP/1.1 with keep-alive, written on asyncio's Protocol API so that the server
costs far less CPU per request than the crawler and never sets the pace.

``python _site.py N`` prints one JSON line (the origins' base URLs and the
expected counts) and serves until its stdin closes. ``GET /__stats`` on any
origin answers what was served so far (and the server's CPU seconds);
``GET /__reset`` zeroes the counters.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from typing import Any

PAGES = 20  # per origin: "/", /p/1 .. /p/18, /private/account
ROBOTS_TXT = b"""# One of many benchmark sites.
User-agent: *
Disallow: /private
Disallow: /search
Allow: /search/about
Disallow: /*.pdf$
Disallow: /cgi-bin/
Disallow: /tmp/

User-agent: GreedyBot
Disallow: /
"""


def _page_paths() -> list[str]:
    return ["/", *(f"/p/{n}" for n in range(1, PAGES - 1)), "/private/account"]


PATHS = _page_paths()
DISALLOWED = {b"/private/account"}
FILLER = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 20


def _page(path: str) -> bytes:
    if path == "/":
        links = PATHS[1:]
    else:  # a few links each, to home and onwards, as sites do
        here = PATHS.index(path)
        links = ["/", *PATHS[here + 1 : here + 3]]
    anchors = "".join(f'<li><a href="{link}">{link}</a></li>' for link in links)
    return (
        f"<!doctype html><html><head><title>{path}</title></head><body>"
        f"<ul>{anchors}</ul><p>{FILLER}</p></body></html>"
    ).encode()


def _response(status: str, body: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


RESPONSES = {
    b"/robots.txt": _response("200 OK", ROBOTS_TXT, "text/plain"),
    **{path.encode(): _response("200 OK", _page(path), "text/html") for path in PATHS},
}
NOT_FOUND = _response("404 Not Found", b"not found\n", "text/plain")


class Counts:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.robots: Counter[int] = Counter()  # origin index -> robots.txt requests
        self.pages = 0
        self.disallowed = 0
        self.other = 0
        self.connections = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "robots_requests": sum(self.robots.values()),
            "robots_origins": len(self.robots),
            "robots_max_per_origin": max(self.robots.values(), default=0),
            "pages": self.pages,
            "disallowed_pages": self.disallowed,
            "other": self.other,
            "connections": self.connections,
            "cpu_seconds": time.process_time(),
        }


class SiteProtocol(asyncio.Protocol):
    def __init__(self, origin: int, counts: Counts) -> None:
        self.origin = origin
        self.counts = counts
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.counts.connections += 1

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            parts = head.split(b" ", 2)  # GET requests only: no bodies to skip
            path = parts[1] if len(parts) > 1 else b"/"
            self.transport.write(self._answer(path))

    def _answer(self, path: bytes) -> bytes:
        counts = self.counts
        if path == b"/robots.txt":
            counts.robots[self.origin] += 1
            return RESPONSES[path]
        found = RESPONSES.get(path)
        if found is not None:
            counts.pages += 1
            if path in DISALLOWED:
                counts.disallowed += 1
            return found
        if path in (b"/__stats", b"/__reset"):
            if path == b"/__reset":
                counts.reset()
            body = json.dumps(counts.as_dict()).encode()
            return _response("200 OK", body, "application/json")
        counts.other += 1
        return NOT_FOUND


def raise_open_files_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = 65536 if hard == resource.RLIM_INFINITY else hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def loopback_hosts(count: int) -> tuple[list[str], bool]:
    """Distinct loopback addresses if this system routes 127/8 (Linux), else
    127.0.0.1 for all; the flag says whether origins share one host."""
    probe = socket.socket()
    try:
        probe.bind(("127.0.1.1", 0))
    except OSError:
        return ["127.0.0.1"] * count, True
    finally:
        probe.close()
    return [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(count)], False


async def serve(count: int) -> None:
    limit = raise_open_files_limit()
    if limit < count * 10:
        print(f"warning: open files limit {limit} is low for {count} origins", file=sys.stderr)
    loop = asyncio.get_running_loop()
    counts = Counts()
    hosts, shared_host = loopback_hosts(count)
    servers = []
    origins = []
    for index, host in enumerate(hosts):
        server = await loop.create_server(
            lambda index=index: SiteProtocol(index, counts), host, 0, backlog=1024
        )
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        origins.append(f"http://{host}:{port}")
    ready = {
        "origins": origins,
        "shared_host": shared_host,
        "pages_per_origin": PAGES,
        "disallowed_per_origin": len(DISALLOWED),
    }
    print(json.dumps(ready), flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until our parent closes stdin
    for server in servers:
        server.close()


class ServerProcess:
    """A benchmark's local server in its own process: started with ``argv``, it
    prints one JSON line (its origins...) when ready and exits when its stdin
    closes."""

    def __init__(self, *argv: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.info: dict[str, Any] = json.loads(self.proc.stdout.readline())

    def control(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.info["origins"][0] + path, timeout=30) as response:
            return dict(json.load(response))

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Site(ServerProcess):
    """benchmarks/_site.py in its own process; it exits when its stdin closes."""

    def __init__(self, origins: int) -> None:
        super().__init__(__file__, str(origins))


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 500))
