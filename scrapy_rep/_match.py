"""Longest-match rule lookup for one user agent (RFC 9309 §2.2.2).

A rule is ranked by one integer, so that the larger rank wins: the pattern's
length first, then Allow over Disallow (a tie goes to Allow), then the
earlier line. The rank also carries where the rule's line starts in the text
(an offset, which orders like the line number and finds the line again), so a
rule costs one 64-bit slot and the pattern string, even in files with
thousands of rules.

Rules are sorted into three kinds, each found without trying every rule:

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

from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

from scrapy_rep._url import PLAIN_IN_PATH, normalize_pattern

__all__ = ["Matcher", "allows", "offset_of", "rank"]

_OFFSET_MASK = (1 << 31) - 1
_ALLOW_BIT = 1 << 31

_V = TypeVar("_V")


def rank(length: int, allow: bool, offset: int) -> int:
    """The rank of a rule: longer pattern, then Allow, then earlier line wins."""
    return (length << 32) | (_ALLOW_BIT if allow else 0) | (_OFFSET_MASK - offset)


def allows(rule_rank: int) -> bool:
    """Whether the rule of this rank is an Allow rule."""
    return bool(rule_rank & _ALLOW_BIT)


def offset_of(rule_rank: int) -> int:
    """Where the line of the rule of this rank starts in the text."""
    return _OFFSET_MASK - (rule_rank & _OFFSET_MASK)


# A rule with '*' in it, split at its wildcards: (rank, needle, head size,
# middle parts, last part, anchored). The needle is a literal part that any
# matching path holds: the longest, the last on a tie (the end of a pattern,
# such as ".pdf", tells paths apart best). Tuples sort by rank.
_Wildcard = tuple[int, str, int, tuple[str, ...], str, bool]


def _wildcard(rule_rank: int, body: str, anchored: bool) -> _Wildcard:
    parts = body.split("*")
    return (
        rule_rank,
        max(reversed(parts[1:]), key=len),
        len(parts[0]),
        tuple(filter(None, parts[1:-1])),
        parts[-1],
        anchored,
    )


def _glob_matches(path: str, pos: int, middle: tuple[str, ...], last: str, anchored: bool) -> bool:
    """Whether the parts after a wildcard rule's head match ``path`` from ``pos``."""
    for part in middle:
        pos = path.find(part, pos)
        if pos < 0:
            return False
        pos += len(part)
    if anchored:
        return len(path) - len(last) >= pos and path.endswith(last)
    return path.find(last, pos) >= 0


class _PrefixIndex(Generic[_V]):
    """Keys sorted, each linked to its longest proper prefix among the keys."""

    __slots__ = ("keys", "parents", "values")

    def __init__(self, keys: list[str], values: Sequence[_V]) -> None:
        """``keys`` sorted and distinct; ``values[i]`` belongs to ``keys[i]``."""
        self.keys = keys
        self.values = values
        parents = self.parents = array("i", bytes(4 * len(keys)))
        chain: list[int] = []
        for index, key in enumerate(keys):
            while chain and not key.startswith(keys[chain[-1]]):
                chain.pop()
            parents[index] = chain[-1] if chain else -1
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

    __slots__ = ("_exact", "_parents", "_prefixes", "_ranks", "_wildcards")

    def __init__(self, lines: Iterable[tuple[bool, str, int]]) -> None:
        """``lines`` are ``(allow, value, offset of the line)`` with non-empty values."""
        prefixes: dict[str, int] = {}
        exact: dict[str, int] = {}
        heads: dict[str, list[_Wildcard]] = {}
        plain = PLAIN_IN_PATH
        for allow, value, offset in lines:
            rule_rank = (_ALLOW_BIT if allow else 0) | (_OFFSET_MASK - offset)
            if value.isascii() and not value.encode().translate(None, plain):
                # Most rules: a plain prefix that normalising leaves as it is.
                rule_rank |= len(value) << 32
                if prefixes.get(value, 0) < rule_rank:
                    prefixes[value] = rule_rank
                continue
            pattern = normalize_pattern(value)
            rule_rank |= len(pattern) << 32
            anchored = pattern[-1] == "$"
            body = pattern[:-1] if anchored else pattern
            if "*" in body:
                if "**" in body:  # runs of '*' match like one
                    while "**" in body:
                        body = body.replace("**", "*")
                heads.setdefault(body[: body.index("*")], []).append(
                    _wildcard(rule_rank, body, anchored)
                )
            else:
                table = exact if anchored else prefixes
                if table.get(body, 0) < rule_rank:
                    table[body] = rule_rank
        # Plain prefixes, flattened here: they decide most paths.
        index: _PrefixIndex[int] = _PrefixIndex(sorted(prefixes), ())
        self._prefixes, self._parents = index.keys, index.parents
        self._ranks = array("q", [prefixes[key] for key in index.keys])
        self._exact = exact or None
        self._wildcards: _PrefixIndex[list[_Wildcard]] | None = None
        if heads:
            for group in heads.values():
                group.sort(reverse=True)
            heads_sorted = sorted(heads)
            self._wildcards = _PrefixIndex(heads_sorted, [heads[head] for head in heads_sorted])

    def best(self, path: str) -> int:
        """The rank of the deciding rule for a normalised ``path``; 0 when none matches."""
        keys, parents = self._prefixes, self._parents
        at = bisect_right(keys, path) - 1
        while at >= 0 and not path.startswith(keys[at]):
            at = parents[at]
        best = self._ranks[at] if at >= 0 else 0
        exact = self._exact
        if exact is not None:
            best = max(best, exact.get(path, 0))
        wildcards = self._wildcards
        if wildcards is not None:
            at = wildcards.longest(path)
            while at >= 0:
                for rule_rank, needle, head_size, middle, last, anchored in wildcards.values[at]:
                    if rule_rank <= best:
                        break  # sorted: no later rule of this head can win
                    if needle in path and _glob_matches(path, head_size, middle, last, anchored):
                        best = rule_rank
                        break
                at = wildcards.parents[at]
        return best
