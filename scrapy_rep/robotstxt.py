"""The robots.txt parser: RFC 9309, read the way Google's reference reads it.

``RobotsTxt.parse`` only finds the groups (their user agents and where their
lines are) and the sitemaps; the rules of a group are read and indexed the
first time an agent that uses them asks. A crawler asks with one token, so a
file with a hundred groups costs one group's work, and the text of the groups
nobody asked about is the only thing kept for them.
"""

from __future__ import annotations

import math
import re
import sys
from array import array
from typing import Final
from urllib.parse import urljoin

from scrapy_rep import _lines
from scrapy_rep._match import Matcher, allows
from scrapy_rep._url import (
    LONG_URL,
    PLAIN_IN_PATH,
    PLAIN_URL,
    normalize_path,
    normalize_pattern,
    path_of,
    url_path,
)

__all__ = ["Decision", "RobotsTxt"]

DEFAULT_MAX_SIZE: Final = 512_000

_GLOBAL = "*"
_TOKEN = re.compile(r"[A-Za-z_-]*")
_DELAY = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_RATE = re.compile(r"(\d+)\s*/\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)(?![A-Za-z])", re.I)
_RATE_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_BOM = b"\xef\xbb\xbf"
_ROBOTS_TXT = "/robots.txt"
_KIND_NAMES = {True: "Allow", False: "Disallow"}
_SPACE = " \t\v\f"
# The lines of a group that matter once an agent asks, read in one pass: the
# line up to its comment, the key (by its start, typos included), whether a
# colon follows it, and the value, in one of three groups: a plain prefix
# ("/path", most rules), a pattern with '*' or a final '$' that normalising
# leaves as it is, or anything else.
_PLAIN_CHARS = re.escape(PLAIN_IN_PATH.decode().replace("#", ""))
_DIRECTIVE = re.compile(
    rf"\n([ \t\v\f]*(?:({_lines.ALLOW_KEY})|({_lines.DISALLOW_KEY})|({_lines.CRAWL_DELAY_KEY})"
    rf"|{_lines.REQUEST_RATE_KEY})[^:#\n]*(:?)[ \t\v\f]*"
    rf"(?:([{_PLAIN_CHARS}]*)[ \t\v\f]*(?=#|$)|([{_PLAIN_CHARS}*]*\$?)[ \t\v\f]*(?=#|$)"
    r"|([^#\n]*)))",
    re.MULTILINE,
)
# Lines longer than this may be cut (Google's 16,663 bytes): read them slowly.
_LONG_LINE = _lines.MAX_LINE // 4
# What parse() keeps, found in one scan: each user-agent line (its key, whether
# a colon follows, the token it names: "*" or a leading [A-Za-z_-] run), each
# sitemap line, and each rule line (whether a colon follows its key). After a
# rule line the scan jumps to the next user-agent or sitemap line.
_GROUP_LINE = re.compile(
    rf"\n[ \t\v\f]*(?:({_lines.USER_AGENT_KEY})[^:#\n]*(:?)[ \t\v\f]*"
    rf"(?:(\*)(?![^ \t\v\f#\n])|([A-Za-z_-]*))[^#\n]*"
    rf"|({_lines.SITEMAP_KEY})[^\n]*"
    rf"|(?:{_lines.RULE_KEY})[^:#\n]*(:?)[^\n]*)"
)
_NEXT_HEAD = re.compile(rf"\n[ \t\v\f]*(?:{_lines.USER_AGENT_KEY}|{_lines.SITEMAP_KEY})")


