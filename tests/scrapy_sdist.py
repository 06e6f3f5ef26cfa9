"""Scrapy's own tests, for the installed Scrapy (import as ``from scrapy_sdist import ...``).

Scrapy's wheel has no tests; its sdist does. ``scrapy_test_module(name)``
downloads the sdist of the installed version once per virtualenv (pip, from
PyPI), keeps its ``tests/`` under ``<venv>/scrapy-sdist/<version>/``, and
imports one module from it. Nothing of Scrapy's is copied into this repository.

Scrapy's test modules import helpers as ``tests.utils...``: the module is
imported with ``tests`` bound, for that import only, to a bare package over the
sdist's ``tests/`` (its ``__init__``, which edits proxy variables of the
environment, is not run), and the previous ``tests*`` modules are put back
afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
from importlib import import_module
from pathlib import Path

import pytest
import scrapy

CACHE = Path(sys.prefix) / "scrapy-sdist"
"""In the virtualenv running the tests (``.venv/scrapy-sdist``): gitignored, per version."""


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    """Skip the calling module, or fail it when CI=true (CI reaches PyPI)."""
    message = f"Scrapy {scrapy.__version__}'s own tests unavailable: {reason}"
    if _in_ci():
        pytest.fail(message + " (CI=true: these tests must run)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def _download(version: str, into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--no-binary", ":all:", "--dest", str(into), f"scrapy=={version}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    archives = sorted(into.glob("*.tar.gz"))
    if done.returncode != 0 or not archives:
        _unavailable(f"pip download failed: {done.stderr.strip()[-500:]}")
    return archives[0]


def _extract_tests(archive: Path, into: Path) -> None:
    """Only ``<top>/tests/``, as plain files (no links, nothing outside ``into``)."""
    with tarfile.open(archive) as tar:
        members = [
            m
            for m in tar.getmembers()
            if (m.isfile() or m.isdir()) and m.name.split("/")[1:2] == ["tests"]
        ]
        for member in members:
            target = (into / member.name).resolve()
            if not target.is_relative_to(into.resolve()):
                raise ValueError(f"unsafe path in {archive.name}: {member.name}")
        if hasattr(tarfile, "data_filter"):  # Python 3.12, and 3.10.12 / 3.11.4
            tar.extractall(into, members=members, filter="data")
        else:
            tar.extractall(into, members=members)


def scrapy_tests_dir() -> Path:
    """The ``tests/`` directory of the installed Scrapy's sdist, fetched if needed."""
    version = scrapy.__version__
    home = CACHE / version
    if not (home / "tests").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as work:
            archive = _download(version, Path(work) / "dist")
            unpacked = Path(work) / "unpacked"
            _extract_tests(archive, unpacked)
            top = next(unpacked.iterdir())
            staged = Path(work) / "home"
            staged.mkdir()
            shutil.move(str(top / "tests"), staged / "tests")
            try:  # another test run may have won the race: keep its copy
                staged.rename(home)
            except OSError:
                if not (home / "tests").is_dir():
                    raise
    return home / "tests"


def scrapy_test_module(name: str) -> types.ModuleType:
    """Import ``tests.<name>`` of the installed Scrapy's sdist (skip if unavailable)."""
    tests_dir = scrapy_tests_dir()
    if not (tests_dir / f"{name.replace('.', '/')}.py").is_file():
        _unavailable(f"tests/{name}.py is not in its sdist")
    ours = {key: sys.modules.pop(key) for key in list(sys.modules) if _in_tests(key)}
    package = types.ModuleType("tests")
    package.__path__ = [str(tests_dir)]
    sys.modules["tests"] = package
    try:
        return import_module(f"tests.{name}")
    finally:
        for key in [key for key in sys.modules if _in_tests(key)]:
            del sys.modules[key]
        sys.modules.update(ours)


def _in_tests(module: str) -> bool:
    return module == "tests" or module.startswith("tests.")
