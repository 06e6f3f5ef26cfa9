"""Exceptions raised by scrapy-rep.

Both request-dropping exceptions subclass Scrapy's ``IgnoreRequest``, so a
request's errback receives them and Scrapy does not log them as errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest

if TYPE_CHECKING:
    from scrapy_rep.robotstxt import Decision


class ForbiddenByRobots(IgnoreRequest):
    """The request is disallowed by its origin's robots.txt.

    ``decision`` says which line and rule decided (``decision.line``,
    ``decision.rule``); ``origin`` is the robots.txt origin.
    """

    def __init__(self, decision: Decision, origin: str = "") -> None:
        self.decision = decision
        self.origin = origin
        where = f"line {decision.line} ({decision.rule})" if decision.line else "its rules"
        super().__init__(f"Forbidden by robots.txt {where}")


class RobotsTxtUnavailable(IgnoreRequest):
    """The origin's robots.txt could not be obtained (HTTP 429/5xx, network
    error, timeout), so RFC 9309 says: crawl nothing there.

    ``origin`` is the origin (``https://example.com``), ``reason`` why.
    """

    def __init__(self, origin: str, reason: str) -> None:
        self.origin = origin
        self.reason = reason
        super().__init__(f"robots.txt of {origin} unavailable: {reason}")


class InvalidSetting(ValueError):
    """A robots.txt setting has a value scrapy-rep cannot use; the crawl
    does not start. ``setting`` is the setting's name."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(f"{setting}: {message}")
