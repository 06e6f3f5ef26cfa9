"""The robots.txt parser: RFC 9309, read the way Google's reference reads it.

``RobotsTxt.parse`` only finds the groups and the sitemaps
(:mod:`._groups`); a group's rules are read and indexed the first time an
agent that uses them asks (:mod:`._rules`), so a file with a hundred groups
costs one group's work.

Escaped reserved characters: RFC 9309 §2.2.2 reads "%3D" against "=" two
ways; a URL is fetched only when both readings allow it (docs/parser.md). The
first keeps escapes as they are, the second decodes them
(``_url.decode_reserved``); in both a rule's priority is its length in normal
form, an escape counting three octets, as Google's reference counts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from scrapy_rep.robotstxt import _groups
from scrapy_rep.robotstxt._delay_lines import AgentDelays, delay_line
from scrapy_rep.robotstxt._match import allows
from scrapy_rep.robotstxt._rules import (
    ALLOW_ALL,
    DISALLOW_ALL,
    AgentRules,
    read_rules,
    rule_line,
    second_reading,
)
from scrapy_rep.robotstxt._url import (
    LONG_URL,
    PLAIN_URL,
    normalize_path,
    path_of,
    reads_one_way,
    url_path,
)
from scrapy_rep.robotstxt._usage_lines import UsageDecision, read_usage

__all__ = ["DEFAULT_MAX_SIZE", "Decision", "DelayLine", "Delays", "RobotsTxt"]

DEFAULT_MAX_SIZE: Final = 512_000
"""Bytes of a robots.txt body that are read: 500 KiB (RFC 9309 §2.5 asks for
at least 500 kibibytes), the rest is ignored."""

_ROBOTS_TXT = "/robots.txt"
_AFTER_ROBOTS_TXT = slice(len(_ROBOTS_TXT), len(_ROBOTS_TXT) + 1)


@dataclass(slots=True, unsafe_hash=True)
class Decision:
    """The verdict for one URL, and the line of robots.txt that decided it."""

    allowed: bool
    line: int | None = None
    """1-based line of the deciding rule, None when no rule decided."""
    rule: str | None = None
    """E.g. "Disallow: /private"."""
    agents: tuple[str, ...] = ()
    """User-agent tokens of the group(s) used."""


@dataclass(frozen=True, slots=True)
class DelayLine:
    """A Crawl-delay or Request-rate line of robots.txt that applies."""

    line: int
    """Its 1-based line number."""
    text: str
    """Its key and value, e.g. "Crawl-delay: 10" or "Request-rate: 1/5"."""
    seconds: float
    """The seconds between two requests that it asks for (a rate's seconds / requests)."""


@dataclass(frozen=True, slots=True)
class Delays:
    """The Crawl-delay and Request-rate lines that apply to one user agent."""

    crawl_delay: DelayLine | None = None
    request_rate: DelayLine | None = None

    @property
    def seconds(self) -> float | None:
        """The seconds to keep between two requests: the larger that the two
        lines ask for, or None when neither applies."""
        asked = [line.seconds for line in (self.crawl_delay, self.request_rate) if line]
        return max(asked) if asked else None


_NO_DELAYS = Delays()


def _allowed_second_way(rules: AgentRules, path: str, rank: int) -> bool:
    """Whether ``path``, allowed by the first reading of RFC 9309 §2.2.2 (its
    deciding rule's ``rank``, 0 for none), is allowed by the second too."""
    escaped = rules.escaped
    # (rules with a bare '%' are among the escaped ones: none without them)
    if escaped is None and reads_one_way(path):
        return True  # the second reading is the same
    if "%" not in path:  # the path reads alike: only the escaped rules differ
        second_rank = escaped.best(path)  # type: ignore[union-attr]  # not None here
        if second_rank <= rank or second_rank & 1:
            return True
    else:
        rank = second_reading(rules, path, rank).rank
        if not rank or rank & 1:
            return True
    return _is_robots_txt(path)


def _is_robots_txt(path: str) -> bool:
    """Whether ``path`` is /robots.txt itself, always allowed (RFC 9309 §2.2.2)."""
    return path.startswith(_ROBOTS_TXT) and path[_AFTER_ROBOTS_TXT] in ("", "?")


def _rule_path(url: str) -> str:
    """The normalised path of ``url``, or "" for /robots.txt (always allowed)."""
    path = url_path(url)
    return "" if _is_robots_txt(path) else path


class RobotsTxt:
    """A parsed robots.txt. Build one with :meth:`parse`, :meth:`allow_all` or
    :meth:`disallow_all`; ask it with :meth:`allowed` or :meth:`decide`."""

    __slots__ = ("_by_agent", "_fixed", "_groups", "sitemaps", "truncated")

    def __init__(self) -> None:
        self._groups = _groups.NO_GROUPS
        self._by_agent: dict[str, AgentRules] = {}
        self._fixed: AgentRules | None = None  # allow_all / disallow_all
        self.sitemaps: tuple[str, ...] = ()
        self.truncated = False  # True when the body was longer than max_size

    # -- building -------------------------------------------------------------

    @classmethod
    def allow_all(cls) -> RobotsTxt:
        """Rules that allow everything (robots.txt unavailable, RFC 9309 §2.3.1.3)."""
        robots = cls()
        robots._fixed = ALLOW_ALL
        return robots

    @classmethod
    def disallow_all(cls) -> RobotsTxt:
        """Rules that forbid everything but /robots.txt (unreachable, §2.3.1.4)."""
        robots = cls()
        robots._fixed = DISALLOW_ALL
        return robots

    @classmethod
    def parse(
        cls,
        body: bytes | str,
        *,
        url: str | None = None,
        max_size: int = DEFAULT_MAX_SIZE,
    ) -> RobotsTxt:
        """Parse a robots.txt body; never raises for any content. ``url``
        resolves relative Sitemap lines; only the first ``max_size`` bytes are
        read, and a line cut there is dropped."""
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size!r}")
        robots = cls()
        text, robots.truncated = _groups.body_text(body, max_size)
        robots._groups, sitemap_lines = _groups.find_groups(text)
        if sitemap_lines:
            robots.sitemaps = _groups.sitemaps(sitemap_lines, url)
        return robots

    # -- asking ---------------------------------------------------------------

    def allowed(self, url: str, *, user_agent: str) -> bool:
        """Whether ``user_agent`` may fetch ``url`` (absolute or path-absolute)."""
        rules = self._fixed or self._by_agent.get(user_agent) or self._rules_for(user_agent)
        matcher = rules.matcher
        if matcher is None:
            return True
        # The hot path: url_path() inlined for short plain URLs (no '%': only
        # escaped rules can read otherwise the second way).
        if len(url) < LONG_URL:
            plain = PLAIN_URL.match(url)
            if plain is not None:
                path = plain[2]
                rank = matcher.best(path)
                if rank and not rank & 1:
                    return _is_robots_txt(path)
                return rules.escaped is None or _allowed_second_way(rules, path, rank)
            path = normalize_path(path_of(url))
        else:
            path = url_path(url)
        rank = matcher.best(path)
        if rank and not rank & 1:
            return _is_robots_txt(path)
        return _allowed_second_way(rules, path, rank)

    def decide(self, url: str, *, user_agent: str) -> Decision:
        """Like :meth:`allowed`, with the line and rule that decided."""
        rules = self._fixed or self._by_agent.get(user_agent) or self._rules_for(user_agent)
        matcher = rules.matcher
        path = _rule_path(url) if matcher is not None else ""
        if matcher is None or not path:
            return Decision(True, None, None, rules.agents)
        rank = matcher.best(path)
        if (not rank or rank & 1) and (rules.escaped is not None or "%" in path):
            # Allowed in the first reading: a Disallow of the second decides, else an Allow.
            second = second_reading(rules, path, rank)
            if second.rank and (not rank or not second.rank & 1):
                line, rule = rule_line(self._groups, rules, second.pattern(), allows(second.rank))
                return Decision(allows(second.rank), line, rule, rules.agents)
        if not rank:
            return Decision(True, None, None, rules.agents)
        allow = allows(rank)
        line, rule = rule_line(self._groups, rules, matcher.pattern_for(path, rank), allow)
        return Decision(allow, line, rule, rules.agents)

    def crawl_delay(self, *, user_agent: str) -> float | None:
        """Seconds between requests from the agent's Crawl-delay line, or None."""
        rules = self._fixed or self._by_agent.get(user_agent) or self._rules_for(user_agent)
        return rules.delays.crawl_delay

    def request_rate(self, *, user_agent: str) -> tuple[int, float] | None:
        """``(requests, seconds)`` from the agent's Request-rate line, or None."""
        rules = self._fixed or self._by_agent.get(user_agent) or self._rules_for(user_agent)
        return rules.delays.request_rate

    def delays(self, *, user_agent: str) -> Delays:
        """The Crawl-delay and Request-rate lines that apply to the agent, with
        their line numbers; :attr:`Delays.seconds` is the delay they ask for."""
        rules = self._fixed or self._by_agent.get(user_agent) or self._rules_for(user_agent)
        if rules.delay_lines is None:
            rules.delay_lines = self._delay_lines(rules.delays)
        delays: Delays = rules.delay_lines
        return delays

    def _delay_lines(self, found: AgentDelays) -> Delays:
        crawl_delay = request_rate = None
        if found.crawl_delay is not None:
            line, text = delay_line(self._groups, found.crawl_delay_at)
            crawl_delay = DelayLine(line, text, found.crawl_delay)
        if found.request_rate is not None:
            line, text = delay_line(self._groups, found.request_rate_at)
            requests, seconds = found.request_rate
            request_rate = DelayLine(line, text, seconds / requests)
        if crawl_delay is None and request_rate is None:
            return _NO_DELAYS
        return Delays(crawl_delay, request_rate)

    def usage(self, url: str, *, user_agent: str) -> dict[str, bool]:
        """The usage preferences robots.txt states for ``url`` and ``user_agent``:
        ``{purpose: allowed}``, a purpose absent when nothing is said about it
        (purposes: ``"train-ai"``, ``"search"``, ``"ai-input"``). A URL the agent
        may not fetch has none (``{}``). See :mod:`scrapy_rep.usage`."""
        return {purpose: found.allowed for purpose, found in self._usage(url, user_agent).items()}

    def decide_usage(self, url: str, *, user_agent: str) -> dict[str, UsageDecision]:
        """Like :meth:`usage`, with the Content-Usage / Content-Signal lines that
        say it, per purpose."""
        return self._usage(url, user_agent)

    def _usage(self, url: str, user_agent: str) -> dict[str, UsageDecision]:
        if self._fixed is not None or not self.allowed(url, user_agent=user_agent):
            return {}
        rules = self._by_agent.get(user_agent) or self._rules_for(user_agent)
        usage = rules.usage
        if usage is None:
            groups = self._groups
            token = user_agent.lower()
            if not rules.groups or token not in groups.agents[rules.groups[0]]:
                token = _groups.GLOBAL  # no group names the agent: "*" groups, if any
            usage = rules.usage = read_usage(groups, rules.groups, token)
        return usage.decide(url_path(url))

    def __repr__(self) -> str:
        if self._fixed is ALLOW_ALL:
            return "<RobotsTxt allow_all>"
        if self._fixed is DISALLOW_ALL:
            return "<RobotsTxt disallow_all>"
        return f"<RobotsTxt groups={len(self._groups.agents)} sitemaps={len(self.sitemaps)}>"

    def _rules_for(self, user_agent: str) -> AgentRules:
        """Read and index the groups that apply to ``user_agent`` (once per agent)."""
        rules = self._by_agent[user_agent] = read_rules(self._groups, user_agent)
        return rules