class Decision:
    """The verdict for one URL, and the line of robots.txt that decided it."""

    __slots__ = ("agents", "allowed", "line", "rule")

    def __init__(
        self,
        allowed: bool,
        line: int | None = None,
        rule: str | None = None,
        agents: tuple[str, ...] = (),
    ) -> None:
        self.allowed = allowed
        self.line = line  # 1-based line of the deciding rule, None when no rule decided
        self.rule = rule  # e.g. "Disallow: /private"
        self.agents = agents  # user-agent tokens of the group(s) used

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Decision):
            return NotImplemented
        return (self.allowed, self.line, self.rule, self.agents) == (
            other.allowed,
            other.line,
            other.rule,
            other.agents,
        )

    def __hash__(self) -> int:
        return hash((self.allowed, self.line, self.rule, self.agents))

    def __repr__(self) -> str:
        return (
            f"Decision(allowed={self.allowed!r}, line={self.line!r}, "
            f"rule={self.rule!r}, agents={self.agents!r})"
        )


class _AgentRules:
    """What applies to one user agent: its rules, delays and the groups used,
    and what :meth:`RobotsTxt.decide` learnt about where its rules are written."""

    __slots__ = (
        "agents",
        "crawl_delay",
        "explained",
        "groups",
        "matcher",
        "request_rate",
        "rule_offsets",
    )

    def __init__(
        self,
        agents: tuple[str, ...],
        matcher: Matcher | None,
        crawl_delay: float | None = None,
        request_rate: tuple[int, float] | None = None,
        groups: tuple[int, ...] = (),
    ) -> None:
        self.agents = agents
        self.groups = groups  # indexes of the groups read
        self.matcher = matcher
        self.crawl_delay = crawl_delay
        self.request_rate = request_rate
        # For decide(), built on its first call: where the first rule line that
        # makes each pattern starts ([Disallow, Allow]), and the answers given.
        self.rule_offsets: tuple[dict[str, int], dict[str, int]] | None = None
        self.explained: dict[tuple[str, bool], tuple[int | None, str]] | None = None


_NO_OFFSETS: Final = array("q")
_ALLOW_ALL = _AgentRules((), None)
_DISALLOW_ALL = _AgentRules((), Matcher([("", "/")]))


def _is_robots_txt(path: str) -> bool:
    """Whether ``path`` is /robots.txt itself, always allowed (RFC 9309 §2.2.2)."""
    return path.startswith(_ROBOTS_TXT) and path[11:12] in ("", "?")


def _rule_path(url: str) -> str:
    """The normalised path of ``url``, or "" for /robots.txt (always allowed)."""
    path = url_path(url)
    return "" if _is_robots_txt(path) else path


def _agent_token(value: str) -> str:
    """The token a User-agent line names: "*" or its leading [A-Za-z_-] run."""
    if value[:1] == _GLOBAL and value[1:2] in ("", " ", "\t", "\v", "\f"):
        return _GLOBAL
    return _TOKEN.match(value).group().lower()  # type: ignore[union-attr]


def _parse_delay(value: str) -> float | None:
    if not _DELAY.fullmatch(value):
        return None  # non-numeric, negative, NaN and inf all end here
    delay = float(value)
    return delay if math.isfinite(delay) else None


def _parse_rate(value: str) -> tuple[int, float] | None:
    match = _RATE.match(value)
    if match is None:
        return None
    requests = int(match[1])
    seconds = float(match[2]) * _RATE_UNITS[match[3].lower()]
    if requests <= 0 or not seconds > 0 or not math.isfinite(seconds):
        return None
    return requests, seconds


