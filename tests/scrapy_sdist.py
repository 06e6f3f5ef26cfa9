"""Scrapy's own tests, for the installed Scrapy (import as ``from scrapy_sdist import ...``).

Scrapy's wheel has no tests; its sdist does. ``scrapy_test_module(name)``
downloads the sdist of the installed version once per virtualenv, keeps its
``tests/`` under ``<venv>/scrapy-sdist/<version>/``, and imports one module from
it. Nothing of Scrapy's is copied into this repository.

The download is that one file, found through the index's JSON listing (PEP 691,
the listing pip reads) and checked against its sha256: nothing is built, so the
first run costs a second or two, not the minutes ``pip download --no-binary``
spent building the build tools from source. A failed or slow download skips the
module with its reason (fails it when CI=true).

Scrapy's test modules import helpers as ``tests.utils...``: the module is
imported with ``tests`` bound, for that import only, to a bare package over the
sdist's ``tests/`` (its ``__init__``, which edits proxy variables of the
environment, is not run), and the previous ``tests*`` modules are put back
afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import types
import urllib.parse
import urllib.request
from importlib import import_module
from pathlib import Path
from typing import NoReturn

import pytest
import scrapy

CACHE = Path(sys.prefix) / "scrapy-sdist"
"""In the virtualenv running the tests (``.venv/scrapy-sdist``): gitignored, per version."""


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> NoReturn:
    """Skip the calling module, or fail it when CI=true (CI reaches PyPI)."""
    message = f"Scrapy {scrapy.__version__}'s own tests unavailable: {reason}"
    if _in_ci():
        pytest.fail(message + " (CI=true: these tests must run)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


# PIP_INDEX_URL, when set, names the index pip uses here too (a mirror must answer PEP 691).
INDEX = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
TIMEOUT = 30.0
"""Seconds for each network step (connect, each read): a stalled index is a skip, not a hang."""


def _fetch(url: str, accept: str = "*/*") -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        body: bytes = response.read()
        return body


def _sdist_link(version: str) -> tuple[str, str]:
    """URL and sha256 of ``scrapy-<version>.tar.gz`` in the index's JSON listing."""
    listing = json.loads(_fetch(f"{INDEX}/scrapy/", "application/vnd.pypi.simple.v1+json"))
    wanted = f"scrapy-{version}.tar.gz"
    for entry in listing["files"]:
        if entry["filename"].lower() == wanted:
            return urllib.parse.urljoin(f"{INDEX}/scrapy/", entry["url"]), entry["hashes"]["sha256"]
    raise LookupError(f"{wanted} is not listed")


def _download(version: str, into: Path) -> Path:
    """The sdist of Scrapy ``version``, checked, in ``into`` (skips the module on failure)."""
    try:
        url, sha256 = _sdist_link(version)
        body = _fetch(url)
    except (OSError, ValueError, LookupError, TypeError) as error:
        # OSError: refused, unreachable, timed out, HTTP errors; ValueError: not JSON
        _unavailable(f"no sdist from {INDEX}/scrapy/: {type(error).__name__}: {error}")
    if hashlib.sha256(body).hexdigest() != sha256:
        _unavailable(f"{url} does not match the sha256 its index lists")
    into.mkdir(parents=True, exist_ok=True)
    archive = into / f"scrapy-{version}.tar.gz"
    archive.write_bytes(body)
    return archive


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
