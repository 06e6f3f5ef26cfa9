"""One logging rule for scrapy_rep/, checked on the source (``ast``).

- **Loggers**: ``logging.getLogger(__name__)``, or an explicit ``"scrapy_rep..."``
  name that docs/reference.md's "Log messages" table lists (a module writing
  another module's lines keeps their documented logger); nothing logs to the
  root logger or to a logger made elsewhere.
- **Messages**: a string literal with %-style placeholders, its arguments
  apart: no f-string, no ``+``, no ``.format()``, no variable, so the text a
  user searches the code for is there as it is logged.
- **Wording**: no message starts with "scrapy-rep" (the logger's name,
  ``[scrapy_rep.fetcher]``, says whose a line is); a message starts with a
  capital, a placeholder or a name (``robots.txt``, ``sitemap_sites``,
  ``scrapy_rep.RobotsTxtMiddleware``), as a sentence in a log does.

Each violation is named by file and line.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

# no Scrapy code runs: neither the reactor nor Scrapy's version changes anything
pytestmark = [pytest.mark.reactor_free, pytest.mark.scrapy_free]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "scrapy_rep"
REFERENCE = ROOT / "docs" / "reference.md"
LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"}
)


def documented_loggers() -> frozenset[str]:
    """The logger names of the reference's "Log messages" table."""
    text = REFERENCE.read_text(encoding="utf-8")
    section = text[text.index("\n## Log messages\n") :]
    return frozenset(re.findall(r"^\| [A-Z]+ `(scrapy_rep[a-z_.]*)`", section, re.M))


def violations(source: str, where: str, documented: frozenset[str]) -> tuple[list[str], int]:
    """The rule's violations in one module's ``source`` (each ``where:line: why``),
    and the number of log calls found."""
    tree = ast.parse(source)
    loggers: set[str] = set()
    found: list[str] = []
    calls = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_get_logger(node.value):
            loggers.update(t.id for t in node.targets if isinstance(t, ast.Name))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        at = f"{where}:{node.lineno}"
        if _is_get_logger(node):
            found += _logger_name_problems(node, at, documented)
            continue
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr not in LOG_METHODS:
            continue
        receiver = ast.unparse(func.value)
        if receiver == "logging":
            found.append(f"{at}: logs to the root logger (logging.{func.attr})")
            continue
        if receiver not in loggers:
            if "log" in receiver.lower():
                found.append(f"{at}: logs through {receiver}, not a getLogger() of this module")
            continue
        calls += 1
        args = node.args[1:] if func.attr == "log" else node.args
        message = args[0] if args else None
        if not (isinstance(message, ast.Constant) and isinstance(message.value, str)):
            shown = ast.unparse(message)[:60] if message is not None else "nothing"
            found.append(f"{at}: the message is not a %-format string literal: {shown}")
            continue
        text = message.value
        if text.lower().startswith("scrapy-rep"):
            found.append(f"{at}: the message starts with 'scrapy-rep': {text[:60]!r}")
            continue
        first = text.split(maxsplit=1)[0] if text.strip() else ""
        if first[:1].islower() and not any(mark in first for mark in "._"):
            found.append(f"{at}: the message starts with a small letter: {text[:60]!r}")
    return found, calls


def _is_get_logger(node: ast.expr) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name == "getLogger"


def _logger_name_problems(node: ast.Call, at: str, documented: frozenset[str]) -> list[str]:
    (arg,) = node.args or [None]
    if isinstance(arg, ast.Name) and arg.id == "__name__":
        return []
    if isinstance(arg, ast.Constant) and arg.value in documented:
        return []
    shown = ast.unparse(arg) if arg is not None else "(the root logger)"
    return [f"{at}: getLogger({shown}): neither __name__ nor a documented logger name"]


@cache
def scanned() -> tuple[tuple[str, ...], int]:
    documented = documented_loggers()
    found: list[str] = []
    calls = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(ROOT))
        problems, count = violations(path.read_text(encoding="utf-8"), where, documented)
        found += problems
        calls += count
    return tuple(found), calls


def test_scrapy_rep_follows_the_logging_rule() -> None:
    """Every logger and log call of scrapy_rep/ (60 and more calls) keeps the rule."""
    found, calls = scanned()
    assert calls >= 60, f"only {calls} log calls found: is the scan still finding them?"
    assert not found, "the logging rule (tests/test_logging_rule.py):\n" + "\n".join(found)


def test_the_checker_names_each_kind_of_violation() -> None:
    """The check itself: each way of breaking the rule is found, at its line."""
    source = (
        "import logging\n"
        "logger = logging.getLogger(__name__)\n"
        "other = logging.getLogger('scrapy_rep.elsewhere')\n"  # 3: undocumented
        "logger.info(f'robots.txt of {x}')\n"  # 4: f-string
        "logger.warning('a' + b)\n"  # 5: +
        "logger.log(10, text)\n"  # 6: a variable
        "logger.error('scrapy-rep: cannot start: %s', x)\n"  # 7: the prefix
        "logger.info('sharing %s', x)\n"  # 8: a small letter
        "logging.info('Hello')\n"  # 9: the root logger
        "self.logger.debug('Hi')\n"  # 10: a logger made elsewhere
        "logger.info('robots.txt of %s unavailable (%s): all allowed', a, b)\n"
        "logger.debug('%s by robots.txt%s: %s', a, b, c)\n"
        "logger.info('Obeying robots.txt as %r', agent)\n"
    )
    found, calls = violations(source, "m.py", frozenset({"scrapy_rep.middleware"}))
    assert sorted(int(line.split(":")[1]) for line in found) == list(range(3, 11)), found
    assert calls == 8
