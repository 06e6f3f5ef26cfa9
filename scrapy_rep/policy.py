"""Fetch outcome -> rules and freshness (RFC 9309 §2.3.1 and §2.4). No Scrapy.

========================  ===============  ==========================================
robots.txt fetch result   outcome          rules applied to the origin
========================  ===============  ==========================================
2xx                       ``parsed``       the body (at most ``max_size`` bytes)
3xx beyond the hop limit  ``allow_all``    none ("unavailable")
4xx except 429            ``allow_all``    none ("unavailable")
429, 5xx, network error   ``disallow_all`` the last good rules if younger than
                                           ``stale_max`` (stale-if-error), else
                                           none: :attr:`Entry.robots` is None and
                                           the middleware's REP_UNREACHABLE decides
========================  ===============  ==========================================

Good results stay fresh for ``Cache-Control: max-age`` clamped to
``[min_ttl, ttl]``, else ``ttl``. Unreachable results are retried after an
exponential backoff from ``retry_min`` (doubling per consecutive failure) or
after ``Retry-After``, both bounded by ``[retry_min, retry_max]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from scrapy_rep.robotstxt import RobotsTxt

PARSED = "parsed"
ALLOW_ALL = "allow_all"
DISALLOW_ALL = "disallow_all"

_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?(\d+)", re.IGNORECASE)
_NO_CACHE = re.compile(r"(?:^|[,\s])(?:no-cache|no-store)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Entry:
    """What is known about one origin's robots.txt."""

    robots: RobotsTxt | None
    """Rules to apply; None when unreachable with no good rules to fall back on."""
    outcome: str
    """Result of the latest fetch: ``parsed``, ``allow_all`` or ``disallow_all``."""
    expires: float
    """Time (``time.time()``) after which the robots.txt is fetched again."""
    fetched: float
    """When ``robots`` was obtained (for stale-if-error)."""
    failures: int = 0
    """Consecutive unreachable results (drives the backoff)."""
    reason: str = ""
    """Why the latest fetch was not ``parsed``: ``HTTP 404``, ``TimeoutError``..."""
    delay: float = 0.0
    """Effective Crawl-delay for the crawler's own token (set by the middleware)."""
    truncated: bool = False
    status: int | None = None
    """HTTP status of the latest fetch's final response (None: no response)."""
    url: str = ""
    """The URL the latest fetch ended at (after redirects)."""
    redirects: int = 0
    """Redirects the latest fetch followed."""
    size: int = 0
    """Bytes of robots.txt body received by the latest fetch."""

    @property
    def stale(self) -> bool:
        """Serving the last good rules after a failed fetch."""
        return self.outcome == DISALLOW_ALL and self.robots is not None


def max_age(cache_control: str | None) -> float | None:
    """Seconds of ``max-age`` (0 for ``no-cache``/``no-store``), or None."""
    if not cache_control:
        return None
    if _NO_CACHE.search(cache_control):
        return 0.0
    match = _MAX_AGE.search(cache_control)
    return float(match.group(1)) if match else None


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (seconds or HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True, slots=True)
class Policy:
    ttl: float = 86_400.0
    min_ttl: float = 60.0
    stale_max: float = 30 * 86_400.0
    retry_min: float = 60.0
    retry_max: float = 3_600.0
    max_size: int = 512_000

    def freshness(self, cache_control: str | None) -> float:
        age = max_age(cache_control)
        if age is None:
            return self.ttl
        return min(max(age, self.min_ttl), self.ttl)

    def on_response(
        self,
        status: int,
        body: bytes,
        *,
        url: str,
        now: float,
        previous: Entry | None = None,
        cache_control: str | None = None,
        retry_after_header: str | None = None,
    ) -> Entry:
        """The entry for a robots.txt response with this final status."""
        if 200 <= status < 300:
            robots = RobotsTxt.parse(body, url=url, max_size=self.max_size)
            return Entry(
                robots,
                PARSED,
                now + self.freshness(cache_control),
                now,
                truncated=robots.truncated,
            )
        if status == 429 or status >= 500 or status < 200:
            return self.on_error(
                f"HTTP {status}",
                now=now,
                previous=previous,
                retry_after_seconds=retry_after(retry_after_header, now),
            )
        # 3xx left unfollowed (no usable Location) and 4xx: "unavailable"
        return self.allow_all(f"HTTP {status}", now=now, cache_control=cache_control)

    def allow_all(self, reason: str, *, now: float, cache_control: str | None = None) -> Entry:
        """Unavailable robots.txt (4xx, too many redirects): crawl everything."""
        return Entry(
            RobotsTxt.allow_all(),
            ALLOW_ALL,
            now + self.freshness(cache_control),
            now,
            reason=reason,
        )

    def backoff(self, failures: int, retry_after_seconds: float | None = None) -> float:
        if retry_after_seconds is not None:
            wait = retry_after_seconds
        else:
            wait = self.retry_min * 2.0 ** min(failures - 1, 30)
        return min(max(wait, self.retry_min), self.retry_max)

    def on_error(
        self,
        reason: str,
        *,
        now: float,
        previous: Entry | None = None,
        retry_after_seconds: float | None = None,
    ) -> Entry:
        """Unreachable robots.txt: complete disallow, or the last good rules."""
        failures = 1
        if previous is not None and previous.outcome == DISALLOW_ALL:
            failures = previous.failures + 1
        expires = now + self.backoff(failures, retry_after_seconds)
        if (
            previous is not None
            and previous.robots is not None
            and now - previous.fetched < self.stale_max
        ):
            return Entry(
                previous.robots,
                DISALLOW_ALL,
                expires,
                previous.fetched,
                failures,
                reason,
                previous.delay,
                previous.truncated,
            )
        return Entry(None, DISALLOW_ALL, expires, now, failures, reason)
