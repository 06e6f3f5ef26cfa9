"""The Python snippets of README.md and docs/*.md run as written.

Every ```python block is taken as a reader would copy it, alone (a snippet may not lean
on an import made in an earlier one), and:

- ruff finds no syntax error and no undefined name in it (a missing import in a method
  body, which running the block would not reach);
- it runs, statement by statement, in a fresh namespace; where an expression statement
  ends with a comment that is a Python literal (``robots.allowed(...)   # False``), the
  expression must equal it, so the results the docs show are the results users get;
- a block that assigns settings (upper-case names, a ``settings.py`` excerpt) is read by
  scrapy-rep's ``Config``: no error, and none of the start-up WARNINGs (a misspelt
  ``REP_`` name, a ``USER_AGENT`` naming another crawler) a user would then see.

A block that cannot run on its own (it needs a running crawl) is marked on the line
before its fence, visibly in the Markdown source only, with the reason:
``<!-- snippet: not run: REASON -->``. It is still compiled, and reported as skipped
with its reason, so every block left out is a deliberate choice.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scrapy_rep.config import Config

pytestmark = pytest.mark.reactor_free  # no crawl in pytest's process: its reactor changes nothing

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"<!--\s*snippet:\s*not run:\s*(?P<reason>\S.*?)\s*-->")
ANY_MARK = re.compile(r"<!--\s*snippet:")
RUFF = [sys.executable, "-m", "ruff", "check", "--isolated", "--output-format=concise"]


@dataclass(frozen=True)
class Snippet:
    page: str  # relative to the repository
    line: int  # of the opening fence
    code: str
    not_run: str | None  # the reason given, for a block marked not run

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def read_snippets(path: Path, root: Path = REPO) -> list[Snippet]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    index = 0
    while index < len(lines):
        if lines[index].strip() != "```python":
            index += 1
            continue
        start = index
        # a fence may be indented (a block inside a list item): so is its code
        end = next(i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("```"))
        before = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
        if ANY_MARK.search(before) and not NOT_RUN.search(before):
            raise ValueError(f"{path.name}:{start}: a snippet mark reads {before!r}")
        reason = match["reason"] if (match := NOT_RUN.search(before)) else None
        code = textwrap.dedent("\n".join(lines[start + 1 : end]) + "\n")
        found.append(Snippet(path.relative_to(root).as_posix(), start + 1, code, reason))
        index = end + 1
    return found


SNIPPETS = [snippet for page in PAGES for snippet in read_snippets(page)]


def test_the_docs_have_snippets_to_test() -> None:
    """The extraction finds the blocks (a changed fence style would silently test none)."""
    assert len(SNIPPETS) >= 20
    assert {s.page for s in SNIPPETS} >= {"README.md", "docs/parser.md", "docs/sitemaps.md"}


@pytest.mark.parametrize("snippet", SNIPPETS, ids=str)
def test_snippet_has_no_undefined_name(snippet: Snippet) -> None:
    if snippet.not_run:
        compile(snippet.code, str(snippet), "exec")
        return
    # E9: syntax errors; F63, F7: misused comparisons and statements (`yield` outside a
    # function); F82: undefined names, also in function bodies that running never reaches.
    checked = subprocess.run(
        [*RUFF, "--select", "E9,F63,F7,F82", "--stdin-filename", "snippet.py", "-"],
        input=snippet.code,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, f"{snippet}:\n{checked.stdout}{checked.stderr}"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=str)
def test_snippet_runs_and_shows_true_results(snippet: Snippet) -> None:
    if snippet.not_run:
        pytest.skip(f"{snippet} not run: {snippet.not_run}")
    namespace = run(snippet)
    settings = {name: value for name, value in namespace.items() if name.isupper()}
    if settings:
        config = Config.from_settings(settings)
        assert config.warnings == (), f"{snippet}: the settings draw WARNINGs"


def run(snippet: Snippet) -> dict[str, Any]:
    """Executes the snippet's statements in order; checks each literal result comment."""
    tree = ast.parse(snippet.code, str(snippet))
    results = result_comments(snippet.code)
    namespace: dict[str, Any] = {"__name__": "snippet"}
    for statement in tree.body:
        where = f"{snippet.page}:{snippet.line + statement.lineno}"
        shown = results.get(statement.end_lineno or statement.lineno, _NOTHING)
        if isinstance(statement, ast.Expr) and shown is not _NOTHING:
            expression = ast.Expression(statement.value)
            value = eval(compile(expression, where, "eval"), namespace)
            assert value == shown, f"{where}: the docs show {shown!r}, it is {value!r}"
            continue
        module = ast.Module([statement], type_ignores=[])
        exec(compile(module, where, "exec"), namespace)
    return namespace


_NOTHING = object()


def result_comments(code: str) -> dict[int, Any]:
    """Line -> the Python literal its trailing comment shows (``# False``, ``# (2, 'x')``)."""
    shown = {}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type != tokenize.COMMENT:
            continue
        try:
            shown[token.start[0]] = ast.literal_eval(token.string.lstrip("#").strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue  # words, not a value: `# -> bool`, `# settings.py`
    return shown


def test_a_block_is_left_out_only_with_a_reason(tmp_path: Path) -> None:
    """The mark names its reason; a mark without one, or misspelt, is an error, not a skip."""
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- snippet: not run: needs a running crawl -->\n```python\ncrawler.stop()\n```\n\n"
        "```python\nx = 1\n```\n"
    )
    marked, plain = read_snippets(page, tmp_path)
    assert marked.not_run == "needs a running crawl"
    assert plain.not_run is None
    page.write_text("<!-- snippet: skip -->\n```python\ncrawler.stop()\n```\n")
    with pytest.raises(ValueError, match="a snippet mark reads"):
        read_snippets(page, tmp_path)
