"""Origins: the unit robots.txt applies to (RFC 9309 §2.3).

An origin is ``(scheme, host, port)``: the host lowercased and IDNA-encoded,
the port made explicit, so ``http://Example.com`` and ``http://example.com:80``
share one robots.txt. :class:`OriginKeys` memoises each URL's origin: two dict
lookups per request.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from urllib.parse import ParseResult

__all__ = [
    "DEFAULT_PORTS",
    "ROBOTS_PATH",
    "Origin",
    "OriginKeys",
    "origin_of",
    "origin_text",
    "robots_url",
]

DEFAULT_PORTS = {"http": 80, "https": 443}
ROBOTS_PATH = "/robots.txt"


class _Parts(NamedTuple):
    scheme: str
    host: str
    port: int


class Origin(_Parts):
    """``("https", "example.com", 443)``: equal to and hashed as the plain tuple
    (the same dict keys), carrying its :attr:`text` (built once) and :attr:`robots_url`."""

    @cached_property
    def text(self) -> str:
        """``scheme://host[:port]``, the port only when it is not the default one."""
        return _text(*self)

    @property
    def robots_url(self) -> str:
        return self.text + ROBOTS_PATH


def _text(scheme: str, host: str, port: int) -> str:
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if DEFAULT_PORTS.get(scheme) == port:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def _ascii_host(host: str) -> str:
    host = host.lower().rstrip(".")
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def origin_of(parsed: ParseResult) -> Origin | None:
    """The origin of a parsed URL, or None if it has none robots.txt applies to
    (not http/https, no host, invalid port)."""
    scheme = parsed.scheme.lower()
    default_port = DEFAULT_PORTS.get(scheme)
    if default_port is None:
        return None
    host = parsed.hostname
    if not host:
        return None
    try:
        port = parsed.port
    except ValueError:
        return None
    # Port 0 is a port of its own (nothing listens there), not the default one.
    return Origin(scheme, _ascii_host(host), default_port if port is None else port)


def origin_text(origin: tuple[str, str, int]) -> str:
    """``scheme://host[:port]``, the port only when it is not the default one
    (an :class:`Origin` carries it: ``origin.text``)."""
    return origin.text if isinstance(origin, Origin) else _text(*origin)


def robots_url(origin: tuple[str, str, int]) -> str:
    """The origin's robots.txt URL (an :class:`Origin` carries it: ``origin.robots_url``)."""
    return origin_text(origin) + ROBOTS_PATH


class OriginKeys:
    """Memoised ``(scheme, netloc) -> Origin``, emptied when it grows past ``max_size``."""

    __slots__ = ("_by_scheme", "_max_size", "_size")

    def __init__(self, max_size: int = 100_000) -> None:
        self._by_scheme: dict[str, dict[str, Origin | None]] = {}
        self._max_size = max_size
        self._size = 0

    def get(self, parsed: ParseResult) -> Origin | None:
        by_netloc = self._by_scheme.get(parsed.scheme)
        if by_netloc is not None:
            try:
                return by_netloc[parsed.netloc]
            except KeyError:
                pass
        return self._add(parsed)

    def _add(self, parsed: ParseResult) -> Origin | None:
        if self._size >= self._max_size:
            self._by_scheme.clear()
            self._size = 0
        origin = origin_of(parsed)
        self._by_scheme.setdefault(parsed.scheme, {})[parsed.netloc] = origin
        self._size += 1
        return origin
