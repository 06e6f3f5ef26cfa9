"""URL paths as robots.txt rules see them (RFC 9309 §2.2.2).

Both sides of a comparison are brought to one form before matching:
percent-escapes of unreserved characters are decoded, other escapes get
upper-case hex, and non-ASCII characters are UTF-8 percent-encoded. On the URL
side a literal ``*`` or ``$`` becomes ``%2A`` / ``%24`` (RFC 9309 §2.2.3), so
that a rule can name them without their special meaning. Lone surrogates from
robots.txt bodies decoded with ``surrogateescape`` encode back to their
original bytes, so invalid UTF-8 keeps its exact octets.
"""

from __future__ import annotations

import re

__all__ = ["normalize_path", "normalize_pattern", "path_of"]

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

# What stands before the path: "scheme://authority", "//authority" or a bare host.
_BEFORE_PATH = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.\-]*://|//)?[^/?;#]*")

# %XX escapes, runs of non-ASCII characters, and (URL side only) '*' and '$'.
_PATH_TOKENS = re.compile(r"%([0-9A-Fa-f]{2})|([^\x00-\x7f]+)|([*$])")
_PATTERN_TOKENS = re.compile(r"%([0-9A-Fa-f]{2})|([^\x00-\x7f]+)|(\$)")


def path_of(url: str) -> str:
    """The path, params and query of ``url``, without the fragment; "/" at least.

    Accepts absolute URLs ("https://h/a?b") and path-absolute ones ("/a?b"),
    and extracts the path the way Google's reference matcher does.
    """
    if url[:1] == "/" and url[1:2] != "/":
        path = url
    else:
        match = _BEFORE_PATH.match(url)
        path = url[match.end() :] if match else url
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
    if path.isascii() and "%" not in path and "*" not in path and "$" not in path:
        return path
    return _PATH_TOKENS.sub(_normalize_token, path)


def normalize_pattern(pattern: str) -> str:
    """Normalise a rule pattern; ``*`` stays a wildcard and a final ``$`` an anchor."""
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    if not body.isascii() or "%" in body or "$" in body:
        body = _PATTERN_TOKENS.sub(_normalize_token, body)
    return body + "$" if anchored else body
