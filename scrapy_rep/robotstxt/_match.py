"""Longest-match rule lookup for one user agent (RFC 9309 §2.2.2).

A rule is ranked by one integer, ``length * 2 + allow``: the longer pattern
wins, and Allow wins a tie. Which of several rules of equal rank is reported
is settled only when a decision is explained (:meth:`Matcher.pattern_for`).
Three kinds of rules, each found without trying every rule:

- plain prefixes (``/private``): one binary search over the sorted patterns,
  then a walk up their prefix-parent links;
- anchored literals (``/index.html$``): one dictionary lookup;
- wildcard rules (``/*.pdf$``): indexed by their literal head, tried only while
  they could beat the best match so far, and ruled out cheaply when a literal
  part they need is not in the path. Each part matches at its leftmost place
  (``str.find``): exact for ``*`` globs, linear, no backtracking.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

_NO_KEYS: list[str] = []  # shared by matchers without prefixes or heads; never changed
_NO_INDEXES = array("i")
_NO_RANKS = array("q")
NO_PATTERNS: frozenset[str] = frozenset()


def allows(rule_rank: int) -> bool:
    """Whether the rule of this rank is an Allow rule."""
    return bool(rule_rank & 1)


# A rule with '*' in it: (rank, needle, head size, body, anchored, pattern to report).
# The needle is a literal that any matching path holds: the part after the last
# '*' (with which an anchored path ends), else the longest part; it rules most
# paths out before the body is split and matched. Tuples sort by rank.
_Wildcard = tuple[int, str, int, str, bool, str]
_STAR_RUN = re.compile(r"\*\*+")


def _parents(keys: list[str]) -> list[int]:
    """For each of the sorted ``keys``, the index of its longest proper prefix
    among them, or -1."""
    parents: list[int] = []
    chain: list[int] = []
    for index, key in enumerate(keys):
        while chain and not key.startswith(keys[chain[-1]]):
            chain.pop()
        parents.append(chain[-1] if chain else -1)
        chain.append(index)
    return parents


def _glob_matches(path: str, pos: int, body: str, anchored: bool) -> bool:
    """Whether a wildcard rule's parts after its head match ``path`` from ``pos``."""
    *middle, last = body.split("*")[1:]
    for part in middle:
        if part:
            pos = path.find(part, pos)
            if pos < 0:
                return False
            pos += len(part)
    if anchored:
        return len(path) - len(last) >= pos and path.endswith(last)
    return path.find(last, pos) >= 0


def matches(pattern: str, path: str) -> bool:
    """Whether one normalised pattern matches a normalised path, as a rule of a
    :class:`Matcher` would (for the few patterns of usage rules and tdmrep.json)."""
    anchored = pattern[-1:] == "$"
    body = pattern[:-1] if anchored else pattern
    head_size = body.find("*")
    if head_size < 0:
        return path == body if anchored else path.startswith(body)
    return path.startswith(body[:head_size]) and _glob_matches(path, head_size, body, anchored)


def _wildcard(rule_rank: int, body: str, head_size: int, anchored: bool, label: str) -> _Wildcard:
    """A rule with '*' in its ``body`` (its pattern without the final '$')."""
    if "**" in body:  # a run of '*' matches like one
        body = _STAR_RUN.sub("*", body)
    needle = body[body.rfind("*") + 1 :]
    if not needle:  # ends with '*': even anchored, its end says nothing
        needle = max(body.split("*"), key=len)
        anchored = False
    return (rule_rank, needle, head_size, body, anchored, label)


