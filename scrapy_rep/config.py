"""Every setting scrapy-rep reads, read and validated once.

``Config.from_settings(settings)`` raises :class:`~scrapy_rep.exceptions.InvalidSetting`
naming the setting for any value it cannot use, so a wrong value stops the
crawl at start instead of silently changing what it obeys; what is odd but
usable goes to :attr:`Config.warnings` (:mod:`scrapy_rep._config_warnings`).
Every default is the dataclass field's, written once.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

from scrapy.settings import BaseSettings, Settings

from scrapy_rep._backoff_table import DEFAULT_BOUND as DEFAULT_BACKOFF_BOUND
from scrapy_rep._config_warnings import odd_settings
from scrapy_rep.exceptions import InvalidSetting
from scrapy_rep.policy import Policy
from scrapy_rep.robotstxt import DEFAULT_MAX_SIZE
from scrapy_rep.robotstxt._agent import product_token
from scrapy_rep.robotstxt._usage_labels import PURPOSES
from scrapy_rep.stop_signals import Rule, user_rules

if TYPE_CHECKING:
    from collections.abc import Callable

UnreachableMode = Literal["disallow", "allow", "defer"]
"""REP_UNREACHABLE: what happens to the requests of an origin whose robots.txt is unreachable."""
NoindexMode = Literal["keep", "drop"]
"""REP_META_NOINDEX: what happens to the items of a page that says noindex."""
UsageAction = Literal["annotate", "drop"]
"""REP_USAGE_ACTION: what happens to a request whose usage preferences deny every purpose."""
PinAction = Literal["report", "stop_origin"]
"""REP_PIN_ACTION: what happens to an origin whose robots.txt differs from its pin."""
PaymentAction = Literal["stop_origin", "skip"]
"""REP_ON_PAYMENT: what a 402 answer does beyond ending its own request."""
REDIS_URL_SCHEMES = ("redis://", "rediss://", "unix://")

_Number = TypeVar("_Number", int, float)


@dataclass(frozen=True, slots=True)
class Config:
    """One field per setting (``max_size``: ``REP_MAX_SIZE``; ``obey``: ``ROBOTSTXT_OBEY``),
    whose meaning docs/reference.md gives; the fields that are not one say what they hold."""

    obey: bool = False
    user_agent: str = "*"
    """Product token matched against ``User-agent:`` lines."""
    explicit_agent: bool = False
    """The token comes from ROBOTSTXT_USER_AGENT (a request's own User-Agent
    header then does not change it)."""
    user_agent_problem: str = ""
    """Non-empty when no token could be found in USER_AGENT (then ``*``)."""
    warnings: tuple[str, ...] = ()
    """Usable but odd settings, logged once at start."""
    max_size: int = DEFAULT_MAX_SIZE
    headers_max: int = 64 * 1024
    """0: Twisted left unpatched (scrapy_rep._slots.headers, process-wide)."""
    fetch_timeout: float = 10.0
    fetch_retries: int = 1
    max_redirects: int = 5
    max_fetches: int = 64
    unreachable: UnreachableMode = "disallow"
    defer_max: float = 600.0
    cache_ttl: float = 86_400.0
    cache_min_ttl: float = 60.0
    cache_max_origins: int = 10_000
    backoff_max_origins: int = DEFAULT_BACKOFF_BOUND
    stale_max: float = 30 * 86_400.0
    retry_min: float = 60.0
    retry_max: float = 3_600.0
    dry_run: bool = False
    obey_crawl_delay: bool = True
    max_crawl_delay: float = 60.0
    max_waiting: int = 256
    slot_limit: bool = True
    """Scrapy does not hold a slot's concurrency on asyncio (scrapy_rep._slots.limits)."""
    frontier: bool = True
    # -- slowing down for 429/503 answers (scrapy_rep.slowdown)
    slowdown: bool = True
    slowdown_http_codes: tuple[int, ...] = (429, 503)
    slowdown_min_delay: float = 1.0
    slowdown_max_delay: float = 300.0
    redis_slowdown: bool = True
    meta_robots: bool = True
    meta_noindex: NoindexMode = "keep"
    # -- usage preferences (scrapy_rep.usage_middleware)
    purposes: tuple[str, ...] = ()
    usage_action: UsageAction = "annotate"
    # -- stop signals: challenges, blocks, 402 (scrapy_rep.stop_signals, scrapy_rep.challenges)
    stop_signals: bool = True
    challenge_pause: float = 300.0
    challenge_max_pause: float = 3_600.0
    challenge_give_up: int = 3
    block_after: int = 20
    on_payment: PaymentAction = "stop_origin"
    block_markers: tuple[Rule, ...] = ()
    redis_url: str | None = None
    """REP_REDIS_URL, else scrapy-redis's REDIS_URL (scrapy_rep.cluster)."""
    redis_robots: bool = True
    redis_delay: bool = True
    redis_prefix: str = "rep:"
    redis_timeout: float = 1.0
    redis_retry: float = 30.0
    redis_keep: float = 86_400.0
    # -- report (scrapy_rep.report)
    report: str | None = None
    report_top: int = 10
    # -- state across runs, pins (scrapy_rep.state, scrapy_rep.pins)
    state_dir: str | None = None
    httpcache_robotstxt: bool = True
    pin_file: str | None = None
    pin_action: PinAction = "report"
    # -- evidence (scrapy_rep.evidence)
    evidence: str | None = None
    evidence_max_file_size: int = 100_000_000
    evidence_required: bool = False
    provenance_field: str | None = None

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
        explicit = bool(settings.get("ROBOTSTXT_USER_AGENT"))
        cache_ttl = read.number("REP_CACHE_TTL", minimum=0.0, exclusive=True)
        retry_min = read.number("REP_RETRY_MIN", minimum=0.0, exclusive=True)
        slowdown_min = read.number("REP_SLOWDOWN_MIN_DELAY", minimum=0.0, exclusive=True)
        challenge_pause = read.number("REP_CHALLENGE_PAUSE", minimum=0.0, exclusive=True)
        config = cls(
            obey=read.boolean("ROBOTSTXT_OBEY"),
            user_agent=user_agent,
            explicit_agent=explicit,
            user_agent_problem=problem,
            max_size=read.integer("REP_MAX_SIZE", minimum=1),
            headers_max=read.integer("REP_HEADERS_MAX", minimum=0),
            fetch_timeout=read.number("REP_FETCH_TIMEOUT", minimum=0.0, exclusive=True),
            fetch_retries=read.integer("REP_FETCH_RETRIES", minimum=0),
            max_redirects=read.integer("REP_MAX_REDIRECTS", minimum=0),
            max_fetches=read.integer("REP_MAX_FETCHES", minimum=0),
            unreachable=read.choice("REP_UNREACHABLE", UnreachableMode),
            defer_max=read.number("REP_DEFER_MAX", minimum=0.0),
            cache_ttl=cache_ttl,
            cache_min_ttl=read.number("REP_CACHE_MIN_TTL", minimum=0.0, maximum=cache_ttl),
            cache_max_origins=read.integer("REP_CACHE_MAX_ORIGINS", minimum=1),
            backoff_max_origins=read.integer("REP_BACKOFF_MAX_ORIGINS", minimum=0),
            stale_max=read.number("REP_STALE_MAX", minimum=0.0),
            retry_min=retry_min,
            retry_max=read.number("REP_RETRY_MAX", minimum=retry_min),
            dry_run=read.boolean("REP_DRY_RUN"),
            obey_crawl_delay=read.boolean("REP_OBEY_CRAWL_DELAY"),
            max_crawl_delay=read.number("REP_MAX_CRAWL_DELAY", minimum=0.0),
            max_waiting=read.integer("REP_MAX_WAITING", minimum=0),
            slot_limit=read.boolean("REP_SLOT_LIMIT"),
            frontier=read.boolean("REP_FRONTIER"),
            slowdown=read.boolean("REP_SLOWDOWN"),
            slowdown_http_codes=read.status_codes("REP_SLOWDOWN_HTTP_CODES"),
            slowdown_min_delay=slowdown_min,
            slowdown_max_delay=read.number("REP_SLOWDOWN_MAX_DELAY", minimum=slowdown_min),
            redis_slowdown=read.boolean("REP_REDIS_SLOWDOWN"),
            meta_robots=read.boolean("REP_META_ROBOTS"),
            meta_noindex=read.choice("REP_META_NOINDEX", NoindexMode),
            purposes=_purposes(read),
            usage_action=read.choice("REP_USAGE_ACTION", UsageAction),
            stop_signals=read.boolean("REP_STOP_SIGNALS"),
            challenge_pause=challenge_pause,
            challenge_max_pause=read.number("REP_CHALLENGE_MAX_PAUSE", minimum=challenge_pause),
            challenge_give_up=read.integer("REP_CHALLENGE_GIVE_UP", minimum=1),
            block_after=read.integer("REP_BLOCK_AFTER", minimum=0),
            on_payment=read.choice("REP_ON_PAYMENT", PaymentAction),
            block_markers=_block_markers(read),
            redis_url=_redis_url(read),
            redis_robots=read.boolean("REP_REDIS_ROBOTS"),
            redis_delay=read.boolean("REP_REDIS_DELAY"),
            redis_prefix=read.text("REP_REDIS_PREFIX"),
            redis_timeout=read.number("REP_REDIS_TIMEOUT", minimum=0.0, exclusive=True),
            redis_retry=read.number("REP_REDIS_RETRY", minimum=0.0),
            redis_keep=read.number("REP_REDIS_KEEP", minimum=0.0),
            report=_report_path(read),
            report_top=read.integer("REP_REPORT_TOP", minimum=0),
            state_dir=_optional_text(read, "REP_STATE_DIR"),
            httpcache_robotstxt=read.boolean("REP_HTTPCACHE_ROBOTSTXT"),
            pin_file=_optional_text(read, "REP_PIN_FILE"),
            pin_action=read.choice("REP_PIN_ACTION", PinAction),
            evidence=_optional_text(read, "REP_EVIDENCE", "a directory path"),
            evidence_max_file_size=read.integer("REP_EVIDENCE_MAX_FILE_SIZE", minimum=1),
            evidence_required=read.boolean("REP_EVIDENCE_REQUIRED"),
            provenance_field=_optional_text(read, "REP_PROVENANCE_FIELD", "an item field name"),
        )
        warnings = [problem] if problem else []
        warnings += odd_settings(settings, user_agent, explicit, read.names)
        return dataclasses.replace(config, warnings=tuple(warnings))


