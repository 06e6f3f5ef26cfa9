"""Fetch outcome -> rules and freshness (RFC 9309 §2.3.1 and §2.4). No Scrapy.

Each fetch result gets an outcome and the rules that apply, as the table in
docs/robotstxt.md says; beside them, the delay asked by Crawl-delay and
Request-rate (:func:`delay_for`) and the pause of a site that answered 429 or
503 (:func:`pause_for`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Final, Literal, get_args

from scrapy_rep.robotstxt import RobotsTxt
from scrapy_rep.robotstxt._groups import parsed_bytes

__all__ = [
    "CHALLENGED",
    "OUTCOMES",
    "PARSED",
    "REFUSED_LOCALLY",
    "UNAVAILABLE",
    "UNREACHABLE",
    "Entry",
    "Outcome",
    "Policy",
    "conditional_headers",
    "delay_for",
    "header_text",
    "max_age",
    "pause_for",
    "retry_after",
]

Outcome = Literal["parsed", "unavailable", "unreachable", "refused_locally", "challenged"]
"""What a robots.txt fetch found (the table above); the text of the
``rep/robotstxt/outcome/<outcome>`` stats and of the report's ``outcome``."""
PARSED: Final = "parsed"
UNAVAILABLE: Final = "unavailable"
UNREACHABLE: Final = "unreachable"
REFUSED_LOCALLY: Final = "refused_locally"
CHALLENGED: Final = "challenged"
_FAILED: Final = frozenset({UNREACHABLE, CHALLENGED})  # no rules learnt: backoff, last good rules
OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)

_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?([0-9]+)", re.IGNORECASE)
_SECONDS = re.compile(r"[0-9]+")
_MAX_DATE = 64  # longer than any HTTP date: not one
_NO_CACHE = re.compile(r"(?:^|[,\s])(?:no-cache|no-store)\b", re.IGNORECASE)
_MAX_DOUBLINGS = 64  # 2**64 x any positive minimum is past any cap
MAX_VALIDATOR = 256
"""Characters of an ETag kept (longer ones are not kept, so never sent back)."""
# RFC 9110 §8.8.3: entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE
_ETAG = re.compile(r'(?:W/)?"[\x21\x23-\x7e\x80-\xff]*"')


@dataclass(frozen=True, slots=True)
class Entry:
    """What is known about one origin's robots.txt."""

    robots: RobotsTxt | None
    """Rules to apply; None when unreachable with no good rules to fall back on."""
    outcome: Outcome
    expires: float
    """Time (``_clock.now()``) after which the robots.txt is fetched again."""
    fetched: float
    """When ``robots`` was obtained (for stale-if-error)."""
    failures: int = 0
    """Consecutive unreachable results (drives the backoff)."""
    reason: str = ""
    """Why the latest fetch was not ``parsed``: ``HTTP 404``, ``TimeoutError``..."""
    delay: float = 0.0
    """Seconds between requests for the crawler's own token (:func:`delay_for`)."""
    truncated: bool = False
    status: int | None = None
    """HTTP status of the latest fetch's final response (None: no response)."""
    url: str = ""
    """The URL the latest fetch ended at (after redirects)."""
    redirects: int = 0
    """Redirects the latest fetch followed."""
    size: int = 0
    """Bytes of robots.txt body received by the latest fetch."""
    etag: str = ""
    """The ``ETag`` of the response ``robots`` was read from ("" if none or unusable)."""
    last_modified: str = ""
    """Its ``Last-Modified`` (an HTTP date, "" if none or unusable)."""
    validators_url: str = ""
    """The URL that response came from: where the validators are sent back."""
    sha256: str = ""
    """Hex SHA-256 of the bytes ``robots`` was read from: the body as received
    (its Content-Encoding decoded) up to ``max_size`` bytes ("" for no body:
    allow all, unreachable without rules)."""

    @property
    def ruleless(self) -> bool:
        """No robots.txt rules: unavailable, or refused locally (everything allowed)."""
        return self.outcome == UNAVAILABLE or self.outcome == REFUSED_LOCALLY

    @property
    def failed(self) -> bool:
        """The latest fetch learnt no rules: unreachable, or challenged."""
        return self.outcome in _FAILED

    @property
    def stale(self) -> bool:
        """Serving the last good rules after a failed fetch."""
        return self.outcome in _FAILED and self.robots is not None


