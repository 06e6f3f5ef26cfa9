"""What differs between the Scrapy releases scrapy-rep supports (2.14 and later).

Each shim names the release that makes it unnecessary: once the floor reaches
it, call Scrapy directly and delete the shim. :func:`check` fails at start,
naming the installed Scrapy, when something scrapy-rep needs is missing.
Scrapy's engine and download-slot internals are not here but in ``_slots/``.
Importing this module never fails on a supported Scrapy.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scrapy
from scrapy import signals
from scrapy.spiders.sitemap import iterloc
from scrapy.utils.misc import load_object

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Headers, Response
    from scrapy.robotstxt import RobotParser
    from scrapy.settings import BaseSettings
    from scrapy.spiders import SitemapSpider

FLOOR = (2, 14)
SCRAPY_VERSION: str = scrapy.__version__


def _release(version: str) -> tuple[int, ...]:
    """(2, 15, 1) for "2.15.1"; (2, 20, 0) for "2.20.0.dev1"."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


# What scrapy-rep calls and no Scrapy older than the floor has: (module, name, since).
_NEEDED = (
    ("scrapy.core.engine", "ExecutionEngine.download_async", "2.14"),
    ("scrapy.signalmanager", "SignalManager.send_catch_log_async", "2.14"),
    ("scrapy.utils.asyncio", "call_later", "2.14"),
    ("scrapy.utils.asyncio", "create_looping_call", "2.14"),
    ("scrapy.utils.asyncio", "is_asyncio_available", "2.14"),
    ("scrapy.spiders", "Spider.start", "2.13"),
    ("scrapy.settings", "BaseSettings.setdefault_in_component_priority_dict", "2.13"),
    # private, relied on by RobotsSitemapSpider
    ("scrapy.spiders", "SitemapSpider._get_sitemap_body", "private"),
)


def problems() -> list[str]:
    """What scrapy-rep needs and the installed Scrapy lacks (empty: all there)."""
    found = []
    if _release(SCRAPY_VERSION) < FLOOR:
        found.append(f"Scrapy {SCRAPY_VERSION} is older than {'.'.join(map(str, FLOOR))}")
    for module_name, path, since in _NEEDED:
        try:
            value: Any = importlib.import_module(module_name)
            for name in path.split("."):
                value = getattr(value, name)
        except (ImportError, AttributeError):
            origin = "a private API" if since == "private" else f"new in Scrapy {since}"
            found.append(f"{module_name}.{path} is missing ({origin})")
    return found


def check() -> None:
    """Raise RuntimeError naming the installed Scrapy if :func:`problems` finds
    any (not NotConfigured: Scrapy would quietly run without the component)."""
    found = problems()
    if found:
        raise RuntimeError(
            f"scrapy-rep cannot run with the installed Scrapy {SCRAPY_VERSION}: "
            + "; ".join(found)
            + f". Install Scrapy >= {'.'.join(map(str, FLOOR))}."
        )


# -- component priority dicts ---------------------------------------------------


def set_component(
    settings: BaseSettings,
    name: str,
    cls: type,
    order: int | None,
    *,
    default: bool = False,
    path: str | None = None,
) -> None:
    """``settings.set_in_component_priority_dict`` (``setdefault_...`` if
    ``default``), then keyed by its import path (``path``, else its module's):
    on 2.14 a class key does not override ``NAME_BASE``'s path key of the
    same class, only a path does (and Scrapy's "Enabled middlewares" log shows it)."""
    if default:
        settings.setdefault_in_component_priority_dict(name, cls, order)
    else:
        settings.set_in_component_priority_dict(name, cls, order)
    components = settings.getdict(name)
    if cls in components:
        components[path or f"{cls.__module__}.{cls.__qualname__}"] = components.pop(cls)
        settings.set(name, components, settings.getpriority(name) or 0)


def downloader_middlewares(settings: BaseSettings) -> list[tuple[Any, float]]:
    """The enabled downloader middlewares, base included, as the installed
    Scrapy builds them: (class, or the key if it does not load; order), in order.
    get_component_priority_dict_with_base is 2.15.1's; before, getwithbase
    (on 2.14 a class key and its import path are two middlewares, both built)."""
    merge = getattr(settings, "get_component_priority_dict_with_base", None)
    name = "DOWNLOADER_MIDDLEWARES"
    merged = merge(name) if merge is not None else settings.getwithbase(name)
    enabled: list[tuple[Any, float]] = []
    for key, order in merged.items():
        if order is not None:
            try:
                enabled.append((load_object(key) if isinstance(key, str) else key, order))
            except (ImportError, NameError, ValueError, AttributeError):
                enabled.append((key, order))
    return sorted(enabled, key=lambda pair: pair[1])  # stable, as Scrapy's sort


# -- requests ------------------------------------------------------------------

