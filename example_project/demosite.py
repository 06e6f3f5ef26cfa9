"""A small multi-origin website for the scrapy-rep demo, served on 127.0.0.1.

Each origin is one port of this process. The site shows what robots.txt can
say to a crawler: rules that forbid some pages, a Crawl-delay, a robots.txt
that answers 503, one that redirects to another origin, and a Sitemap line.

Run it on its own::

    python demosite.py [--access-log FILE]

It prints one JSON line, ``{"origins": {"shop": "http://127.0.0.1:PORT", ...}}``,
then serves until its standard input closes (so it never outlives the process
that started it). Every request is appended to the access log as a JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from string import Template
from typing import IO, Any


@dataclass(frozen=True)
class Resource:
    """What one path answers. ``$name`` in body or headers is replaced by the
    base URL of origin ``name`` (ports are known only once the servers run)."""

    body: str = ""
    status: int = 200
    content_type: str = "text/plain; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Page:
    """An HTML page with links. ``meta_robots`` / ``headers`` leave room for
    page-level directives (<meta name="robots">, X-Robots-Tag)."""

    title: str
    links: tuple[str, ...] = ()
    meta_robots: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def resource(self) -> Resource:
        meta = ""
        if self.meta_robots:
            meta = f'<meta name="robots" content="{html.escape(self.meta_robots)}">'
        items = "".join(
            f'<li><a href="{html.escape(link)}">{html.escape(link)}</a></li>' for link in self.links
        )
        body = (
            f"<!doctype html><html><head><title>{html.escape(self.title)}</title>{meta}"
            f"</head><body><h1>{html.escape(self.title)}</h1><ul>{items}</ul></body></html>"
        )
        return Resource(body, content_type="text/html; charset=utf-8", headers=self.headers)


@dataclass(frozen=True)
class Origin:
    about: str
    paths: Mapping[str, Resource | Page]
    start: bool = True  # the spider starts from this origin's home page


def _robots(text: str) -> Resource:
    return Resource(text.lstrip("\n"))


SHOP_ROBOTS = """
# The shop welcomes crawlers, except in the checkout and the back office.
User-agent: *
Disallow: /cart
Disallow: /private/

