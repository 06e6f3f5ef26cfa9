"""Signals sent by scrapy-rep (connect with ``crawler.signals.connect``).

Their arguments and when each is sent: docs/reference.md, "Signals".
"""

from __future__ import annotations

__all__ = [
    "payment_required",
    "request_forbidden",
    "robotstxt_parsed",
    "site_challenged",
    "sitemaps_found",
    "usage_denied",
]

request_forbidden = object()
robotstxt_parsed = object()
sitemaps_found = object()
usage_denied = object()
site_challenged = object()
payment_required = object()
