"""The public surface: what docs/reference.md promises is what the package exports.

``scrapy_rep.__all__`` is the contract (as in httpx): the names the reference's
"Public names" table lists, no more and no fewer, each importable from
``scrapy_rep``; the signals and exceptions tables are ``__all__`` of their
modules; every logger the "Log messages" table names is one scrapy-rep logs to,
so moving a module never silently renames a logger users filter on.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import scrapy_rep

pytestmark = pytest.mark.reactor_free  # no crawl in pytest's process: its reactor changes nothing

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference.md"


def _section(title: str) -> str:
    """The text of the reference's ``## title`` section."""
    text = REFERENCE.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _first_column(title: str) -> list[str]:
    """The backquoted names in the first column of the section's table, in order."""
    names: list[str] = []
    for line in _section(title).splitlines():
        cells = line.split("|")
        if len(cells) < 3 or set(cells[1].strip()) <= {"-", " "}:
            continue
        names += re.findall(r"`([A-Za-z_][A-Za-z_0-9]*)`", cells[1])
    return names


def _public_modules() -> list[ModuleType]:
    """Every module of scrapy_rep whose dotted name has no private part."""
    found = [scrapy_rep]
    for info in pkgutil.walk_packages(scrapy_rep.__path__, "scrapy_rep."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(importlib.import_module(info.name))
    return found


def test_documented_public_names_are_exactly_all() -> None:
    """The "Public names" table and scrapy_rep.__all__ list the same names, once each."""
    documented = _first_column("Public names")
    assert len(documented) == len(set(documented)), "a name is listed twice"
    assert sorted(documented) == sorted(scrapy_rep.__all__)


@pytest.mark.parametrize("name", scrapy_rep.__all__)
def test_each_public_name_imports(name: str) -> None:
    """``from scrapy_rep import <name>`` works for every name of __all__, and
    gives an object that says it is that name."""
    namespace: dict[str, object] = {}
    exec(f"from scrapy_rep import {name}", namespace)
    assert getattr(namespace[name], "__name__", name) == name


def test_star_import_binds_all() -> None:
    """``import *`` binds the public names, and ``dir()`` (a shell's completion)
    shows them, the ones loaded on first use included."""
    namespace: dict[str, object] = {}
    exec("from scrapy_rep import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(scrapy_rep.__all__)
    assert set(scrapy_rep.__all__) <= set(dir(scrapy_rep))


def test_parser_import_loads_no_scrapy() -> None:
    """The reference promises that importing scrapy_rep for the parser does not
    import Scrapy (nor Twisted), and parsing and deciding stay Scrapy-free."""
    code = (
        "import sys\n"
        "from scrapy_rep import Decision, DelayLine, Delays, RobotsTxt\n"
        "robots = RobotsTxt.parse(b'User-agent: *\\nContent-Usage: train-ai=n\\nDisallow: /x')\n"
        "assert not robots.allowed('https://a.example/x', user_agent='Bot')\n"
        "assert robots.usage('https://a.example/', user_agent='Bot') == {'train-ai': False}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scrapy', 'twisted')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("module", "title"), [("signals", "Signals"), ("exceptions", "Exceptions")]
)
def test_documented_tables_are_module_all(module: str, title: str) -> None:
    """The reference's signals and exceptions tables are __all__ of their modules."""
    documented = _first_column(title)
    assert sorted(documented) == sorted(importlib.import_module(f"scrapy_rep.{module}").__all__)


def test_every_public_modules_all_is_defined() -> None:
    """A name in a module's __all__ exists there (a stale entry breaks ``import *``)."""
    for module in _public_modules():
        for name in getattr(module, "__all__", ()):
            assert hasattr(module, name), f"{module.__name__}.__all__ names missing {name!r}"


def test_documented_loggers_exist() -> None:
    """Every logger named in the reference's "Log messages" table is created by a
    scrapy-rep module (all of them imported), so a user's logging configuration for
    it keeps working whichever module now writes its messages."""
    documented = set(
        re.findall(r"^\| [A-Z]+ `(scrapy_rep[a-z_.]*)`", _section("Log messages"), re.M)
    )
    assert "scrapy_rep.report" in documented
    for info in pkgutil.walk_packages(scrapy_rep.__path__, "scrapy_rep."):
        importlib.import_module(info.name)
    made = {
        name
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    assert documented <= made, f"documented, but no module logs to: {sorted(documented - made)}"
