"""URL paths as robots.txt rules see them (RFC 9309 §2.2.2).

Both sides of a comparison are brought to one form before matching:
percent-escapes of unreserved characters are decoded, other escapes get
upper-case hex, and characters that may not stand raw in a URL (non-ASCII ones
as UTF-8, controls, space and '"<>[\\]^`{|}') are percent-encoded. On the URL
side a literal ``*`` or ``$`` becomes ``%2A`` / ``%24`` (RFC 9309 §2.2.3), so
that a rule can name them without their special meaning. Lone surrogates from
robots.txt bodies decoded with ``surrogateescape`` encode back to their
original bytes, so invalid UTF-8 keeps its exact octets.
"""

from __future__ import annotations

import re

__all__ = ["normalize_path", "normalize_pattern", "path_of"]

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

# The first character after the authority that ends it.
_PATH_START = re.compile(r"[/?;#]")

# Characters compared as they are: unreserved and reserved ones (RFC 3986), and
# '%'. '*' and '$' are reserved too but have a meaning in patterns (below);
# '[' and ']' are reserved for hosts only and never stand raw in a path or query
# that Scrapy sends, so they are compared in their escaped form.
_AS_IS = r"A-Za-z0-9\-._~:/?#@!&'()+,;=%"
# Anything else must be percent-encoded: non-ASCII (as UTF-8), controls, space
# and '"<>[\\]^`{|}'. A '*' is left alone here: in patterns it is the wildcard,
# and the URL side has already turned its own into "%2A".
_TO_ENCODE = re.compile(f"[^{_AS_IS}*$]+")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def path_of(url: str) -> str:
    """The path, params and query of ``url``, without the fragment; "/" at least.

    Accepts absolute URLs ("https://h/a?b") and path-absolute ones ("/a?b"),
    and extracts the path the way Google's reference matcher does.
    """
    if url[:1] == "/" and url[1:2] != "/":
        path = url
    else:
        start = url.find("://")
        start = start + 3 if start >= 0 else (2 if url[:2] == "//" else 0)
        found = _PATH_START.search(url, start)
        if found is None:
            return "/"
        path = url[found.start() :]
    cut = path.find("#")
    if cut >= 0:
        path = path[:cut]
    if path[:1] != "/":
        path = "/" + path
    return path


def _percent_encode(run: str) -> str:
    try:
        octets = run.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        octets = run.encode("utf-8", "surrogatepass")
    return "%" + octets.hex("%").upper()


def _normalize_escape(match: re.Match[str]) -> str:
    char = chr(int(match[1], 16))
    return char if char in _UNRESERVED else "%" + match[1].upper()


def _normalize(text: str) -> str:
    """Escapes in one form, and percent-encoding where it is due ('$' excepted)."""
    if "%" in text:
        text = _ESCAPE.sub(_normalize_escape, text)
    if _TO_ENCODE.search(text) is not None:
        text = _TO_ENCODE.sub(lambda run: _percent_encode(run[0]), text)
    return text


def normalize_path(path: str) -> str:
    """Normalise a URL path for comparison with rule patterns."""
    if "*" in path:
        path = path.replace("*", "%2A")
    if "$" in path:
        path = path.replace("$", "%24")
    return _normalize(path)


def normalize_pattern(pattern: str) -> str:
    """Normalise a rule pattern; ``*`` stays a wildcard and a final ``$`` an anchor."""
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    if "$" in body:
        body = body.replace("$", "%24")
    body = _normalize(body)
    return body + "$" if anchored else body
