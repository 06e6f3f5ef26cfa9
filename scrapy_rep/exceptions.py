"""Exceptions raised by scrapy-rep; their attributes: docs/reference.md, "Exceptions".

The request-dropping exceptions subclass Scrapy's ``IgnoreRequest``, so a
request's errback receives them and Scrapy does not log them as errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest

if TYPE_CHECKING:
    from scrapy.http import Response

    from scrapy_rep.robotstxt import Decision


__all__ = [
    "ForbiddenByRobots",
    "InvalidSetting",
    "PaymentRequired",
    "RobotsTxtChanged",
    "RobotsTxtUnavailable",
    "SiteChallenged",
    "UsageDenied",
]


class ForbiddenByRobots(IgnoreRequest):
    """The request is disallowed by its origin's robots.txt (``decision``: which line)."""

    def __init__(self, decision: Decision, origin: str = "") -> None:
        self.decision = decision
        self.origin = origin
        where = f"line {decision.line} ({decision.rule})" if decision.line else "its rules"
        super().__init__(f"Forbidden by robots.txt {where}")


class RobotsTxtUnavailable(IgnoreRequest):
    """The origin's robots.txt could not be obtained (HTTP 429/5xx, network
    error, timeout), so RFC 9309 says: crawl nothing there."""

    def __init__(self, origin: str, reason: str) -> None:
        self.origin = origin
        self.reason = reason
        super().__init__(f"robots.txt of {origin} unavailable: {reason}")


class RobotsTxtChanged(IgnoreRequest):
    """Under ``REP_PIN_ACTION = "stop_origin"``: the origin's robots.txt is no
    longer the one pinned in ``REP_PIN_FILE``, so its requests are dropped."""

    def __init__(self, origin: str, pinned: str, current: str) -> None:
        self.origin = origin
        self.pinned = pinned
        self.current = current
        super().__init__(f"robots.txt of {origin} changed since pinned")


class UsageDenied(IgnoreRequest):
    """Under ``REP_USAGE_ACTION = "drop"``: the site's usage preferences deny
    every purpose the crawl declared (``REP_PURPOSES``), so the request was not
    downloaded (``response`` is None: robots.txt said so) or its response does
    not reach the spider (its headers or page said so)."""

    def __init__(
        self,
        usage: dict[str, bool | None],
        reasons: dict[str, tuple[str, ...]],
        origin: str = "",
        response: Response | None = None,
    ) -> None:
        self.usage = usage
        self.reasons = reasons
        self.origin = origin
        self.response = response
        first = next((where[0] for where in reasons.values() if where), "its preferences")
        purposes = ", ".join(usage)
        super().__init__(f"Usage preferences deny {purposes}: {first}")


class SiteChallenged(IgnoreRequest):
    """The site answered with a challenge or a block (docs/stop-signals.md), or
    its origin is stopped after one (``stopped``: not sent). Never retried."""

    def __init__(
        self,
        origin: str,
        provider: str,
        kind: str,
        marker: str,
        *,
        stopped: bool = False,
        response: Response | None = None,
    ) -> None:
        self.origin = origin
        self.provider = provider
        self.kind = kind
        self.marker = marker
        self.stopped = stopped
        self.response = response
        what = f"{kind} by {provider} ({marker})"
        said = f"is stopped after a {what}: not sent" if stopped else f"answered with a {what}"
        super().__init__(f"{origin} {said}")


class PaymentRequired(IgnoreRequest):
    """The site answered 402 Payment Required: the page has a price; or its
    origin is stopped after one (``stopped``: not sent, ``REP_ON_PAYMENT``)."""

    def __init__(
        self,
        origin: str,
        price: str | None,
        scheme: str | None,
        *,
        stopped: bool = False,
        response: Response | None = None,
    ) -> None:
        self.origin = origin
        self.price = price
        self.scheme = scheme
        self.stopped = stopped
        self.response = response
        offer = f"{scheme} {price}" if price else (scheme or "terms unknown")
        super().__init__(f"{origin} asks for payment ({offer})" + (": not sent" if stopped else ""))


class InvalidSetting(ValueError):
    """A robots.txt setting has a value scrapy-rep cannot use; the crawl
    does not start. ``setting`` is the setting's name."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(f"{setting}: {message}")