class RobotsTxt:
    """A parsed robots.txt. Build one with :meth:`parse`, :meth:`allow_all` or
    :meth:`disallow_all`; ask it with :meth:`allowed` or :meth:`decide`."""

    __slots__ = (
        "_agents",
        "_bounds",
        "_by_agent",
        "_first_line",
        "_fixed",
        "_text",
        "sitemaps",
        "truncated",
    )

    def __init__(self) -> None:
        self._text = ""
        # The groups: group i is text[bounds[i]:bounds[i + 1]], from the "\n"
        # before its first line; its user-agent tokens are agents[i].
        self._bounds = _NO_OFFSETS
        self._agents: list[tuple[str, ...]] = []
        self._first_line = 1  # the line number of the first group's first line
        self._by_agent: dict[str, _AgentRules] = {}
        self._fixed: _AgentRules | None = None  # allow_all / disallow_all
        self.sitemaps: tuple[str, ...] = ()
        self.truncated = False  # True when the body was longer than max_size

    # -- building -------------------------------------------------------------

    @classmethod
    def allow_all(cls) -> RobotsTxt:
        """Rules that allow everything (robots.txt unavailable, RFC 9309 §2.3.1.3)."""
        robots = cls()
        robots._fixed = _ALLOW_ALL
        return robots

    @classmethod
    def disallow_all(cls) -> RobotsTxt:
        """Rules that forbid everything but /robots.txt (unreachable, §2.3.1.4)."""
        robots = cls()
        robots._fixed = _DISALLOW_ALL
        return robots

    @classmethod
    def parse(
        cls,
        body: bytes | str,
        *,
        url: str | None = None,
        max_size: int = DEFAULT_MAX_SIZE,
    ) -> RobotsTxt:
        """Parse a robots.txt body; never raises for any content.

        ``url`` is where the body came from (resolves relative Sitemap lines);
        only the first ``max_size`` bytes are read, and a line cut there is
        dropped.
        """
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size!r}")
        data = _to_bytes(body)
        robots = cls()
        if len(data) > max_size:
            robots.truncated = True
            data = _cut(data, max_size)
        text = _to_text(data)
        sitemap_lines = robots._find_groups(text)
        if sitemap_lines:
            robots.sitemaps = _sitemaps(sitemap_lines, url)
        return robots

    def _find_groups(self, text: str) -> list[str]:
        """Find the groups; returns the sitemap lines met on the way."""
        bounds: list[int] = []  # where each group starts (the "\n" before its first line)
        agents: list[dict[str, None]] = []  # each group's tokens, in order
        sitemap_lines: list[str] = []
        rule_seen = False  # since the last user-agent line
        position = 0
        while (match := _GROUP_LINE.search(text, position)) is not None:
            key, colon, star, token, sitemap, rule_colon = match.groups()
            start, position = match.span()
            if sitemap:
                sitemap_lines.append(match.group()[1:])
                continue
            if key is None:  # a rule line: its group goes on up to the next head line
                head = _NEXT_HEAD.search(text, position)
                position = len(text) if head is None else head.start()
                if not rule_seen:
                    rule_seen = bool(
                        rule_colon and match.start(6) - start <= _LONG_LINE
                    ) or _has_rule(text, start, position)
                continue
            if colon and match.end() - start <= _LONG_LINE:
                token = star or token.lower()
            else:  # no colon (maybe a two-word line) or a line Google would cut
                parsed = _lines.parse_line(match.group()[1:])
                if parsed is None or parsed[0] != _lines.USER_AGENT:
                    continue
                token = _agent_token(parsed[1])
            if rule_seen or not bounds:
                bounds.append(start)
                agents.append({})
                rule_seen = False
            if token:
                agents[-1].setdefault(sys.intern(token))
        if not bounds:
            return sitemap_lines
        # Keep only the text from the first group on, offsets shifted to match.
        base = bounds[0]
        self._first_line = text.count("\n", 0, base + 1)
        self._text = text[base:]
        bounds.append(len(text))
        self._bounds = array("q", [bound - base for bound in bounds])
        self._agents = list(map(tuple, agents))
        return sitemap_lines

    # -- asking ---------------------------------------------------------------

    def allowed(self, url: str, *, user_agent: str) -> bool:
        """Whether ``user_agent`` may fetch ``url`` (absolute or path-absolute)."""
        rules = self._fixed or self._by_agent.get(user_agent) or self._rules_for(user_agent)
        matcher = rules.matcher
        if matcher is None:
            return True
        # The hot path of every crawl: url_path() inlined for the short plain
        # URLs that most are, read in one match.
        if len(url) < LONG_URL:
            plain = PLAIN_URL.match(url)
            path = plain[2] if plain is not None else normalize_path(path_of(url))
        else:
            path = url_path(url)
        rank = matcher.best(path)
        return not rank or bool(rank & 1) or _is_robots_txt(path)

    def decide(self, url: str, *, user_agent: str) -> Decision:
        """Like :meth:`allowed`, with the line and rule that decided."""
        rules = self._fixed or self._by_agent.get(user_agent) or self._rules_for(user_agent)
        path = _rule_path(url) if rules.matcher is not None else ""
        rank = rules.matcher.best(path) if rules.matcher is not None and path else 0
        if not rank or rules.matcher is None:
            return Decision(True, None, None, rules.agents)
        allow = allows(rank)
        line, rule = self._explain(rules, rules.matcher.pattern_for(path, rank), allow)
        return Decision(allow, line, rule, rules.agents)

    def crawl_delay(self, *, user_agent: str) -> float | None:
        """Seconds between requests asked by the agent's group, or None."""
        rules = self._fixed or self._by_agent.get(user_agent) or self._rules_for(user_agent)
        return rules.crawl_delay

    def request_rate(self, *, user_agent: str) -> tuple[int, float] | None:
        """``(requests, seconds)`` from the agent's Request-rate line, or None."""
        rules = self._fixed or self._by_agent.get(user_agent) or self._rules_for(user_agent)
        return rules.request_rate

    def __repr__(self) -> str:
        if self._fixed is _ALLOW_ALL:
            return "<RobotsTxt allow_all>"
        if self._fixed is _DISALLOW_ALL:
            return "<RobotsTxt disallow_all>"
        return f"<RobotsTxt groups={len(self._agents)} sitemaps={len(self.sitemaps)}>"

    def _rules_for(self, user_agent: str) -> _AgentRules:
        """Read and index the groups that apply to ``user_agent`` (once per agent)."""
        token = user_agent.lower()
        chosen = [index for index, tokens in enumerate(self._agents) if token in tokens]
        if not chosen:
            chosen = [index for index, tokens in enumerate(self._agents) if _GLOBAL in tokens]
        prefixes: list[tuple[str, str]] = []  # (Allow key or "", plain prefix)
        patterns: list[tuple[bool, str]] = []  # (allow, any other normalised pattern)
        delays: list[float] = []
        rates: list[tuple[int, float]] = []
        text, bounds = self._text, self._bounds
        for index in chosen:
            for line, allow, disallow, delay, colon, prefix, pattern, value in _DIRECTIVE.findall(
                text, bounds[index], bounds[index + 1]
            ):
                if colon and len(line) <= _LONG_LINE:
                    if prefix and (allow or disallow):  # "Disallow: /path", the common case
                        prefixes.append((allow, prefix))
                        continue
                    kind = (
                        _lines.ALLOW
                        if allow
                        else _lines.DISALLOW
                        if disallow
                        else _lines.CRAWL_DELAY
                        if delay
                        else _lines.REQUEST_RATE
                    )
                    value = prefix or pattern or value.rstrip(_SPACE)
                else:  # no colon (maybe a two-word line) or a line Google would cut
                    parsed = _lines.parse_line(line)
                    if parsed is None:
                        continue
                    kind, value = parsed
                    pattern = ""
                if kind == _lines.ALLOW or kind == _lines.DISALLOW:
                    if value:  # an empty value is no rule
                        patterns.append((kind == _lines.ALLOW, pattern or normalize_pattern(value)))
                elif kind == _lines.CRAWL_DELAY:
                    seconds = _parse_delay(value)
                    if seconds is not None:
                        delays.append(seconds)
                elif kind == _lines.REQUEST_RATE:
                    rate = _parse_rate(value)
                    if rate is not None:
                        rates.append(rate)
        if len(chosen) == 1:
            agents = self._agents[chosen[0]]
        else:
            agents = tuple(
                dict.fromkeys(agent for index in chosen for agent in self._agents[index])
            )
        result = _AgentRules(
            agents,
            Matcher(prefixes, patterns) if prefixes or patterns else None,
            max(delays) if delays else None,  # the most cautious of merged groups
            rates[0] if rates else None,
            tuple(chosen),
        )
        self._by_agent[user_agent] = result
        return result

    def _explain(self, rules: _AgentRules, pattern: str, allow: bool) -> tuple[int | None, str]:
        """Line number and text ("Disallow: /x") of the first rule of ``rules``'
        groups that makes this pattern with this kind (cached per agent)."""
        key = (pattern, allow)
        if rules.explained is None or rules.rule_offsets is None:
            rules.explained, rules.rule_offsets = {}, self._rule_offsets(rules.groups)
        known = rules.explained.get(key)
        if known is not None:
            return known
        offset = rules.rule_offsets[allow].get(pattern)
        known = (None, f"{_KIND_NAMES[allow]}: {pattern}")  # not expected: no such line
        if offset is not None:
            text = self._text
            end = text.find("\n", offset)
            parsed = _lines.parse_line(text[offset : len(text) if end < 0 else end])
            value = pattern if parsed is None else parsed[1]  # (it was read as this rule)
            line = self._first_line + text.count("\n", 1, offset)
            known = (line, f"{_KIND_NAMES[allow]}: {value}")
        rules.explained[key] = known
        return known

    def _rule_offsets(self, groups: tuple[int, ...]) -> tuple[dict[str, int], dict[str, int]]:
        """Where the first rule line of ``groups`` that makes each normalised
        pattern starts, for Disallow rules and for Allow rules: one pass, so
        explaining many decisions stays linear."""
        offsets: tuple[dict[str, int], dict[str, int]] = ({}, {})
        text, bounds = self._text, self._bounds
        for index in groups:
            for match in _lines.RULE_LINE.finditer(text, bounds[index], bounds[index + 1]):
                parsed = _lines.parse_line(match.group()[1:])
                if parsed is None or not parsed[1]:
                    continue
                kind, value = parsed
                if kind == _lines.ALLOW or kind == _lines.DISALLOW:
                    table = offsets[kind == _lines.ALLOW]
                    table.setdefault(normalize_pattern(value), match.start() + 1)
        return offsets


