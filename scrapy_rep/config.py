"""Every setting scrapy-rep reads, read and validated once.

``Config.from_settings(settings)`` raises :class:`~scrapy_rep.exceptions.InvalidSetting`
(a ``ValueError``) naming the setting for any value it cannot use, so a typo
stops the crawl at start instead of silently changing what it obeys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scrapy.settings import BaseSettings, Settings

from scrapy_rep._agent import product_token
from scrapy_rep.exceptions import InvalidSetting
from scrapy_rep.policy import Policy

UNREACHABLE_MODES = ("disallow", "allow", "defer")
NOINDEX_MODES = ("keep", "drop")
REDIS_URL_SCHEMES = ("redis://", "rediss://", "unix://")


@dataclass(frozen=True, slots=True)
class Config:
    obey: bool = True
    user_agent: str = "*"
    """Product token matched against ``User-agent:`` lines."""
    user_agent_problem: str = ""
    """Non-empty when no token could be found in USER_AGENT (then ``*``)."""
    max_size: int = 512_000
    fetch_timeout: float = 10.0
    fetch_retries: int = 1
    max_redirects: int = 5
    unreachable: str = "disallow"
    defer_max: float = 600.0
    cache_ttl: float = 86_400.0
    cache_min_ttl: float = 60.0
    cache_max_origins: int = 10_000
    stale_max: float = 30 * 86_400.0
    retry_min: float = 60.0
    retry_max: float = 3_600.0
    dry_run: bool = False
    obey_crawl_delay: bool = True
    max_crawl_delay: float = 60.0
    max_waiting: int = 256
    meta_robots: bool = True
    meta_noindex: str = "keep"
    redis_url: str | None = None
    """Shared state for many workers (scrapy_rep.redis); None: each worker alone."""
    redis_robots: bool = True
    redis_delay: bool = True
    redis_prefix: str = "rep:"
    redis_timeout: float = 1.0
    redis_retry: float = 30.0
    redis_keep: float = 86_400.0

    @property
    def policy(self) -> Policy:
        return Policy(
            ttl=self.cache_ttl,
            min_ttl=self.cache_min_ttl,
            stale_max=self.stale_max,
            retry_min=self.retry_min,
            retry_max=self.retry_max,
            max_size=self.max_size,
        )

    @classmethod
    def from_settings(cls, settings: BaseSettings | Mapping[str, Any]) -> Config:
        if not isinstance(settings, BaseSettings):
            settings = Settings(dict(settings))
        read = _Reader(settings)
        user_agent, problem = _user_agent(settings)
        cache_ttl = read.number("REP_CACHE_TTL", 86_400.0, minimum=0.0, exclusive=True)
        retry_min = read.number("REP_RETRY_MIN", 60.0, minimum=0.0, exclusive=True)
        return cls(
            obey=read.boolean("ROBOTSTXT_OBEY", False),
            user_agent=user_agent,
            user_agent_problem=problem,
            max_size=read.integer("REP_MAX_SIZE", 512_000, minimum=1),
            fetch_timeout=read.number("REP_FETCH_TIMEOUT", 10.0, minimum=0.0, exclusive=True),
            fetch_retries=read.integer("REP_FETCH_RETRIES", 1, minimum=0),
            max_redirects=read.integer("REP_MAX_REDIRECTS", 5, minimum=0),
            unreachable=read.choice("REP_UNREACHABLE", "disallow", UNREACHABLE_MODES),
            defer_max=read.number("REP_DEFER_MAX", 600.0, minimum=0.0),
            cache_ttl=cache_ttl,
            cache_min_ttl=read.number("REP_CACHE_MIN_TTL", 60.0, minimum=0.0, maximum=cache_ttl),
            cache_max_origins=read.integer("REP_CACHE_MAX_ORIGINS", 10_000, minimum=1),
            stale_max=read.number("REP_STALE_MAX", 30 * 86_400.0, minimum=0.0),
            retry_min=retry_min,
            retry_max=read.number("REP_RETRY_MAX", 3_600.0, minimum=retry_min),
            dry_run=read.boolean("REP_DRY_RUN", False),
            obey_crawl_delay=read.boolean("REP_OBEY_CRAWL_DELAY", True),
            max_crawl_delay=read.number("REP_MAX_CRAWL_DELAY", 60.0, minimum=0.0),
            max_waiting=read.integer("REP_MAX_WAITING", 256, minimum=0),
            meta_robots=read.boolean("REP_META_ROBOTS", True),
            meta_noindex=read.choice("REP_META_NOINDEX", "keep", NOINDEX_MODES),
            redis_url=_redis_url(read),
            redis_robots=read.boolean("REP_REDIS_ROBOTS", True),
            redis_delay=read.boolean("REP_REDIS_DELAY", True),
            redis_prefix=read.text("REP_REDIS_PREFIX", "rep:"),
            redis_timeout=read.number("REP_REDIS_TIMEOUT", 1.0, minimum=0.0, exclusive=True),
            redis_retry=read.number("REP_REDIS_RETRY", 30.0, minimum=0.0),
            redis_keep=read.number("REP_REDIS_KEEP", 86_400.0, minimum=0.0),
        )


def _redis_url(read: _Reader) -> str | None:
    """REP_REDIS_URL, else scrapy-redis's REDIS_URL; None when neither is set."""
    for name in ("REP_REDIS_URL", "REDIS_URL"):
        raw = read.settings.get(name)
        if raw is None or raw == "":
            continue
        if not isinstance(raw, str) or not raw.startswith(REDIS_URL_SCHEMES):
            raise InvalidSetting(
                name, f"expected a URL such as 'redis://localhost:6379/0', got {raw!r}"
            )
        return raw
    return None


