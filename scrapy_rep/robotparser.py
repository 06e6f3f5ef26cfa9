"""``scrapy_rep.RobotParser`` (placeholder, see compat branch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.robotstxt import RobotParser as ScrapyRobotParser

from scrapy_rep._agent import product_token
from scrapy_rep.robotstxt import RobotsTxt

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class RobotParser(ScrapyRobotParser):
    """Our rules behind Scrapy's RobotParser interface."""

    def __init__(self, robots: RobotsTxt, user_agent: str) -> None:
        self.robots = robots
        self._user_agent = user_agent

    @classmethod
    def from_crawler(cls, crawler: Crawler, robotstxt_body: bytes) -> RobotParser:
        from scrapy_rep.config import Config

        token = Config.from_settings(crawler.settings).user_agent
        return cls(RobotsTxt.parse(robotstxt_body), token)

    def _token(self, user_agent: str | bytes) -> str:
        return product_token(user_agent) or self._user_agent

    def allowed(self, url: str | bytes, user_agent: str | bytes) -> bool:
        if isinstance(url, bytes):
            url = url.decode("utf-8", "replace")
        return self.robots.allowed(url, user_agent=self._token(user_agent))

    def crawl_delay(self, user_agent: str | bytes) -> float | None:
        return self.robots.crawl_delay(user_agent=self._token(user_agent))
