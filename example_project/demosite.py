"""A small multi-origin website for the scrapy-rep demo, served on 127.0.0.1.

Each origin is one port of this process. The site shows what robots.txt can
say to a crawler: rules that forbid some pages, a Crawl-delay, a robots.txt
that answers 503, one that redirects to another origin, and Sitemap lines
(an index, a gzipped and a plain-text sitemap). Pages of one origin speak for
themselves: <meta name="robots">, <meta name="examplebot"> and X-Robots-Tag.
One origin is busy for its first seconds: every page answers 503 with a
Retry-After, as a site that needs crawlers to stop for a while should.

Run it on its own::

    python demosite.py [--access-log FILE]

It prints one JSON line, ``{"origins": {"shop": "http://127.0.0.1:PORT", ...},
"crawls": {"links": ["shop", ...], "sitemaps": ["maps"]}}``, then serves until
its standard input closes (so it never outlives the process that started it).
Every request is appended to the access log as a JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
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
    gzip: bool = False  # send the body gzipped (a .gz file, not Content-Encoding)
    says: tuple[str, ...] = ()  # page-level robots directives, for the access log


@dataclass(frozen=True)
class Page:
    """An HTML page with links, and page-level directives: ``meta`` maps a
    <meta> name ("robots", "examplebot") to its content; ``headers`` may hold
    an X-Robots-Tag."""

    title: str
    links: tuple[str, ...] = ()
    meta: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)

    def resource(self) -> Resource:
        tags = [
            f'<meta name="{html.escape(name)}" content="{html.escape(content)}">'
            for name, content in self.meta.items()
        ]
        said = [f"{key}: {value}" for key, value in self.headers.items() if key == "X-Robots-Tag"]
        meta = "".join(tags)
        items = "".join(
            f'<li><a href="{html.escape(link)}">{html.escape(link)}</a></li>' for link in self.links
        )
        body = (
            f"<!doctype html><html><head><title>{html.escape(self.title)}</title>{meta}"
            f"</head><body><h1>{html.escape(self.title)}</h1><ul>{items}</ul></body></html>"
        )
        return Resource(
            body,
            content_type="text/html; charset=utf-8",
            headers=self.headers,
            says=(*tags, *said),
        )


@dataclass(frozen=True)
class Origin:
    about: str
    paths: Mapping[str, Resource | Page]
    # the demo crawl that starts from this origin: "links" (from its home page),
    # "sitemaps" (from its robots.txt sitemaps), None (not crawled itself)
    crawl: str | None = "links"
    # for this many seconds from its first page request, every page answers
    # 503 with "Retry-After: <retry_after>" (robots.txt answers as usual)
    busy_for: float = 0.0
    retry_after: str = ""


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

# The text sitemap is listed twice (robots.txt and the index): fetched once.
MAPS_ROBOTS = """
User-agent: *
Disallow: /private/

Sitemap: $maps/sitemaps/index.xml
Sitemap: $maps/sitemaps/more.txt
"""

SITEMAP_INDEX = """<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <sitemap><loc>$maps/sitemaps/guides.xml.gz</loc></sitemap>
  <sitemap><loc>$maps/sitemaps/more.txt</loc></sitemap>
</sitemapindex>
"""

GUIDES_SITEMAP = """<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>$maps/</loc></url>
  <url><loc>$maps/guides/1</loc></url>
  <url><loc>$maps/guides/2</loc></url>
  <url><loc>$maps/guides/3</loc></url>
