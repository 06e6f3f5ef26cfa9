"""The product token robots.txt groups are matched against (RFC 9309 §2.2.1).

``ExampleBot/1.0 (+http://example.com/bot)`` -> ``ExampleBot``;
``Mozilla/5.0 (compatible; ExampleBot/1.0; +http://...)`` -> ``ExampleBot``;
a browser-like header with no ``compatible;`` product -> None (the caller warns).
Like Google's reference matcher, the token is the leading run of letters,
``_`` and ``-`` (the characters RFC 9309 allows in a product token).
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[A-Za-z_-]+")
_COMPATIBLE = re.compile(r"\bcompatible\s*;\s*([^;)]*)", re.IGNORECASE)
_BROWSER_PREFIXES = ("mozilla/", "opera/")


def _leading_token(text: str) -> str | None:
    match = _TOKEN.match(text.strip())
    return match.group(0) if match else None


def product_token(user_agent: str | bytes | None) -> str | None:
    """The robots.txt product token of a User-Agent header value, or None."""
    if user_agent is None:
        return None
    if isinstance(user_agent, bytes):
        user_agent = user_agent.decode("latin-1")
    text = user_agent.strip()
    if not text:
        return None
    if text == "*":
        return "*"
    if text.lower().startswith(_BROWSER_PREFIXES):
        compatible = _COMPATIBLE.search(text)
        if compatible is None:
            return None
        token = _leading_token(compatible.group(1))
        # "compatible; MSIE 6.0" names a browser, not a crawler
        return None if token is None or token.upper() == "MSIE" else token
    return _leading_token(text)
