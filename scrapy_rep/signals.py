"""Signals sent by scrapy-rep (connect with ``crawler.signals.connect``).

``request_forbidden(request, decision, origin)``
    A request was found disallowed (also under ``REP_DRY_RUN``, where it is
    then let through). ``decision`` is a ``scrapy_rep.Decision``.

``robotstxt_parsed(robots, origin, response)``
    A 2xx robots.txt was parsed. ``robots`` is a ``scrapy_rep.RobotsTxt``,
    ``origin`` the origin text (``https://example.com``), ``response`` the
    last response (after redirects).

``sitemaps_found(urls, origin)``
    Sent once per origin, the first time its robots.txt fetch completes,
    with the absolute, deduplicated ``Sitemap:`` URLs (an empty tuple when
    there are none or the robots.txt could not be parsed). Sent again only if
    the origin fell out of the rules cache and was fetched anew.

``usage_denied(request, response, usage, reasons, origin)``
    With ``REP_PURPOSES`` declared: the site's usage preferences deny every
    declared purpose for a request or response (whatever ``REP_USAGE_ACTION``
    then does with it). ``response`` is None when robots.txt alone said so
    before the download (only under ``"drop"``, which then skips it);
    ``usage`` is ``{purpose: False}``, ``reasons`` ``{purpose: (where, ...)}``.

``site_challenged(origin, provider, kind, marker, request, response)``
    A page was answered with a challenge or a block (``kind``:
    ``"challenge"``, ``"block"``), read from a definitive marker (``marker``:
    ``cf-mitigated: challenge``); or, with ``response`` None, an origin was
    found to refuse this crawler (``REP_BLOCK_AFTER`` plain 403s in a row).

``payment_required(request, response, offer)``
    A page was answered 402. ``offer`` is a ``scrapy_rep.stop_signals.StopSignal``
    (``price``, ``scheme``, ``provider``): the hook for a component that
    would pay or sign; scrapy-rep itself never pays.
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