class Matcher:
    """All Allow/Disallow rules of one agent, ready to find the deciding one."""

    __slots__ = (
        "_exact",
        "_head_parents",
        "_head_rules",
        "_heads",
        "_labels",
        "_parents",
        "_prefixes",
        "_ranks",
    )

    def __init__(
        self, prefixes: Sequence[tuple[str, str]], patterns: Iterable[tuple[bool, str]] = ()
    ) -> None:
        """``prefixes``: ``(allow marker, prefix)`` of rules whose value is a plain
        prefix in normal form (the marker is non-empty for Allow); ``patterns``:
        ``(allow, normalised pattern)`` of any other rule."""
        ranks: dict[str, int] = {}
        if prefixes:  # Allow wins a tie: its rank is written last
            ranks = {prefix: len(prefix) << 1 for marker, prefix in prefixes if not marker}
            ranks.update({prefix: (len(prefix) << 1) | 1 for marker, prefix in prefixes if marker})
        exact: dict[str, int] = {}
        heads: dict[str, list[_Wildcard]] = {}
        for allow, pattern in patterns:
            rule_rank = (len(pattern) << 1) | allow
            anchored = pattern[-1] == "$"
            body = pattern[:-1] if anchored else pattern
            head_size = body.find("*")
            if head_size < 0:
                table = exact if anchored else ranks
                if table.get(body, 0) < rule_rank:  # Allow wins a tie
                    table[body] = rule_rank
                continue
            wildcard = _wildcard(rule_rank, body, head_size, anchored, pattern)
            heads.setdefault(body[:head_size], []).append(wildcard)
        self._index(ranks, exact, heads, None)

    @classmethod
    def ranked(cls, rules: Iterable[tuple[int, str, str]]) -> Matcher:
        """A matcher of rules matched in another form than the one that gives
        their rank: ``(rank, pattern, pattern to report)`` (see
        :func:`scrapy_rep.robotstxt._url.decode_reserved`)."""
        matcher = cls(())
        ranks: dict[str, int] = {}
        exact: dict[str, int] = {}
        heads: dict[str, list[_Wildcard]] = {}
        labels: dict[str, str] = {}  # pattern -> the pattern to report
        for rule_rank, pattern, label in rules:
            anchored = pattern[-1] == "$"
            body = pattern[:-1] if anchored else pattern
            head_size = body.find("*")
            if head_size < 0:
                table = exact if anchored else ranks
                if table.get(body, 0) < rule_rank:  # Allow wins a tie; else the first rule
                    table[body] = rule_rank
                    labels[pattern] = label
                continue
            wildcard = _wildcard(rule_rank, body, head_size, anchored, label)
            heads.setdefault(body[:head_size], []).append(wildcard)
        matcher._index(ranks, exact, heads, labels)
        if labels:  # ranks not by length: each key's is the best along its prefixes
            ranks_, parents = matcher._ranks, matcher._parents
            for index, parent in enumerate(parents):
                if parent >= 0 and ranks_[parent] > ranks_[index]:
                    ranks_[index] = ranks_[parent]
        return matcher

    def _index(
        self,
        ranks: dict[str, int],
        exact: dict[str, int],
        heads: dict[str, list[_Wildcard]],
        labels: dict[str, str] | None,
    ) -> None:
        """Plain prefixes and the heads of wildcard rules, each sorted and linked
        to its longest proper prefix among them."""
        self._labels = labels or None
        self._prefixes, self._parents, self._ranks = _NO_KEYS, _NO_INDEXES, _NO_RANKS
        if ranks:
            keys = sorted(ranks)
            self._prefixes, self._parents = keys, array("i", _parents(keys))
            self._ranks = array("q", [ranks[key] for key in keys])
        self._exact = exact or None
        self._heads: list[str] = _NO_KEYS
        self._head_parents: list[int] = []
        self._head_rules: list[list[_Wildcard]] = []  # each sorted by rank, best first
        if heads:
            for group in heads.values():
                group.sort(reverse=True)
            self._heads = sorted(heads)
            self._head_parents = _parents(self._heads)
            self._head_rules = list(map(heads.__getitem__, self._heads))

    def best(self, path: str) -> int:
        """The rank of the deciding rule for a normalised ``path``; 0 when none matches."""
        keys = self._prefixes
        parents: Sequence[int] = self._parents
        at = bisect_right(keys, path) - 1
        while at >= 0 and not path.startswith(keys[at]):
            at = parents[at]
        best = self._ranks[at] if at >= 0 else 0
        exact = self._exact
        if exact is not None:
            anchored_rank = exact.get(path, 0)
            if anchored_rank > best:
                best = anchored_rank
        heads = self._heads
        if heads:
            head_parents = self._head_parents
            at = bisect_right(heads, path) - 1
            while at >= 0 and not path.startswith(heads[at]):
                at = head_parents[at]
            while at >= 0:
                for rule_rank, needle, head_size, body, anchored, _ in self._head_rules[at]:
                    if rule_rank <= best:
                        break  # sorted: no later rule of this head can win
                    if (path.endswith(needle) if anchored else needle in path) and _glob_matches(
                        path, head_size, body, anchored
                    ):
                        best = rule_rank
                        break
                at = head_parents[at]
        return best

    def best_without(self, path: str, left_out: AbstractSet[str]) -> int:
        """:meth:`best` among the rules whose pattern is not in ``left_out`` (not
        for a :meth:`ranked` matcher: this needs ranks that follow lengths)."""
        keys, parents = self._prefixes, self._parents
        at = bisect_right(keys, path) - 1
        while at >= 0 and (not path.startswith(keys[at]) or keys[at] in left_out):
            at = parents[at]
        best = self._ranks[at] if at >= 0 else 0
        if self._exact is not None and path + "$" not in left_out:
            best = max(best, self._exact.get(path, 0))
        heads = self._heads
        at = bisect_right(heads, path) - 1
        while at >= 0:
            if path.startswith(heads[at]):
                for rule_rank, _, head_size, body, anchored, pattern in self._head_rules[at]:
                    if rule_rank <= best:
                        break
                    if pattern not in left_out and _glob_matches(path, head_size, body, anchored):
                        best = rule_rank
                        break
            at = self._head_parents[at]
        return best

    def pattern_for(
        self, path: str, rule_rank: int, left_out: AbstractSet[str] = NO_PATTERNS
    ) -> str:
        """The pattern to report for a rule of ``rule_rank`` that matches ``path``
        (the one :meth:`best` or :meth:`best_without` found), to explain a decision."""
        keys, parents, ranks = self._prefixes, self._parents, self._ranks
        at = bisect_right(keys, path) - 1
        while at >= 0 and not path.startswith(keys[at]):
            at = parents[at]
        found = -1  # ranks never rise toward shorter prefixes: the shortest with it set it
        while at >= 0 and ranks[at] >= rule_rank:
            if ranks[at] == rule_rank and keys[at] not in left_out:
                found = at
            at = parents[at]
        if found >= 0:
            return self._label(keys[found])
        exact = self._exact
        if exact is not None and exact.get(path) == rule_rank and path + "$" not in left_out:
            return self._label(path + "$")
        heads = self._heads
        at = bisect_right(heads, path) - 1
        while at >= 0:
            if path.startswith(heads[at]):
                for rank_, _, head_size, body, anchored, label in self._head_rules[at]:
                    if (
                        rank_ == rule_rank
                        and label not in left_out
                        and _glob_matches(path, head_size, body, anchored)
                    ):
                        return label
            at = self._head_parents[at]
        return ""

    def _label(self, pattern: str) -> str:
        return pattern if self._labels is None else self._labels.get(pattern, pattern)
