"""Longest-match rule lookup for one user agent (RFC 9309 §2.2.2).

A rule is a plain tuple ``(length, allow, -line, value)``: tuples compare in
that order, so the larger one wins (the longest pattern, then Allow on a tie,
then the earlier line), and they are cheap to build for files with thousands
of rules. Rules are sorted into three kinds, each found without trying every
rule:

- plain prefixes (``/private``): the longest one that starts the path is found
  with one binary search over the sorted patterns plus a walk up their
  prefix-parent links (the answer is always an ancestor of the pattern the
  search lands on);
- anchored literals (``/index.html$``): one dictionary lookup;
- wildcard rules (``/*.pdf$``): indexed by their literal head, tried only while
  they could still beat the best match so far, and ruled out cheaply when
  their longest literal part is not in the path.

A wildcard rule matches part by part, each at its leftmost place (``str.find``),
which is exact for ``*`` globs and linear in path x pattern: no input can make
it backtrack.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from typing import Generic, TypeVar

from scrapy_rep._url import normalize_pattern

__all__ = ["Matcher", "Rule"]

Rule = tuple[int, bool, int, str]  # (pattern length, allow, -line, value as written)

_V = TypeVar("_V")


class _Wildcard:
    """A rule with ``*`` in it, split at its wildcards."""

    __slots__ = ("anchored", "head_size", "last", "middle", "needle", "rule")

    def __init__(self, rule: Rule, body: str, anchored: bool) -> None:
        self.rule = rule
        self.anchored = anchored
        head, *rest = body.split("*")
        self.head_size = len(head)
        self.middle = tuple(part for part in rest[:-1] if part)
        self.last = rest[-1]
        # The longest literal part after the head must be in any path it matches.
        self.needle = max((*self.middle, self.last), key=len)

    def matches(self, path: str) -> bool:
        """Whether the rule matches ``path``, which already starts with its head."""
        pos = self.head_size
        for part in self.middle:
            pos = path.find(part, pos)
            if pos < 0:
                return False
            pos += len(part)
        if self.anchored:
            return len(path) - len(self.last) >= pos and path.endswith(self.last)
        return path.find(self.last, pos) >= 0


class _PrefixIndex(Generic[_V]):
    """Keys sorted, each linked to its longest proper prefix among the keys."""

    __slots__ = ("keys", "parents", "values")

    def __init__(self, items: dict[str, _V]) -> None:
        self.keys = sorted(items)
        self.values = [items[key] for key in self.keys]
        self.parents: list[int] = []
        chain: list[int] = []
        for index, key in enumerate(self.keys):
            while chain and not key.startswith(self.keys[chain[-1]]):
                chain.pop()
            self.parents.append(chain[-1] if chain else -1)
            chain.append(index)

    def longest(self, path: str) -> int:
        """Index of the longest key that starts ``path``, or -1."""
        keys, parents = self.keys, self.parents
        index = bisect_right(keys, path) - 1
        while index >= 0 and not path.startswith(keys[index]):
            index = parents[index]
        return index


class Matcher:
    """All Allow/Disallow rules of one agent, ready to find the deciding one."""

    __slots__ = ("_exact", "_prefixes", "_wildcards")

    def __init__(self, lines: Iterable[tuple[bool, str, int]]) -> None:
        """``lines`` are ``(allow, value, line number)`` with non-empty values."""
        prefixes: dict[str, Rule] = {}
        exact: dict[str, Rule] = {}
        heads: dict[str, list[_Wildcard]] = {}
        for allow, value, line in lines:
            pattern = normalize_pattern(value)
            rule = (len(pattern), allow, -line, value)
            anchored = pattern[-1] == "$"
            body = pattern[:-1] if anchored else pattern
            if "*" in body:
                heads.setdefault(body[: body.index("*")], []).append(
                    _Wildcard(rule, body, anchored)
                )
            else:
                table = exact if anchored else prefixes
                old = table.get(body)
                if old is None or rule > old:
                    table[body] = rule
        for group in heads.values():
            group.sort(key=lambda wildcard: wildcard.rule, reverse=True)
        self._prefixes = _PrefixIndex(prefixes) if prefixes else None
        self._exact = exact
        self._wildcards = _PrefixIndex(heads) if heads else None

    def best(self, path: str) -> Rule | None:
        """The deciding rule for a normalised ``path``, or ``None`` when none matches."""
        best: Rule | None = None
        prefixes = self._prefixes
        if prefixes is not None:
            keys, parents = prefixes.keys, prefixes.parents
            at = bisect_right(keys, path) - 1
            while at >= 0 and not path.startswith(keys[at]):
                at = parents[at]
            if at >= 0:
                best = prefixes.values[at]
        if self._exact:
            anchored = self._exact.get(path)
            if anchored is not None and (best is None or anchored > best):
                best = anchored
        wildcards = self._wildcards
        if wildcards is not None:
            at = wildcards.longest(path)
            while at >= 0:
                for wildcard in wildcards.values[at]:
                    if best is not None and wildcard.rule <= best:
                        break  # sorted: no later rule of this head can win
                    if wildcard.needle in path and wildcard.matches(path):
                        best = wildcard.rule
                        break
                at = wildcards.parents[at]
        return best
