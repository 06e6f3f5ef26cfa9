"""What ``scrapy robots`` reports: verdicts and robots.txt facts, as text or JSON.

Scrapy-free: given an :class:`~scrapy_rep.policy.Entry` (fetched through a
crawl, or built from a local file) and URLs of its origin, what a crawl with
the same settings would do with each URL, and why, in the settings' words.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from scrapy_rep import _clock
from scrapy_rep.config import Config, UnreachableMode
from scrapy_rep.policy import CHALLENGED, PARSED, REFUSED_LOCALLY, UNAVAILABLE, Entry, delay_for
from scrapy_rep.robotstxt import DelayLine, RobotsTxt
from scrapy_rep.usage import UsageLine

UrlVerdictWord = Literal["allowed", "forbidden", "deferred"]
_CACHED_AFTER = 5.0  # seconds: an older entry came from a cache, not from this run
USAGE_NOTE = (
    "from robots.txt only; a page's headers and meta (Content-Usage, Content-Signal, "
    "tdm-reservation, noai) and its origin's tdmrep.json are only known when it is fetched"
)
_USAGE_WORDS = {True: "allowed", False: "denied", None: "unknown"}


@dataclass(frozen=True, slots=True)
class PurposeVerdict:
    """What robots.txt says about one purpose for one URL (``scrapy robots --purpose``)."""

    purpose: str
    allowed: bool | None  # None: robots.txt says nothing (or the URL is not fetched)
    lines: tuple[UsageLine, ...] = ()
    reason: str = ""  # why there are no lines, when there are none


@dataclass(frozen=True, slots=True)
class UrlVerdict:
    """What a crawl would do with one URL, and why."""

    url: str
    verdict: UrlVerdictWord
    line: int | None = None
    rule: str | None = None
    reason: str = ""  # why, when no rule of robots.txt decided
    usage: tuple[PurposeVerdict, ...] = ()  # per declared purpose (REP_PURPOSES, --purpose)

    @property
    def allowed(self) -> bool:
        return self.verdict == "allowed"


@dataclass(frozen=True, slots=True)
class Delay:
    crawl_delay: float | None
    request_rate: tuple[int, float] | None
    lines: tuple[DelayLine, ...]  # the Crawl-delay / Request-rate lines that apply
    asked: float  # seconds between requests the group asks for (the larger line)
    applied: float  # capped at REP_MAX_CRAWL_DELAY; 0 with REP_OBEY_CRAWL_DELAY off


@dataclass(frozen=True, slots=True)
class Report:
    """One robots.txt (an origin's, or a local file) and the URLs checked against it."""

    source: str  # the robots.txt URL, or the local file's path
    from_file: bool
    entry: Entry
    group: tuple[str, ...] | None  # User-agent tokens of the groups that apply; None: no rules
    delay: Delay | None
    verdicts: tuple[UrlVerdict, ...]


def explain(
    source: str, entry: Entry, urls: Sequence[str], config: Config, *, from_file: bool = False
) -> Report:
    agent = config.user_agent
    robots = entry.robots
    if robots is None:
        verdicts = tuple(_unreachable_verdict(url, config) for url in urls)
        return Report(source, from_file, entry, None, None, verdicts)
    decisions = [(url, robots.decide(url, user_agent=agent)) for url in urls]
    no_rule = "no robots.txt rules apply" if entry.ruleless else "no rule matched"
    verdicts = tuple(
        UrlVerdict(
            url,
            "allowed" if decision.allowed else "forbidden",
            decision.line,
            decision.rule,
            "" if decision.line else no_rule,
            _usage(robots, url, agent, config.purposes, decision.allowed),
        )
        for url, decision in decisions
    )
    group = robots.decide("/", user_agent=agent).agents
    applied, asked = delay_for(robots, agent, config.max_crawl_delay)  # as a crawl's slot delay
    lines = robots.delays(user_agent=agent)
    delay = Delay(
        robots.crawl_delay(user_agent=agent),
        robots.request_rate(user_agent=agent),
        tuple(line for line in (lines.crawl_delay, lines.request_rate) if line is not None),
        asked,
        applied if config.obey_crawl_delay else 0.0,
    )
    return Report(source, from_file, entry, group, delay, verdicts)


def _usage(
    robots: RobotsTxt, url: str, agent: str, purposes: Sequence[str], allowed: bool
) -> tuple[PurposeVerdict, ...]:
    """What robots.txt's usage lines say of each purpose (the crawl's rule:
    RobotsTxt.decide_usage)."""
    if not purposes:
        return ()
    if not allowed:
        reason = "not fetched: no preferences"
        return tuple(PurposeVerdict(purpose, None, reason=reason) for purpose in purposes)
    decided = robots.decide_usage(url, user_agent=agent)
    return tuple(
        PurposeVerdict(purpose, decided[purpose].allowed, decided[purpose].lines)
        if purpose in decided
        else PurposeVerdict(purpose, None, reason="no usage line speaks of it")
        for purpose in purposes
    )


def _unreachable_verdict(url: str, config: Config) -> UrlVerdict:
    # the robots.txt block's "effect" line says more; this says what happens to the URL
    what: dict[UnreachableMode, tuple[UrlVerdictWord, str]] = {
        "allow": ("allowed", "let through"),
        "defer": ("deferred", "kept until it answers"),
        "disallow": ("forbidden", "dropped"),
    }
    verdict, action = what[config.unreachable]
    usage = tuple(
        PurposeVerdict(purpose, None, reason="no robots.txt rules") for purpose in config.purposes
    )
    return UrlVerdict(
        url, verdict, reason=f"robots.txt unreachable: {action} (REP_UNREACHABLE)", usage=usage
    )


# -- text -----------------------------------------------------------------------


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:g} s"