User-agent: ExampleBot
Disallow: /cart
Disallow: /private/
Allow: /private/press
Disallow: /*?sort=
"""

SITEMAP_XML = """<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>$maps/</loc></url>
  <url><loc>$maps/guides/1</loc></url>
  <url><loc>$maps/guides/2</loc></url>
  <url><loc>$maps/guides/3</loc></url>
</urlset>
"""

# name -> origin. Names are stable; ports change at every start.
SITE: dict[str, Origin] = {
    "shop": Origin(
        "robots.txt forbids the cart, the back office and sorted listings",
        {
            "/robots.txt": _robots(SHOP_ROBOTS),
            "/": Page(
                "Shop",
                (
                    "/products/1",
                    "/products/2",
                    "/products?sort=price",
                    "/cart",
                    "/private/orders",
                    "/private/press",
                ),
            ),
            "/products/1": Page("Kettle", ("/", "/cart")),
            "/products/2": Page("Teapot", ("/", "/cart")),
            "/products?sort=price": Page("Products by price", ("/products/1",)),
            "/cart": Page("Cart"),
            "/private/orders": Page("Orders"),
            "/private/press": Page("Press kit", ("/",)),
        },
    ),
    "blog": Origin(
        "robots.txt asks for a 1 s Crawl-delay",
        {
            "/robots.txt": _robots("User-agent: *\nCrawl-delay: 1\n"),
            "/": Page("Blog", ("/posts/1", "/posts/2", "/posts/3")),
            "/posts/1": Page("First post", ("/",)),
            "/posts/2": Page("Second post", ("/",)),
            "/posts/3": Page("Third post", ("/",)),
        },
    ),
    "down": Origin(
        "robots.txt answers 503: the origin counts as unreachable",
        {
            "/robots.txt": Resource("Service Unavailable\n", status=503),
            "/": Page("Down", ("/news",)),
            "/news": Page("News"),
        },
    ),
    "moved": Origin(
        "robots.txt redirects to another origin, whose file then applies here",
        {
            "/robots.txt": Resource(
                "Moved\n", status=301, headers={"Location": "$static/robots/moved.txt"}
            ),
            "/": Page("Moved", ("/articles/1", "/drafts/1")),
            "/articles/1": Page("An article", ("/",)),
            "/drafts/1": Page("A draft"),
        },
    ),
    "maps": Origin(
        "robots.txt lists a sitemap",
        {
            "/robots.txt": _robots("User-agent: *\nDisallow:\n\nSitemap: $maps/sitemap.xml\n"),
            "/sitemap.xml": Resource(SITEMAP_XML, content_type="application/xml"),
            "/": Page("Guides", ("/guides/1", "/guides/2")),
            "/guides/1": Page("Guide 1", ("/",)),
            "/guides/2": Page("Guide 2", ("/",)),
            "/guides/3": Page("Guide 3, only in the sitemap", ("/",)),
        },
    ),
    "static": Origin(
        "hosts the robots.txt that 'moved' redirects to; not crawled itself",
        {"/robots/moved.txt": _robots("User-agent: *\nDisallow: /drafts/\n")},
        start=False,
    ),
}

NOT_FOUND = Resource("Not found\n", status=404)


def _handler(
    name: str,
    origin: Origin,
    bases: Callable[[], dict[str, str]],
    log: Callable[[dict[str, Any]], None],
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "demosite"

        def do_GET(self) -> None:
            found = origin.paths.get(self.path, NOT_FOUND)
            resource = found.resource() if isinstance(found, Page) else found
            values = bases()
            body = Template(resource.body).safe_substitute(values).encode()
            headers = {
                key: Template(value).safe_substitute(values)
                for key, value in resource.headers.items()
            }
            record = {
                "t": time.monotonic(),
                "origin": name,
                "path": self.path,
                "status": resource.status,
                "user_agent": self.headers.get("User-Agent", ""),
            }
            if "Location" in headers:
                record["location"] = headers["Location"]
            log(record)
            self.send_response(resource.status)
            self.send_header("Content-Type", resource.content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the JSON access log replaces stderr chatter

    return Handler


class DemoSite:
    """Every origin of ``site`` on its own 127.0.0.1 port, served by threads."""

    def __init__(self, site: Mapping[str, Origin] = SITE, access_log: IO[str] | None = None):
        self.site = site
        self.hits: list[dict[str, Any]] = []
        self._access_log = access_log
        self._lock = threading.Lock()
        self._servers: dict[str, ThreadingHTTPServer] = {}
        self.bases: dict[str, str] = {}

    def _log(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.hits.append(record)
            if self._access_log is not None:
                self._access_log.write(json.dumps(record) + "\n")
                self._access_log.flush()

    def start(self) -> dict[str, str]:
        for name, origin in self.site.items():
            handler = _handler(name, origin, lambda: self.bases, self._log)
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            self._servers[name] = server
            self.bases[name] = f"http://127.0.0.1:{server.server_address[1]}"
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return dict(self.bases)

    def stop(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()

    def start_urls(self) -> list[str]:
        return [f"{self.bases[name]}/" for name, origin in self.site.items() if origin.start]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--access-log", help="append one JSON line per request to this file")
    args = parser.parse_args()
    log = open(args.access_log, "a", encoding="utf-8") if args.access_log else None  # noqa: SIM115
    site = DemoSite(access_log=log)
    bases = site.start()
    print(json.dumps({"origins": bases, "start_urls": site.start_urls()}), flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        sys.stdin.read()  # serve until whoever started us closes our stdin
    site.stop()
    if log is not None:
        log.close()


if __name__ == "__main__":
    main()