def _has_rule(text: str, start: int, end: int) -> bool:
    """Whether an Allow/Disallow line lies in ``text[start:end]``."""
    for match in _lines.RULE_LINE.finditer(text, start, end):
        parsed = _lines.parse_line(match.group()[1:])
        if parsed is not None and parsed[0] in (_lines.ALLOW, _lines.DISALLOW):
            return True
    return False


def _to_bytes(body: bytes | str) -> bytes:
    if isinstance(body, str):
        try:
            return body.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return body.encode("utf-8", "surrogatepass")
    return bytes(body)


def _cut(data: bytes, max_size: int) -> bytes:
    """The first ``max_size`` bytes, without a last line that was cut short."""
    if data[max_size : max_size + 1] in (b"\n", b"\r"):
        return data[:max_size]
    head = data[:max_size]
    return head[: max(head.rfind(b"\n"), head.rfind(b"\r")) + 1]


def _to_text(data: bytes) -> str:
    """Text with one "\\n" in front and every line end folded to "\\n"."""
    if data.startswith(b"\xef"):  # Google skips a UTF-8 BOM, even a partial one
        for size in (3, 2, 1):
            if data.startswith(_BOM[:size]):
                data = data[size:]
                break
    text = data.decode("utf-8", "surrogateescape")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "\n" + text


def _sitemaps(lines: list[str], url: str | None) -> tuple[str, ...]:
    """The locations that ``lines`` name, resolved against ``url``, deduplicated."""
    found: dict[str, None] = {}
    for line in lines:
        parsed = _lines.parse_line(line)
        if parsed is None or parsed[0] != _lines.SITEMAP or not parsed[1]:
            continue
        location = parsed[1]
        if url is not None and "://" not in location:
            try:
                location = urljoin(url, location)
            except ValueError:  # e.g. broken IPv6 brackets: no URL to give
                continue
        found[location] = None
    return tuple(found)