def frontier_wanted(settings: BaseSettings) -> bool:
    """ROBOTSTXT_OBEY and REP_FRONTIER, for the add-on (before the crawl's Config
    exists); an invalid value reads as False here and stops the crawl at start."""
    read = _Reader(settings)
    try:
        return read.boolean("ROBOTSTXT_OBEY") and read.boolean("REP_FRONTIER")
    except InvalidSetting:
        return False


_DEFAULTS = Config()
# Setting name -> Config field where it is not REP_<FIELD>.
_FIELD_OF = {"ROBOTSTXT_OBEY": "obey"}
_FIELDS = frozenset(field.name for field in fields(Config))


def default_of(name: str) -> Any:
    """The default of setting ``name``: its Config field's (REP_MAX_SIZE -> max_size)."""
    field = _FIELD_OF.get(name) or name.removeprefix("REP_").lower()
    if field not in _FIELDS:
        raise KeyError(f"{name} has no Config field")
    return getattr(_DEFAULTS, field)


def _redis_url(read: _Reader) -> str | None:
    """REP_REDIS_URL, else scrapy-redis's REDIS_URL; None when neither is set."""
    for name in ("REP_REDIS_URL", "REDIS_URL"):
        raw = read._raw(name)
        if raw is None or raw == "":
            continue
        if not isinstance(raw, str) or not raw.startswith(REDIS_URL_SCHEMES):
            raise InvalidSetting(
                name, f"expected a URL such as 'redis://localhost:6379/0', got {raw!r}"
            )
        return raw
    return None