def _fetch_lines(report: Report, config: Config, now: float) -> list[tuple[str, str]]:
    entry = report.entry
    cut = f" (only the first {config.max_size} read: REP_MAX_SIZE)" if entry.truncated else ""
    if report.from_file:
        return [("file", f"{entry.size} bytes{cut}, nothing fetched")]
    lines: list[tuple[str, str]] = []
    if entry.outcome == PARSED:
        what = f"HTTP {entry.status}, {entry.size} bytes{cut}"
    else:
        what = entry.reason or "no response"
        if entry.status is not None and not what.startswith("HTTP "):
            what = f"HTTP {entry.status}, {what}"
        if entry.outcome == UNAVAILABLE:
            what += ": no usable robots.txt, everything allowed"
        elif entry.outcome == REFUSED_LOCALLY:
            what = f"not requested: a downloader middleware refused it ({what}); no rules"
        elif entry.outcome == CHALLENGED:
            what = f"challenged ({what}): not a robots.txt, read as unreachable"
        else:
            what = f"unreachable ({what})"
    left = entry.expires - now
    if entry.robots is not None and not entry.failed:
        if left > 0:
            what += f"; fresh until {_when(entry.expires)} (expires in {_seconds(left)})"
        else:  # from a shared cache: the next request of a crawl refetches it
            what += f"; expired at {_when(entry.expires)}, refetched by the next request"
    else:
        # a one-shot check retries nothing: say what a crawl would do
        what += f"; a crawl asks again in {_seconds(max(left, 0))} (REP_RETRY_MIN, doubling)"
    lines.append(("fetched", what))
    if entry.redirects:
        hops = "redirect" if entry.redirects == 1 else "redirects"
        lines.append(("redirect", f"{entry.redirects} {hops} -> {entry.url}"))
    age = now - entry.fetched
    if entry.stale:
        kept = f"kept up to REP_STALE_MAX = {_seconds(config.stale_max)}"
        copy = f"the last good copy, fetched {_when(entry.fetched)} ({_seconds(age)} ago), {kept}"
        lines.append(("rules", copy))
    elif entry.robots is None:
        effect = {
            "disallow": "every request to this origin is dropped until robots.txt answers",
            "allow": "requests to this origin go ahead as if there were no robots.txt",
            "defer": "requests to this origin wait until robots.txt answers "
            f"(at most REP_DEFER_MAX = {_seconds(config.defer_max)})",
        }[config.unreachable]
        lines.append(("effect", f"REP_UNREACHABLE = {config.unreachable!r}: {effect}"))
    elif age > _CACHED_AFTER:
        lines.append(("cached", f"fetched {_when(entry.fetched)} ({_seconds(age)} ago)"))
    return lines


def _group_text(report: Report, agent: str) -> str | None:
    group = report.group
    if group is None or report.entry.ruleless:
        return None
    if not group:
        return f"none: no group names {agent!r} and there is no 'User-agent: *' group"
    text = "User-agent: " + ", ".join(group)
    if group == ("*",) and agent != "*":
        text += f" (no group names {agent!r})"
    return text


def _delay_text(delay: Delay, config: Config) -> str:
    if not delay.lines:
        return "none asked (no Crawl-delay or Request-rate for this group)"
    lines = "; ".join(f"line {line.line}: {line.text}" for line in delay.lines)
    if not config.obey_crawl_delay:
        return f"not applied (REP_OBEY_CRAWL_DELAY = False); robots.txt asks {lines}"
    text = f"{delay.applied:g} s between requests ({lines}"
    if delay.asked > delay.applied:
        text += f", capped at REP_MAX_CRAWL_DELAY = {config.max_crawl_delay:g}"
    return text + ")"


