"""Pins: robots.txt files the crawl expects unchanged (``REP_PIN_FILE``, docs/state.md).

A pin maps an origin to the SHA-256 of the bytes its rules were read from
(:attr:`scrapy_rep.policy.Entry.sha256`). :class:`PinWatch` says once what
changed in a robots.txt that differs from its pin, counts the requests refused
since, or has the middleware drop them (``REP_PIN_ACTION = "stop_origin"``).
"""

from __future__ import annotations

import logging
import re
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from scrapy_rep.cache import lru_put
from scrapy_rep.evidence.archived import ArchivedBodies, ArchiveUnreadable, json_object
from scrapy_rep.exceptions import InvalidSetting
from scrapy_rep.origin import origin_of
from scrapy_rep.policy import PARSED, UNAVAILABLE
from scrapy_rep.robotstxt import RobotsTxt

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_rep.config import Config
    from scrapy_rep.origin import Origin
    from scrapy_rep.policy import Entry
    from scrapy_rep.state import StateStore

__all__ = ["PinWatch", "read_pins", "rule_changes", "rule_lines"]

RuleLines = Counter[tuple[str, bytes]]
"""The Allow and Disallow lines of a robots.txt body, counted (:func:`rule_lines`)."""

logger = logging.getLogger(__name__)

_SHA256 = re.compile(r"[0-9a-f]{64}")
_RULE = re.compile(
    rb"^[ \t]*(allow|disallow)[ \t]*:?[ \t]*([^#\r\n]*)", re.IGNORECASE | re.MULTILINE
)


def read_pins(path: str) -> dict[str, str]:
    """Origin text -> sha256 from the pin file at ``path`` (see the module
    docstring); InvalidSetting when it cannot be read or holds no pin."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidSetting("REP_PIN_FILE", f"cannot read {path!r}: {exc}") from None
    pins: dict[str, str] = {}
    skipped = 0
    whole = json_object(text)
    if whole is not None and "origin" not in whole:
        items: list[tuple[Any, Any]] = list(whole.items())
    else:
        items = []
        for line in text.splitlines():
            found = _pin_line(line.strip())
            if found is None:
                skipped += 1
            elif found != ("", ""):
                items.append(found)
    for origin_text, digest in items:
        origin = _origin(origin_text)
        digest = digest.strip().lower() if isinstance(digest, str) else ""
        if origin is None or not _SHA256.fullmatch(digest):
            skipped += 1
            continue
        pins[origin.text] = digest
    if skipped:
        logger.warning("REP_PIN_FILE %s: %d unreadable lines skipped", path, skipped)
    if not pins:
        raise InvalidSetting("REP_PIN_FILE", f"no pin (origin and sha256) in {path!r}")
    return pins


def _pin_line(line: str) -> tuple[Any, Any] | None:
    """(origin, digest) of a stripped line; ("", "") for a line that pins nothing
    (blank, a comment, JSON about no robots.txt body); None when unreadable."""
    if not line or line.startswith("#"):
        return "", ""
    if not line.startswith("{"):
        parts = line.split()
        return (parts[0], parts[1]) if len(parts) == 2 else None
    data = json_object(line)
    if data is None or "origin" not in data:
        return None
    url = data.get("url")
    if isinstance(url, str) and urlparse(url).path.startswith("/.well-known/"):
        return "", ""
    # An evidence.jsonl line names the bytes parsed; null there means no rules
    # were read (a 404 page, an outage), whatever its body's sha256.
    digest = data["parsed_sha256"] if "parsed_sha256" in data else data.get("sha256")
    if not digest:
        return "", ""
    return data["origin"], digest


def _origin(text: Any) -> Origin | None:
    if not isinstance(text, str):
        return None
    try:
        return origin_of(urlparse(text.strip()))
    except ValueError:
        return None


def rule_changes(before: RuleLines, after: RuleLines) -> str:
    """What changed in the Allow and Disallow lines (:func:`rule_lines`),
    counted over the whole file: "+2 Disallow lines, -1 Allow line", or "no
    rule line changed"."""
    parts = []
    for kind in ("disallow", "allow"):
        for sign, lines in (("+", after - before), ("-", before - after)):
            count = sum(n for (found, _), n in lines.items() if found == kind)
            if count:
                parts.append(f"{sign}{count} {kind.capitalize()} line{'s' if count > 1 else ''}")
    return ", ".join(parts) or "no rule line changed"


def rule_lines(body: bytes) -> RuleLines:
    """Each Allow and Disallow line of ``body`` (its kind and value, comments
    left out), counted."""
    return Counter(
        (match[1].decode("ascii").lower(), match[2].strip()) for match in _RULE.finditer(body)
    )


@dataclass(slots=True)
class _Changed:
    """One origin's robots.txt that differs from its pin."""

    current: str
    what: str
    pinned_rules: RobotsTxt | None
    unread: str = ""
    """Why the pinned body named by the evidence archive could not be read back."""
    forbidden: int = 0
    newly_forbidden: int = 0
    dropped: int = 0


