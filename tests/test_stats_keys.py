"""Stats keys are written whole where they are counted (docs/development.md).

The key of every ``stats.inc_value`` / ``set_value`` / ``get_value`` /
``max_value`` / ``min_value`` of scrapy_rep/ is, in the call itself, a string
literal starting ``rep/``, or an f-string whose fixed start is ``rep/...`` and
whose braces fill the parts the docs write ``<outcome>``, ``<status>``...; a
dry run's key is written out beside the other (``"rep/dry_run/forbidden" if
dry_run else "rep/forbidden"``). No prefix constant, no helper that builds
keys: searching the code for a key's text finds where it is counted. Checked
on the source (``ast``), each violation named by file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

# no Scrapy code runs: neither the reactor nor Scrapy's version changes anything
pytestmark = [pytest.mark.reactor_free, pytest.mark.scrapy_free]

ROOT = Path(__file__).resolve().parents[1]
STATS_METHODS = frozenset({"inc_value", "set_value", "get_value", "max_value", "min_value"})


def written_whole(key: ast.expr | None) -> bool:
    if isinstance(key, ast.IfExp):
        return written_whole(key.body) and written_whole(key.orelse)
    if isinstance(key, ast.JoinedStr) and key.values:
        key = key.values[0]
    return isinstance(key, ast.Constant) and str(key.value).startswith("rep/")


def violations(source: str, where: str) -> tuple[list[str], int]:
    """``where:line: key`` for each key not written whole, and the calls found."""
    found: list[str] = []
    calls = 0
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in STATS_METHODS
            and "stats" in ast.unparse(node.func.value)
        ):
            continue
        calls += 1
        key = node.args[0] if node.args else None
        if not written_whole(key):
            shown = ast.unparse(key) if key is not None else "(no key)"
            found.append(f"{where}:{node.lineno}: {shown}")
    return found, calls


def test_every_stats_key_is_written_whole() -> None:
    found: list[str] = []
    calls = 0
    for path in sorted((ROOT / "scrapy_rep").rglob("*.py")):
        problems, count = violations(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
        found += problems
        calls += count
    assert calls >= 100, f"only {calls} stats calls found: is the scan still finding them?"
    assert not found, "stats keys not written whole (rep/...):\n" + "\n".join(found)


def test_the_check_finds_keys_built_elsewhere() -> None:
    source = (
        "stats.inc_value('rep/forbidden')\n"
        "self._stats.inc_value(f'rep/robotstxt/outcome/{outcome}')\n"
        "stats.inc_value('rep/dry_run/forbidden' if dry else 'rep/forbidden')\n"
        "stats.inc_value(_STAT + 'found')\n"  # 4: a prefix constant
        "stats.inc_value(f'{prefix}/dropped/{stage}')\n"  # 5: a variable prefix
        "self._stats.inc_value(stat)\n"  # 6: a key from elsewhere
        "stats.set_value('x/seconds', 1)\n"  # 7: not ours
        "stats.inc_value(f'rep/x' if dry else key)\n"  # 8: half of it
    )
    found, calls = violations(source, "m.py")
    assert [int(line.split(":")[1]) for line in found] == [4, 5, 6, 7, 8], found
    assert calls == 8