def _verdict_lines(verdicts: Sequence[UrlVerdict]) -> list[str]:
    width = max(len(v.url) for v in verdicts)
    lines = []
    for verdict in verdicts:
        why = f"line {verdict.line}: {verdict.rule}" if verdict.line else verdict.reason
        lines.append(f"  {verdict.verdict.upper():<9}  {verdict.url:<{width}}  {why}")
        for purpose in verdict.usage:
            said = "; ".join(f"line {line.line}: {line.text}" for line in purpose.lines)
            lines.append(
                f"  {'':<9}  {'':<{width}}  {purpose.purpose} {_USAGE_WORDS[purpose.allowed]}"
                f" ({said or purpose.reason})"
            )
    return lines


def render_text(reports: Sequence[Report], config: Config, *, now: float | None = None) -> str:
    """One block per robots.txt: its facts once, then a line per URL."""
    now = _clock.now() if now is None else now
    out: list[str] = []
    for report in reports:
        facts = _fetch_lines(report, config, now)
        group = _group_text(report, config.user_agent)
        if group is not None:
            facts.append(("group", group))
        if report.delay is not None and not report.entry.ruleless:
            facts.append(("delay", _delay_text(report.delay, config)))
        robots = report.entry.robots
        if robots is not None and not report.entry.ruleless:
            sitemaps = robots.sitemaps or ("none",)
            facts.extend(("sitemaps" if i == 0 else "", url) for i, url in enumerate(sitemaps))
        if config.purposes:
            facts.append(("usage", f"{', '.join(config.purposes)}: {USAGE_NOTE}"))
        if out:
            out.append("")
        out.append(report.source if not report.from_file else f"robots.txt file {report.source}")
        out.extend(f"  {label:<9} {value}".rstrip() for label, value in facts)
        out.extend(_verdict_lines(report.verdicts))
    return "\n".join(out)


# -- JSON -----------------------------------------------------------------------


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _report_json(report: Report, config: Config, now: float) -> dict[str, Any]:
    entry = report.entry
    robots = entry.robots
    data: dict[str, Any] = {"robots_txt": report.source, "from_file": report.from_file}
    if not report.from_file:
        data["fetch"] = {
            "outcome": entry.outcome,
            "status": entry.status,
            "reason": entry.reason or None,
            "redirects": entry.redirects,
            "final_url": entry.url or None,
            "fetched": entry.fetched,
            "expires": _finite(entry.expires),
            "expires_in": _finite(entry.expires - now),
            "stale": entry.stale,
            "unreachable": config.unreachable if robots is None else None,
        }
    data["size"] = entry.size
    data["truncated"] = entry.truncated
    data["group"] = list(report.group) if report.group is not None else None
    delay = report.delay
    data["crawl_delay"] = delay.crawl_delay if delay else None
    data["request_rate"] = list(delay.request_rate) if delay and delay.request_rate else None
    data["delay"] = delay.applied if delay else 0.0
    data["delay_lines"] = [
        {"line": line.line, "text": line.text} for line in (delay.lines if delay else ())
    ]
    data["sitemaps"] = list(robots.sitemaps) if robots is not None else []
    data["urls"] = [
        {
            "url": v.url,
            "verdict": v.verdict,
            "allowed": v.allowed,
            "line": v.line,
            "rule": v.rule,
            "reason": v.reason or None,
            **({"usage": _usage_json(v.usage)} if config.purposes else {}),
        }
        for v in report.verdicts
    ]
    return data


def _usage_json(usage: Sequence[PurposeVerdict]) -> dict[str, Any]:
    return {
        purpose.purpose: {
            "allowed": purpose.allowed,
            "lines": [{"line": line.line, "text": line.text} for line in purpose.lines],
            "reason": purpose.reason or None,
        }
        for purpose in usage
    }


def render_json(reports: Sequence[Report], config: Config, *, now: float | None = None) -> str:
    now = _clock.now() if now is None else now
    data: dict[str, Any] = {
        "agent": config.user_agent,
        "allowed": all(v.allowed for r in reports for v in r.verdicts),
        "robots": [_report_json(report, config, now) for report in reports],
    }
    if config.purposes:
        data["purposes"] = list(config.purposes)
        data["usage_note"] = USAGE_NOTE
    return json.dumps(data, indent=2)