if isinstance(getattr(scrapy.Request, "headers", None), property):
    # Scrapy 2.19 builds Request.headers on first use (~5 us): look without building.

    def headers_if_any(request: Request) -> Headers | None:
        """The request's headers, or None when it has none yet."""
        return request._headers  # type: ignore[attr-defined, no-any-return]

else:  # Scrapy 2.14-2.18: an attribute every request has. Unnecessary from 2.19.

    def headers_if_any(request: Request) -> Headers | None:
        """The request's headers, or None when it has none yet."""
        return request.headers


# -- download slots --------------------------------------------------------------


def _slot_clock() -> Callable[[], float]:
    # Scrapy 2.19 stamps Slot.lastseen with time.monotonic(); 2.14 with time.time().
    # Unnecessary once the floor stamps it with monotonic().
    downloader = importlib.import_module("scrapy.core.downloader")
    return time.monotonic if "monotonic" in vars(downloader) else time.time


SLOT_CLOCK: Callable[[], float] = _slot_clock()
"""The clock of ``Slot.lastseen`` (when a download slot last started a request)."""


def remove_slot_dir(key: str, slot: str) -> None:
    """Remove the directory of a download slot's disk queues once they are empty,
    as Scrapy 2.19's DownloaderAwarePriorityQueue does (2.14 leaves it behind);
    kept if files remain. Unnecessary once the floor's queue is reused for it."""
    from scrapy.pqueues import _path_safe

    with contextlib.suppress(OSError):
        Path(key, _path_safe(slot)).rmdir()


def peek_priority_queue(queue: Any) -> Any:
    """``ScrapyPriorityQueue.peek()``, which raises KeyError (Scrapy 2.14 to
    2.19) when the priority it points at has no queue left, as after the last
    request of a priority that also had start requests: its ``pop`` moves on
    then, its ``peek`` does not. Unnecessary once Scrapy's peek does too."""
    try:
        return queue.peek()
    except KeyError:
        queue._update_curprio()
        return queue.peek()


# -- signals -------------------------------------------------------------------

ROBOTS_PARSED: object | None = getattr(signals, "robots_parsed", None)
"""Scrapy's ``robots_parsed(robotparser, request)`` signal; None before Scrapy 2.18."""


async def send_robots_parsed(crawler: Crawler, robotparser: RobotParser, request: Request) -> None:
    """Send Scrapy's robots_parsed signal; nothing before Scrapy 2.18."""
    if ROBOTS_PARSED is not None:
        await crawler.signals.send_catch_log_async(
            signal=ROBOTS_PARSED, robotparser=robotparser, request=request
        )


# -- SitemapSpider -------------------------------------------------------------


def sitemap_body(spider: SitemapSpider, response: Response) -> bytes | None:
    """The sitemap in ``response`` (gunzipped, bounded by DOWNLOAD_MAXSIZE), or
    None: SitemapSpider's private ``_get_sitemap_body``, checked by :func:`check`."""
    body: bytes | None = spider._get_sitemap_body(response)
    return body


def sitemapindex_urls(spider: SitemapSpider, entries: Iterable[dict[str, Any]]) -> Iterator[str]:
    """Sitemap URLs of an index that ``sitemap_follow`` lets through.
    SitemapSpider._get_urls_from_sitemapindex from 2.15."""
    own = getattr(spider, "_get_urls_from_sitemapindex", None)
    if own is not None:
        return iter(own(entries))
    follow = spider._follow
    return (
        url
        for url in iterloc(entries, spider.sitemap_alternate_links)
        if url and any(pattern.search(url) for pattern in follow)
    )


def urlset_urls_and_callbacks(
    spider: SitemapSpider, entries: Iterable[dict[str, Any]]
) -> Iterator[tuple[str, Callable[..., Any]]]:
    """(page URL, callback of its first ``sitemap_rules`` match) of a urlset.
    SitemapSpider._get_urls_and_callbacks_from_urlset from 2.15."""
    own = getattr(spider, "_get_urls_and_callbacks_from_urlset", None)
    if own is not None:
        return iter(own(entries))
    rules = spider._cbs
    found = (
        (url, next((cb for pattern, cb in rules if pattern.search(url)), None))
        for url in iterloc(entries, spider.sitemap_alternate_links)
        if url  # Scrapy 2.15 skips empty <loc> too
    )
    return ((url, callback) for url, callback in found if callback is not None)


# -- download errors -------------------------------------------------------------


def _timeout_errors() -> tuple[type[BaseException], ...]:
    from twisted.internet.error import TimeoutError as ConnectTimeout

    # Scrapy 2.15 raises its own class for a download past download_timeout
    own = getattr(importlib.import_module("scrapy.exceptions"), "DownloadTimeoutError", None)
    return (ConnectTimeout, own) if isinstance(own, type) else (ConnectTimeout,)


TIMEOUT_ERRORS = _timeout_errors()
"""What a download that ran out of time raises (Twisted's class on 2.14)."""