def max_age(cache_control: str | None) -> float | None:
    """Seconds of ``max-age`` (0 for ``no-cache``/``no-store``), or None."""
    if not cache_control:
        return None
    if _NO_CACHE.search(cache_control):
        return 0.0
    match = _MAX_AGE.search(cache_control)
    return float(match.group(1)) if match else None


def header_text(value: bytes | None) -> str | None:
    """A header value as text (bytes read as Latin-1, RFC 9110 §5.5); None for
    none or an empty one."""
    return value.decode("latin-1") if value else None


def retry_after(value: str | None, now: float, *, date: str | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value, or None when it says nothing usable.

    Seconds are ASCII digits only; an HTTP date (RFC 9110 §5.6.7, UTC without a
    zone) counts from the response's own ``Date`` when it has one (the server's
    clock, RFC 9110 §10.2.3), else from ``now``; a past date means 0. Never
    raises; a huge number is ``inf`` (callers cap it).
    """
    if not value:
        return None
    value = value.strip()
    if _SECONDS.fullmatch(value):
        return float(value)  # float(), not int(): no digit limit
    when = http_date(value)
    if when is None:
        return None
    sent = http_date(date) if date else None
    return max(0.0, when - (sent if sent is not None else now))


def http_date(text: str) -> float | None:
    """The POSIX time of an HTTP date, or None."""
    if not text.isascii() or len(text) > _MAX_DATE:
        return None
    try:
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return when.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """How long results stay good (the defaults live in :class:`~scrapy_rep.config.Config`)."""

    ttl: float
    min_ttl: float
    stale_max: float
    retry_min: float
    retry_max: float
    max_size: int

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
        date_header: str | None = None,
        etag: str | None = None,
        last_modified: str | None = None,
        conditional: bool = False,
    ) -> Entry:
        """The entry for a robots.txt response with this final status
        (``conditional``: its request carried validators)."""
        if 200 <= status < 300:
            robots = RobotsTxt.parse(body, url=url, max_size=self.max_size)
            return Entry(
                robots,
                PARSED,
                now + self.freshness(cache_control),
                now,
                truncated=robots.truncated,
                etag=valid_etag(etag),
                last_modified=valid_date(last_modified),
                validators_url=url,
                sha256=hashlib.sha256(parsed_bytes(body, self.max_size)).hexdigest(),
            )
        if status == 304:
            # ``previous``'s rules, fresh from now, when the request sent its
            # validators back; without them the server answered a question that
            # was not asked: unreachable, as for a 5xx (there is nowhere to go).
            previous = previous if conditional else None
            if previous is None or previous.robots is None or not previous.sha256:
                return self.on_error("HTTP 304 to a request without validators", now=now)
            return Entry(
                previous.robots,
                PARSED,
                now + self.freshness(cache_control),
                now,
                delay=previous.delay,
                truncated=previous.truncated,
                size=previous.size,
                etag=valid_etag(etag) or previous.etag,
                last_modified=valid_date(last_modified) or previous.last_modified,
                validators_url=url,
                sha256=previous.sha256,
            )
        if status == 429 or status >= 500 or status < 200:
            return self.on_error(
                f"HTTP {status}",
                now=now,
                previous=previous,
                retry_after_seconds=retry_after(retry_after_header, now, date=date_header),
            )
        # 3xx left unfollowed (no usable Location) and 4xx: "unavailable"
        return self.unavailable(f"HTTP {status}", now=now, cache_control=cache_control)

    def unavailable(self, reason: str, *, now: float, cache_control: str | None = None) -> Entry:
        """Unavailable robots.txt (4xx, too many redirects): crawl everything."""
        return Entry(
            RobotsTxt.allow_all(),
            UNAVAILABLE,
            now + self.freshness(cache_control),
            now,
            reason=reason,
        )

    def refused_locally(self, reason: str, *, now: float) -> Entry:
        """The robots.txt request never left: a downloader middleware of the crawl
        refused it. The site said nothing, so no rules; asked again after ``ttl``."""
        return Entry(RobotsTxt.allow_all(), REFUSED_LOCALLY, now + self.ttl, now, reason=reason)

    def on_error(
        self,
        reason: str,
        *,
        now: float,
        previous: Entry | None = None,
        retry_after_seconds: float | None = None,
    ) -> Entry:
        """Unreachable robots.txt: complete disallow, or the last good rules."""
        return self._failed(UNREACHABLE, reason, now, previous, retry_after_seconds)

    def challenged(self, reason: str, *, now: float, previous: Entry | None = None) -> Entry:
        """robots.txt answered with a challenge, a block or a price: no rules
        were said, so as unreachable (never allow-all, never over good rules)."""
        return self._failed(CHALLENGED, reason, now, previous, None)

    def _failed(
        self,
        outcome: Outcome,
        reason: str,
        now: float,
        previous: Entry | None,
        retry_after_seconds: float | None,
    ) -> Entry:
        failures = 1
        if previous is not None and previous.failed:
            failures = previous.failures + 1
        # the slow-down rule, within REP_RETRY_MIN and REP_RETRY_MAX
        expires = now + pause_for(
            retry_after_seconds, self.retry_min, self.retry_max, answers=failures
        )
        if (
            previous is not None
            and previous.robots is not None
            and now - previous.fetched < self.stale_max
        ):
            # its rules and what they were read from, with this fetch's outcome (no response)
            kept = replace(previous, outcome=outcome, expires=expires, failures=failures)
            return replace(kept, reason=reason, status=None, url="", redirects=0)
        return Entry(None, outcome, expires, now, failures, reason)


def valid_etag(value: str | None) -> str:
    """``value`` if it is an entity-tag (RFC 9110 §8.8.3) of at most
    MAX_VALIDATOR characters, else ""."""
    if not value or len(value) > MAX_VALIDATOR:
        return ""
    value = value.strip()
    return value if _ETAG.fullmatch(value) else ""


def valid_date(value: str | None) -> str:
    """``value`` if it is an HTTP date, else "" (sent back as If-Modified-Since)."""
    if not value:
        return ""
    value = value.strip()
    return value if http_date(value) is not None else ""


def conditional_headers(previous: Entry | None) -> tuple[str, dict[bytes, bytes]] | None:
    """The URL and headers of a conditional request for ``previous``'s robots.txt:
    ``If-None-Match`` with its ETag, else ``If-Modified-Since`` with its
    Last-Modified (RFC 9110 §13.1.3: the ETag says more); None when it has
    none, or no rules read from a body to keep on a 304."""
    if previous is None or previous.robots is None or not previous.sha256:
        return None
    if not previous.validators_url:
        return None
    if previous.etag:
        return previous.validators_url, {b"If-None-Match": previous.etag.encode("latin-1")}
    if previous.last_modified:
        header = previous.last_modified.encode("latin-1")
        return previous.validators_url, {b"If-Modified-Since": header}
    return None


def delay_for(robots: RobotsTxt, agent: str, max_delay: float) -> tuple[float, float]:
    """``(applied, asked)`` seconds between requests for ``agent``: ``asked`` from
    :meth:`RobotsTxt.delays`, ``applied`` capped at ``max_delay`` (``REP_MAX_CRAWL_DELAY``).
    The one rule for the middleware and ``scrapy robots`` alike."""
    asked = robots.delays(user_agent=agent).seconds or 0.0
    return min(asked, max_delay), asked


def pause_for(asked: float | None, minimum: float, maximum: float, *, answers: int = 1) -> float:
    """Seconds a site that answered 429 or 503 is paused: its ``Retry-After``
    (``asked``) bounded to ``[minimum, maximum]``, else ``minimum`` doubled per
    slow-down answer in a row after the first, capped at ``maximum``. The
    script of :mod:`scrapy_rep.cluster.pauses` applies the same rule in Redis."""
    if asked is not None:
        return min(max(asked, minimum), maximum)
    return min(minimum * 2.0 ** min(answers - 1, _MAX_DOUBLINGS), maximum)
