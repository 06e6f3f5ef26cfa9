"""URL paths as robots.txt rules see them (RFC 9309 §2.2.2).

Both sides of a comparison are brought to one form before matching:
percent-escapes of unreserved characters are decoded, other escapes get
upper-case hex, and characters that may not stand raw in a URL (non-ASCII ones
as UTF-8, controls, space and '"<>\\^`{|}') are percent-encoded. On the URL
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
# '%'. '*' and '$' are reserved too but have a meaning in patterns (below).
_AS_IS = r"A-Za-z0-9\-._~:/?#\[\]@!&'()+,;=%"
# A path needs work when it holds anything else.
_PATH_NEEDS_WORK = re.compile(f"[^{_AS_IS}]")
# %XX escapes, runs of characters to percent-encode (non-ASCII, controls,
# space, '"<>\\^`{|}'), and '*' and '$' (URL side) or a non-final '$' (patterns).
_PATH_TOKENS = re.compile(f"%([0-9A-Fa-f]{{2}})|([^{_AS_IS}*$]+)|([*$])")
_PATTERN_TOKENS = re.compile(f"%([0-9A-Fa-f]{{2}})|([^{_AS_IS}*$]+)|(\\$)")


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
    out: list[str] = []
    for char in run:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # a raw byte kept by surrogateescape
            octets = bytes((code - 0xDC00,))
        else:
            octets = char.encode("utf-8", "surrogatepass")
        out.extend(f"%{octet:02X}" for octet in octets)
    return "".join(out)


def _normalize_token(match: re.Match[str]) -> str:
    hex_digits, non_ascii, special = match.groups()
    if hex_digits is not None:
        char = chr(int(hex_digits, 16))
        return char if char in _UNRESERVED else "%" + hex_digits.upper()
    if non_ascii is not None:
        return _percent_encode(non_ascii)
    return "%2A" if special == "*" else "%24"


def normalize_path(path: str) -> str:
    """Normalise a URL path for comparison with rule patterns."""
    if "%" not in path and _PATH_NEEDS_WORK.search(path) is None:
        return path
    return _PATH_TOKENS.sub(_normalize_token, path)


def normalize_pattern(pattern: str) -> str:
    """Normalise a rule pattern; ``*`` stays a wildcard and a final ``$`` an anchor."""
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    if "%" in body or "$" in body or _PATH_NEEDS_WORK.search(body.replace("*", "")):
        body = _PATTERN_TOKENS.sub(_normalize_token, body)
    return body + "$" if anchored else body
