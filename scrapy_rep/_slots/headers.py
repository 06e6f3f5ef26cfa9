"""A bound on the status line and headers of scrapy-rep's own downloads: a PROCESS-WIDE patch.

Twisted's HTTP/1.1 client bounds each header line but not their number: a
server streaming header lines for the whole timeout took a crawler to almost
500 MB. :func:`install` patches ``HTTPClientParser.dataReceived`` once per
process (the bound: the smallest ``REP_HEADERS_MAX`` of its crawls; 0 leaves
Twisted unpatched): every response's header bytes are counted, but only one
to a URL scrapy-rep downloads itself is given up, registered by the download
core when it reaches the downloader (:func:`bound_headers`) and released when
it ends. docs/robotstxt.md says it for users. Twisted has no public hook for
this (as of 26.10): what :func:`install` needs and does not find is reported.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import urldefrag

_limit: list[int] = []  # the bound, once installed: the smallest any crawl asked for

_bounded: Counter[bytes] = Counter()  # absolute URIs as Twisted's parser sees them


class ResponseHeadersTooLarge(Exception):
    """An answer to scrapy-rep's own request sent more header bytes than its bound."""


def _key(url: str) -> bytes | None:
    """``url`` as ``Request.absoluteURI`` gives it to the parser (Scrapy's HTTP/1.1
    handler sends the URL without its fragment; Twisted's URI rebuilds it)."""
    from twisted.web.client import URI

    try:
        uri: Any = URI.fromBytes(urldefrag(url)[0].encode("ascii"))  # type: ignore[no-untyped-call]
        return bytes(uri.toBytes())
    except (UnicodeEncodeError, ValueError):  # Scrapy would not send it either
        return None


def bound_headers(url: str) -> bytes | None:
    """Bound the headers of the answer to ``url`` until :func:`release` (the
    returned key; None when the URL cannot be sent, or no bound is installed)."""
    key = _key(url) if _limit else None
    if key is not None:
        _bounded[key] += 1
    return key


def release(key: bytes | None) -> None:
    """End one :func:`bound_headers` of ``key``."""
    if key is not None and _bounded[key] > 0:
        _bounded[key] -= 1
        if not _bounded[key]:
            del _bounded[key]


def install(limit: int) -> str | None:
    """Patch Twisted's parser (once per process) to bound the headers of
    registered answers to ``limit`` bytes (the smallest limit of all calls;
    0: this crawl bounds nothing); None when done, else what is missing."""
    if limit <= 0:
        return None
    try:
        from twisted.web import _newclient
        from twisted.web.client import URI
    except ImportError:  # pragma: no cover
        return "twisted.web._newclient is missing"
    parser = getattr(_newclient, "HTTPClientParser", None)
    states = (getattr(_newclient, "STATUS", None), getattr(_newclient, "HEADER", None))
    original = getattr(parser, "dataReceived", None)
    request = getattr(_newclient, "Request", None)
    if (
        parser is None
        or None in states
        or original is None
        or not isinstance(getattr(request, "absoluteURI", None), property)
        or not hasattr(URI, "toBytes")
    ):
        return (
            "twisted.web._newclient.HTTPClientParser (dataReceived, STATUS, HEADER) "
            "or Request.absoluteURI changed"
        )
    if _limit:
        _limit[0] = min(_limit[0], limit)
    else:
        _limit.append(limit)
    if getattr(original, "_rep_limited", False):
        return None

    def dataReceived(self: Any, data: bytes) -> None:  # Twisted's name
        if self.state in states:
            seen = self.__dict__.get("_rep_header_bytes", 0) + len(data)
            self._rep_header_bytes = seen
            if seen > _limit[0] and _bounded and _is_bounded(self):
                # the protocol gives up on the response and closes the connection
                raise ResponseHeadersTooLarge(f"answer headers over {_limit[0]} bytes")
        original(self, data)

    dataReceived._rep_limited = True  # type: ignore[attr-defined]
    parser.dataReceived = dataReceived
    return None


def _is_bounded(parser: Any) -> bool:
    try:
        uri = parser.request.absoluteURI
    except AttributeError:
        return False
    return isinstance(uri, bytes) and uri in _bounded
