"""What the robots middleware checks, and says, when a crawl starts.

Its lines go to the middleware's logger (``scrapy_rep.middleware``): they are
the middleware's, whichever module holds the code.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured

from scrapy_rep import _compat, _per_ip, decompression
from scrapy_rep._context import crawl_context
from scrapy_rep._download import handlers_count_bytes
from scrapy_rep._slots import headers
from scrapy_rep.config import Config, UnreachableMode
from scrapy_rep.exceptions import InvalidSetting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger("scrapy_rep.middleware")

SCRAPY_MIDDLEWARE = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"
ADDON = "scrapy_rep.addon.Addon"
_UNREACHABLE_ACTIONS: dict[UnreachableMode, str] = {
    "disallow": "dropped",
    "allow": "let through",
    "defer": "kept",
}


def checked_config(crawler: Crawler) -> Config:
    """The crawl's settings, once checked and what a user should know logged: an
    unsupported Scrapy or an invalid setting stops the crawl (one ERROR line
    first), ROBOTSTXT_OBEY = False raises NotConfigured."""
    _compat.check()
    try:
        config = crawl_context(crawler).config
        if config.obey:
            _per_ip.check(crawler.settings)
    except InvalidSetting as exc:  # one clean line before Scrapy's traceback
        logger.error("Cannot start: %s", exc)
        raise
    if not config.obey:
        logger.info("ROBOTSTXT_OBEY is False: robots.txt is not obeyed")
        raise NotConfigured
    for warning in config.warnings:
        logger.warning("%s", warning)
    _warn_if_scrapy_middleware_enabled(crawler)
    missing = headers.install(config.headers_max)
    if missing is not None:
        logger.error(
            "The headers of robots.txt and tdmrep.json answers cannot be bounded "
            "with this Twisted (%s): a server streaming headers can take much "
            "memory (REP_HEADERS_MAX = 0 silences this)",
            missing,
        )
    logger.info(
        "Obeying robots.txt as %r; when an origin's robots.txt is "
        "unreachable its requests are %s (REP_UNREACHABLE = %r)%s",
        config.user_agent,
        _UNREACHABLE_ACTIONS[config.unreachable],
        config.unreachable,
        "; dry run: nothing is dropped, would-be drops are counted under rep/dry_run/"
        if config.dry_run
        else "",
    )
    return config


def uncapped(settings: BaseSettings, *, warn: bool = True) -> bool:
    """Whether robots.txt answers may pass DOWNLOAD_MAXSIZE: our own bounds
    (size cap, bounded decoding) hold; else Scrapy's limits stay (and, with
    ``warn``, one WARNING says why)."""
    problem = decompression.problem(settings)
    if problem is not None:
        if warn:
            logger.warning(
                "%s: compressed robots.txt answers are inflated by Scrapy's "
                "HttpCompressionMiddleware up to DOWNLOAD_MAXSIZE, and larger ones are lost",
                problem,
            )
        return False
    return handlers_count_bytes(settings)


def _warn_if_scrapy_middleware_enabled(crawler: Crawler) -> None:
    from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as ScrapyMiddleware

    enabled = _compat.downloader_middlewares(crawler.settings)
    if not any(cls is ScrapyMiddleware for cls, _ in enabled):
        return
    if any(_is_our_addon(addon) for addon in getattr(crawler.addons, "addons", ())):
        # the add-on leaves alone what DOWNLOADER_MIDDLEWARES names
        fix = (
            "The add-on is enabled, but DOWNLOADER_MIDDLEWARES names Scrapy's middleware: "
            f"remove {SCRAPY_MIDDLEWARE!r} from DOWNLOADER_MIDDLEWARES (or set it to None)."
        )
    else:
        fix = (
            f"Disable it with DOWNLOADER_MIDDLEWARES = {{{SCRAPY_MIDDLEWARE!r}: None}}, or "
            "enable scrapy-rep with ADDONS = {'scrapy_rep.Addon': 100}, which does it."
        )
    logger.warning(
        "Scrapy's own RobotsTxtMiddleware is enabled next to "
        "scrapy_rep.RobotsTxtMiddleware, and both run: each site's robots.txt is "
        "downloaded twice, once by each, and a request is sent only if both allow it "
        "(Scrapy's middleware reads robots.txt by its own rules: no Crawl-delay, "
        "an unreachable robots.txt allows everything). %s",
        fix,
    )


def _is_our_addon(addon: object) -> bool:
    """Whether ``addon`` is scrapy-rep's add-on (or a subclass), known by its class's
    path: the add-on sits above this module, so importing it would close a circle."""
    return any(f"{cls.__module__}.{cls.__qualname__}" == ADDON for cls in type(addon).__mro__)