</urlset>
"""

# a plain-text sitemap: one URL a line; robots.txt disallows the second
MORE_SITEMAP = """$maps/faq
$maps/private/notes
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
    "news": Origin(
        "pages that say nofollow or noindex: <meta name=robots|examplebot>, X-Robots-Tag",
        {
            "/robots.txt": _robots("User-agent: *\nDisallow:\n"),
            "/": Page("News", ("/story/1", "/story/2", "/archive", "/topics")),
            # noindex, for this crawler only: the page is kept, flagged; its links are followed
            "/story/1": Page("Embargoed story", ("/story/3",), meta={"examplebot": "noindex"}),
            # another crawler's tag: not ours to obey
            "/story/2": Page("Story", ("/story/4",), meta={"otherbot": "noindex, nofollow"}),
            "/story/3": Page("Linked from the embargoed story", ("/",)),
            "/story/4": Page("Linked from the story", ("/",)),
            "/archive": Page(
                "Archive", ("/archive/2024", "/archive/2025"), meta={"robots": "nofollow"}
            ),
            "/archive/2024": Page("2024"),
            "/archive/2025": Page("2025"),
            "/topics": Page(
                "Topics", ("/topics/python", "/topics/web"), headers={"X-Robots-Tag": "nofollow"}
            ),
            "/topics/python": Page("Python"),
            "/topics/web": Page("Web"),
        },
    ),
    "maps": Origin(
        "robots.txt lists a sitemap index (-> a gzipped and a text sitemap) and the text one",
        {
            "/robots.txt": _robots(MAPS_ROBOTS),
            "/sitemaps/index.xml": Resource(SITEMAP_INDEX, content_type="application/xml"),
            "/sitemaps/guides.xml.gz": Resource(
                GUIDES_SITEMAP, content_type="application/gzip", gzip=True
            ),
            "/sitemaps/more.txt": Resource(MORE_SITEMAP),
            "/": Page("Guides", ("/guides/1", "/guides/2")),
            "/guides/1": Page("Guide 1", ("/",)),
            "/guides/2": Page("Guide 2", ("/",)),
            "/guides/3": Page("Guide 3", ("/",)),
            "/faq": Page("FAQ", ("/",)),
            "/private/notes": Page("Private notes"),
        },
        crawl="sitemaps",
    ),
    "busy": Origin(
        "overloaded for 3 s: every page answers 503 with Retry-After: 2",
        {
            "/robots.txt": _robots("User-agent: *\nDisallow:\n"),
            "/": Page("Busy", ("/today", "/tomorrow")),
            "/today": Page("Today", ("/",)),
            "/tomorrow": Page("Tomorrow", ("/",)),
        },
        busy_for=3.0,
        retry_after="2",
    ),
    "static": Origin(
        "hosts the robots.txt that 'moved' redirects to; not crawled itself",
        {"/robots/moved.txt": _robots("User-agent: *\nDisallow: /drafts/\n")},
        crawl=None,
    ),
}

NOT_FOUND = Resource("Not found\n", status=404)


class _Busy:
    """When an origin's busy time started: at its first page request."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.since: float | None = None
        self.lock = threading.Lock()

    def now(self, path: str) -> bool:
        if not self.origin.busy_for or path == "/robots.txt":
            return False
        now = time.monotonic()
        with self.lock:
            if self.since is None:
                self.since = now
        return now - self.since < self.origin.busy_for


def _handler(
    name: str,
    origin: Origin,
    bases: Callable[[], dict[str, str]],
    log: Callable[[dict[str, Any]], None],
) -> type[BaseHTTPRequestHandler]:
    busy = _Busy(origin)

    class Handler(BaseHTTPRequestHandler):
        server_version = "demosite"

        def do_GET(self) -> None:
            found = origin.paths.get(self.path, NOT_FOUND)
            resource = found.resource() if isinstance(found, Page) else found
            if busy.now(self.path):
                resource = Resource(
                    "Busy: come back later\n",
                    status=503,
                    headers={"Retry-After": origin.retry_after},
                )
            values = bases()
            body = Template(resource.body).safe_substitute(values).encode()
            if resource.gzip:
                body = gzip.compress(body, mtime=0)
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
            if "Retry-After" in headers:
                record["retry_after"] = headers["Retry-After"]
            if resource.says:
                record["says"] = list(resource.says)
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

    def crawls(self) -> dict[str, list[str]]:
        """Demo crawl -> the names of the origins it starts from."""
        crawls: dict[str, list[str]] = {}
        for name, origin in self.site.items():
            if origin.crawl is not None:
                crawls.setdefault(origin.crawl, []).append(name)
        return crawls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--access-log", help="append one JSON line per request to this file")
    args = parser.parse_args()
    log = open(args.access_log, "a", encoding="utf-8") if args.access_log else None  # noqa: SIM115
    site = DemoSite(access_log=log)
    bases = site.start()
    print(json.dumps({"origins": bases, "crawls": site.crawls()}), flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        sys.stdin.read()  # serve until whoever started us closes our stdin
    site.stop()
    if log is not None:
        log.close()


if __name__ == "__main__":
    main()