def _block_markers(read: _Reader) -> tuple[Rule, ...]:
    """REP_BLOCK_MARKERS: literal rules (scrapy_rep.stop_signals.user_rules)."""
    try:
        return user_rules(read._raw("REP_BLOCK_MARKERS"))
    except ValueError as exc:
        raise InvalidSetting("REP_BLOCK_MARKERS", str(exc)) from None


def _report_path(read: _Reader) -> str | None:
    """REP_REPORT: a path ending in .json or .jsonl (the format follows it), or None."""
    what = "a file path ending in .json or .jsonl"
    path = _optional_text(read, "REP_REPORT", what)
    if path is not None and not path.lower().endswith((".json", ".jsonl")):
        raise InvalidSetting("REP_REPORT", f"expected {what}, got {read._raw('REP_REPORT')!r}")
    return path


def _optional_text(read: _Reader, name: str, what: str = "a path") -> str | None:
    """A non-empty string (a path may be a PathLike), or None when unset or empty."""
    raw = read._raw(name)
    if raw is None or raw == "":
        return None
    text = os.fspath(raw) if isinstance(raw, os.PathLike) else raw
    if not isinstance(text, str):
        raise InvalidSetting(name, f"expected {what}, got {raw!r}")
    return text


def _purposes(read: _Reader) -> tuple[str, ...]:
    """REP_PURPOSES: a list (or a comma-separated string) of known purposes, in
    any case, each once."""
    raw = read._raw("REP_PURPOSES")
    if raw is None:
        return tuple(default_of("REP_PURPOSES"))
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise InvalidSetting("REP_PURPOSES", f"expected a list of purposes, got {raw!r}")
    purposes: dict[str, None] = {}
    for item in items:
        name = item.strip().lower() if isinstance(item, str) else item
        if name == "":
            continue
        if name not in PURPOSES:
            close = difflib.get_close_matches(str(name), PURPOSES, n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(repr(purpose) for purpose in PURPOSES)
            raise InvalidSetting(
                "REP_PURPOSES", f"unknown purpose {item!r}{hint}; known purposes: {known}"
            )
        purposes[name] = None
    return tuple(purposes)


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
    """Reads settings, each with its Config default; remembers the names read."""

    def __init__(self, settings: BaseSettings) -> None:
        self.settings = settings
        self.names: set[str] = set()

    def _raw(self, name: str) -> Any:
        self.names.add(name)
        return self.settings.get(name)

    def boolean(self, name: str) -> bool:
        default: bool = default_of(name)
        if self._raw(name) is None:
            return default
        try:
            return self.settings.getbool(name, default)
        except ValueError:
            raise InvalidSetting(name, f"expected True or False, got {self._raw(name)!r}") from None

    def number(
        self,
        name: str,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
        exclusive: bool = False,
    ) -> float:
        raw = self._raw(name)
        if raw is None:
            return float(default_of(name))
        value = _converted(name, raw, float, "a number", "a number of seconds")
        if not math.isfinite(value):
            raise InvalidSetting(name, f"expected a finite number, got {raw!r}")
        _check_bounds(name, value, minimum, maximum, exclusive)
        return value

    def integer(self, name: str, *, minimum: int | None = None) -> int:
        raw = self._raw(name)
        if raw is None:
            return int(default_of(name))
        value = _converted(name, raw, int, "an integer")
        if isinstance(raw, float) and value != raw:
            raise InvalidSetting(name, f"expected an integer, got {raw!r}")
        _check_bounds(name, value, minimum, None, False)
        return value

    def status_codes(self, name: str) -> tuple[int, ...]:
        """A non-empty list of HTTP error codes (400-599): a list, or "429,503"."""
        raw = self._raw(name)
        if raw is None:
            return tuple(default_of(name))
        items = raw.split(",") if isinstance(raw, str) else raw
        if not isinstance(items, (list, tuple, set, frozenset)):
            raise InvalidSetting(name, f"expected a list of HTTP status codes, got {raw!r}")
        codes = []
        for item in items:
            text = item.strip() if isinstance(item, str) else item
            if isinstance(text, str) and text.isascii() and text.isdigit():
                text = int(text)
            if not isinstance(text, int) or isinstance(text, bool) or not 400 <= text <= 599:
                raise InvalidSetting(name, f"expected HTTP error codes (400-599), got {item!r}")
            codes.append(text)
        if not codes:
            raise InvalidSetting(
                name, "expected at least one code (REP_SLOWDOWN = False turns it off)"
            )
        return tuple(sorted(set(codes)))

    def text(self, name: str) -> str:
        raw = self._raw(name)
        if raw is None:
            return str(default_of(name))
        if not isinstance(raw, str) or not raw:
            raise InvalidSetting(name, f"expected a non-empty string, got {raw!r}")
        return raw

    def choice(self, name: str, kind: Any) -> Any:
        """One of the Literal type ``kind``'s strings."""
        raw = self._raw(name)
        if raw is None:
            return default_of(name)
        choices = get_args(kind)
        value = raw.strip().lower() if isinstance(raw, str) else raw
        if value in choices:
            return value
        allowed = ", ".join(repr(c) for c in choices)
        raise InvalidSetting(name, f"expected one of {allowed}, got {raw!r}")


def _converted(
    name: str, raw: Any, convert: Callable[[Any], _Number], what: str, what_bool: str = ""
) -> _Number:
    if isinstance(raw, bool):
        raise InvalidSetting(name, f"expected {what_bool or what}, got {raw!r}")
    try:
        return convert(raw)
    except (TypeError, ValueError):
        raise InvalidSetting(name, f"expected {what}, got {raw!r}") from None


def _check_bounds(
    name: str, value: float, minimum: float | None, maximum: float | None, exclusive: bool
) -> None:
    if minimum is not None and (value <= minimum if exclusive else value < minimum):
        relation = "greater than" if exclusive else "at least"
        raise InvalidSetting(name, f"must be {relation} {minimum:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise InvalidSetting(name, f"must be at most {maximum:g}, got {value:g}")