class PinWatch:
    """The crawl's pins (see the module docstring)."""

    def __init__(
        self, crawler: Crawler, config: Config, pins: dict[str, str], state: StateStore | None
    ) -> None:
        self.pins = pins
        self.stop = config.pin_action == "stop_origin" and not config.dry_run
        self._max_size = config.max_size
        assert crawler.stats is not None
        self._stats = crawler.stats
        self._state = state
        self._archive = ArchivedBodies(config.pin_file, pins) if config.pin_file else None
        self.changed: dict[Origin, _Changed] = {}
        self.stopped: set[Origin] = set()
        """Origins whose requests the middleware drops (REP_PIN_ACTION = "stop_origin")."""
        # Pinned rules seen this crawl, and their lines (REP_CACHE_MAX_ORIGINS of them)
        self._pinned: OrderedDict[Origin, tuple[RobotsTxt, RuleLines | None]] = OrderedDict()
        self._bound = config.cache_max_origins

    @classmethod
    def open(cls, crawler: Crawler, config: Config, state: StateStore | None) -> PinWatch | None:
        """The crawl's pins; None without REP_PIN_FILE."""
        if config.pin_file is None:
            return None
        from scrapy import signals

        try:
            pins = read_pins(config.pin_file)
        except InvalidSetting as exc:  # one clean line before Scrapy's traceback
            logger.error("Cannot start: %s", exc)
            raise
        watch = cls(crawler, config, pins, state)
        crawler.signals.connect(watch.spider_closed, signal=signals.spider_closed)
        return watch

    def check(
        self, origin: Origin, entry: Entry, previous: Entry | None, body: bytes | None
    ) -> None:
        """After each robots.txt result of ``origin`` (``body``: the one just
        read, None if not read anew)."""
        pin = self.pins.get(origin.text)
        if pin is None:
            return
        if entry.outcome == PARSED and entry.sha256 == pin:
            if entry.robots is not None and origin not in self._pinned:
                if body is None and self._state is not None:
                    body = self._state.body(origin, pin)
                lines = rule_lines(body) if body is not None else None
                lru_put(self._pinned, origin, (entry.robots, lines), self._bound)
            self._stats.inc_value("rep/pin/matched")
            return
        if entry.outcome == PARSED and entry.sha256:
            current = entry.sha256
        elif entry.outcome == UNAVAILABLE:
            current = "none"  # robots.txt gone (4xx): everything allowed now
        else:
            return  # unreachable, refused locally: nothing new was said
        known = self.changed.get(origin)
        if known is not None and known.current == current:
            return
        pinned_rules, pinned_lines, unread = self._pinned_of(origin, pin, previous)
        if body is None and self._state is not None and current != "none":
            body = self._state.body(origin, current)  # taken from the state, not fetched
        if current == "none":
            what = "no robots.txt any more (everything allowed)"
        elif pinned_lines is not None and body is not None:
            what = rule_changes(pinned_lines, rule_lines(body))
        else:
            what = "the pinned body is not at hand to compare lines"
        self.changed[origin] = _Changed(current, what, pinned_rules, unread)
        self._stats.inc_value("rep/pin/changed")
        if self.stop:
            self.stopped.add(origin)
        logger.warning(
            "robots.txt of %s changed since pinned (sha256 %s... now %s...): %s%s; %s",
            origin.text,
            pin[:12],
            current[:12],
            what,
            f" (not read back from the evidence archive: {unread})" if unread else "",
            "its requests are dropped (REP_PIN_ACTION = 'stop_origin')"
            if self.stop
            else "the current rules apply",
        )

    def _pinned_of(
        self, origin: Origin, pin: str, previous: Entry | None
    ) -> tuple[RobotsTxt | None, RuleLines | None, str]:
        """The pinned rules and their lines, when this crawl, the state or the
        evidence archive has them; why the archive could not give them."""
        seen = self._pinned.get(origin)
        if seen is not None:
            return (*seen, "")
        rules = previous.robots if previous is not None and previous.sha256 == pin else None
        body = self._state.body(origin, pin) if self._state is not None else None
        if body is not None:
            assert self._state is not None
            self._state.keep_pinned(pin, body)  # the origin's row is about to get the new body
        unread = ""
        if body is None and self._archive is not None:
            try:
                body = self._archive.body(origin.text, pin)
            except ArchiveUnreadable as exc:
                unread = str(exc)
        if body is None:
            return rules, None, unread
        if rules is None:
            rules = RobotsTxt.parse(body, url=origin.robots_url, max_size=self._max_size)
        return rules, rule_lines(body), unread

    # -- requests ------------------------------------------------------------------

    def dropped(self, origin: Origin) -> None:
        """A request of a stopped origin was dropped."""
        self._stats.inc_value("rep/pin/dropped")
        self.changed[origin].dropped += 1

    def forbidden(self, origin: Origin, url: str, agent: str) -> None:
        """A request of a changed origin was forbidden by its current rules."""
        changed = self.changed[origin]
        changed.forbidden += 1
        self._stats.inc_value("rep/pin/forbidden")
        pinned = changed.pinned_rules
        if pinned is not None and pinned.allowed(url, user_agent=agent):
            changed.newly_forbidden += 1
            self._stats.inc_value("rep/pin/newly_forbidden")

    def spider_closed(self) -> None:
        for origin, changed in self.changed.items():
            if self.stop:
                tail = f"{changed.dropped} requests dropped (REP_PIN_ACTION = 'stop_origin')"
            else:
                tail = f"{changed.forbidden} requests forbidden since"
                if changed.pinned_rules is not None:
                    tail += f", {changed.newly_forbidden} of them allowed by the pinned rules"
            logger.warning(
                "robots.txt of %s changed since pinned: %s; %s", origin.text, changed.what, tail
            )
