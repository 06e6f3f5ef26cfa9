"""``scrapy_rep.RobotParser``: RFC 9309 matching for Scrapy's own middleware
(``ROBOTSTXT_PARSER = "scrapy_rep.RobotParser"``, docs/robotparser.md), also
passed by scrapy-rep's middleware to handlers of Scrapy's ``robots_parsed``.

The user agent Scrapy passes is reduced to its product token, as scrapy-rep's
middleware does; a string naming none (a browser's) gets the ``*`` group.
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING
from urllib.parse import quote

from scrapy.robotstxt import RobotParser as _ScrapyRobotParser

from scrapy_rep._context import crawl_context
from scrapy_rep.robotstxt import RobotsTxt
from scrapy_rep.robotstxt._agent import product_token

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

__all__ = ["RobotParser"]

# Kept as they are when a URL comes as bytes: every printable ASCII character
# but the space, "%" included so that existing escapes stay escapes.
_URL_SAFE = string.punctuation


class RobotParser(_ScrapyRobotParser):
    """A :class:`scrapy.robotstxt.RobotParser` over :class:`scrapy_rep.RobotsTxt`."""

    def __init__(self, robots: RobotsTxt) -> None:
        self.robots = robots

    @classmethod
    def from_crawler(cls, crawler: Crawler | None, robotstxt_body: bytes) -> Self:
        # REP_MAX_SIZE bounds what is read, as in scrapy-rep's middleware;
        # Scrapy's tests call this with crawler=None.
        if crawler is None:
            return cls(RobotsTxt.parse(robotstxt_body))
        max_size = crawl_context(crawler).config.max_size
        return cls(RobotsTxt.parse(robotstxt_body, max_size=max_size))

    def allowed(self, url: str | bytes, user_agent: str | bytes) -> bool:
        if isinstance(url, bytes):
            # byte for byte: non-ASCII bytes percent-encoded, whatever their charset
            url = quote(url, safe=_URL_SAFE)
        return self.robots.allowed(url, user_agent=_token(user_agent))

    def crawl_delay(self, user_agent: str | bytes) -> float | None:
        return self.robots.crawl_delay(user_agent=_token(user_agent))

    def __repr__(self) -> str:
        return f"<scrapy_rep.RobotParser {self.robots!r}>"


def _token(user_agent: str | bytes | None) -> str:
    return product_token(user_agent) or "*"