def _user_agent(settings: BaseSettings) -> tuple[str, str]:
    explicit = settings.get("ROBOTSTXT_USER_AGENT")
    if explicit:
        if not isinstance(explicit, (str, bytes)):
            raise InvalidSetting("ROBOTSTXT_USER_AGENT", f"expected a string, got {explicit!r}")
        token = product_token(explicit)
        if token is None:
            raise InvalidSetting(
                "ROBOTSTXT_USER_AGENT",
                f"no product token in {explicit!r}; use the name robots.txt files know "
                "your crawler by, e.g. ROBOTSTXT_USER_AGENT = 'ExampleBot'",
            )
        return token, ""
    header = settings.get("USER_AGENT")
    token = product_token(header) if isinstance(header, (str, bytes)) else None
    if token is not None:
        return token, ""
    problem = (
        f"USER_AGENT {header!r} names no crawler, so only the robots.txt groups for "
        "'User-agent: *' apply; set ROBOTSTXT_USER_AGENT to your crawler's name "
        "(e.g. ROBOTSTXT_USER_AGENT = 'ExampleBot')"
    )
    return "*", problem


class _Reader:
    def __init__(self, settings: BaseSettings) -> None:
        self.settings = settings

    def _raw(self, name: str) -> Any:
        return self.settings.get(name)

    def boolean(self, name: str, default: bool) -> bool:
        if self._raw(name) is None:
            return default
        try:
            return self.settings.getbool(name, default)
        except ValueError:
            raise InvalidSetting(name, f"expected True or False, got {self._raw(name)!r}") from None

    def number(
        self,
        name: str,
        default: float,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
        exclusive: bool = False,
    ) -> float:
        raw = self._raw(name)
        if raw is None:
            return default
        if isinstance(raw, bool):
            raise InvalidSetting(name, f"expected a number of seconds, got {raw!r}")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise InvalidSetting(name, f"expected a number, got {raw!r}") from None
        if not math.isfinite(value):
            raise InvalidSetting(name, f"expected a finite number, got {raw!r}")
        _check_bounds(name, value, minimum, maximum, exclusive)
        return value

    def integer(self, name: str, default: int, *, minimum: int | None = None) -> int:
        raw = self._raw(name)
        if raw is None:
            return default
        if isinstance(raw, bool):
            raise InvalidSetting(name, f"expected an integer, got {raw!r}")
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise InvalidSetting(name, f"expected an integer, got {raw!r}") from None
        if isinstance(raw, float) and value != raw:
            raise InvalidSetting(name, f"expected an integer, got {raw!r}")
        _check_bounds(name, value, minimum, None, False)
        return value

    def text(self, name: str, default: str) -> str:
        raw = self._raw(name)
        if raw is None:
            return default
        if not isinstance(raw, str) or not raw:
            raise InvalidSetting(name, f"expected a non-empty string, got {raw!r}")
        return raw

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        raw = self._raw(name)
        if raw is None:
            return default
        value = raw.strip().lower() if isinstance(raw, str) else raw
        if value not in choices:
            allowed = ", ".join(repr(c) for c in choices)
            raise InvalidSetting(name, f"expected one of {allowed}, got {raw!r}")
        return str(value)


def _check_bounds(
    name: str, value: float, minimum: float | None, maximum: float | None, exclusive: bool
) -> None:
    if minimum is not None and (value <= minimum if exclusive else value < minimum):
        relation = "greater than" if exclusive else "at least"
        raise InvalidSetting(name, f"must be {relation} {minimum:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise InvalidSetting(name, f"must be at most {maximum:g}, got {value:g}")
