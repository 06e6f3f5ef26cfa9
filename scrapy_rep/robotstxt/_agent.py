"""The product token robots.txt groups are matched against (RFC 9309 §2.2.1).

``Mozilla/5.0 (compatible; ExampleBot/1.0; +http://...)`` -> ``ExampleBot``; a
browser-like header with no ``compatible;`` product -> None (the caller warns).
As in Google's reference, the token is the leading run of letters, ``_`` and
``-``, so ``Agent5`` is ``Agent``: :func:`cut_short` says what was left out.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[A-Za-z_-]+")
_COMPATIBLE = re.compile(r"\bcompatible\s*;\s*([^;)]*)", re.IGNORECASE)
_BROWSER_PREFIXES = ("mozilla/", "opera/")


def _product(user_agent: str | bytes | None) -> tuple[str, bool] | None:
    """The part of a User-Agent value that names the crawler (the whole value, or
    a browser-like header's ``compatible;`` product), and whether it is the latter;
    None when there is none."""
    if user_agent is None:
        return None
    if isinstance(user_agent, bytes):
        user_agent = user_agent.decode("latin-1")
    text = user_agent.strip()
    if not text.lower().startswith(_BROWSER_PREFIXES):
        return text, False
    compatible = _COMPATIBLE.search(text)
    return (compatible.group(1).strip(), True) if compatible is not None else None


def product_token(user_agent: str | bytes | None) -> str | None:
    """The robots.txt product token of a User-Agent header value, or None."""
    found = _product(user_agent)
    if found is None or not found[0]:
        return None
    product, compatible = found
    if product == "*" and not compatible:
        return "*"
    match = _TOKEN.match(product.strip())
    token = match.group(0) if match else None
    # "compatible; MSIE 6.0" names a browser, not a crawler
    return None if compatible and token is not None and token.upper() == "MSIE" else token


def cut_short(user_agent: str | bytes | None) -> str | None:
    """What follows the product token when it is not a version (``/1.0``) or a
    comment (``(+url)``): ``" Crawler"`` of ``"My Crawler"``, ``"5"`` of
    ``"Agent5"``; None when the token is all the name says."""
    found = _product(user_agent)
    token = product_token(user_agent)
    if found is None or token is None or token == "*":
        return None
    rest = found[0][len(token) :]
    if not rest or rest.startswith("/") or rest.lstrip().startswith(("(", ";")):
        return None
    return rest
