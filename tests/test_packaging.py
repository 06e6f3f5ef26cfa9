"""The package as users and contributors receive it.

``python -m build`` makes the sdist and the wheel without a single warning, ``twine check``
passes both, both carry the LICENSE, the sdist carries every file of the repository (so its
suite imports: helpers, data, example project), and that suite runs from the unpacked sdist
against the sdist's own ``scrapy_rep``.

The build runs without isolation (``--no-isolation``): an isolated build would download
setuptools from an index on every run, so the test extra installs the backend instead, and
``build`` checks that it satisfies ``[build-system] requires``. About 15 s on an idle
machine: deselect with ``-m "not slow"``.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free, pytest.mark.scrapy_free]

REPO = Path(__file__).resolve().parents[1]
# Files the repository tracks but the sdist leaves out on purpose: CI wiring.
NOT_SHIPPED = {".ci/run"}
# How many missing names a failure prints: enough to see the pattern, never a flood.
SHOWN = 20
# The sdist's fast subset: the RFC 9309 parser tests, one real crawl against a local
# server, and the corpus check (the data unpacks byte for byte from the sdist).
SDIST_SUBSET = [
    "tests/test_rfc9309.py",
    "tests/test_middleware_access.py::test_2xx_rules_drop_disallowed_requests_with_line_and_rule",
    "tests/test_corpus.py::test_manifest_lists_every_corpus_file",
]
# setuptools lists the files it handles on lines starting with these words; a file name
# that contains "warn" must not count as a warning.
FILE_LINES = ("copying ", "adding ", "creating ", "hard linking ", "writing ", "reading ")


@dataclass
class Dist:
    sdist: Path
    wheel: Path
    output: str  # what `python -m build` printed, stdout and stderr
    source_files: set[str]  # what the build was made from, relative to the repository
    tmp: Path


def source_files(root: Path = REPO) -> set[str]:
    """The repository's files: what git tracks or would track (untracked but not ignored).
    Without git (an unpacked sdist), every file that the shipped .gitignore does not
    ignore: so the venvs, docs build and coverage data of `make test` do not count."""
    if (root / ".git").exists() and shutil.which("git"):
        listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
        listed = subprocess.run(listing, cwd=root, check=True, capture_output=True, text=True)
        return {name for name in listed.stdout.split("\0") if name and (root / name).is_file()}
    ignored = Ignored((root / ".gitignore").read_text())
    found = set()
    for directory, dirs, files in os.walk(root):
        base = Path(directory).relative_to(root)
        dirs[:] = [name for name in dirs if not ignored(base / name, is_dir=True)]
        found |= {(base / name).as_posix() for name in files if not ignored(base / name)}
    return found


class Ignored:
    """What a .gitignore ignores, for the patterns this repository's uses: ``name`` or
    ``*.glob`` at any depth, ``dir/`` for folders only, ``a/b`` anchored at the top.
    Negation (``!``) is refused rather than misread."""

    def __init__(self, text: str) -> None:
        self.patterns: list[tuple[str, bool, bool]] = [(".git", True, False)]
        for line in text.splitlines():
            pattern = line.strip()
            if not pattern or pattern.startswith("#"):
                continue
            if pattern.startswith("!"):
                raise ValueError(f".gitignore: negation is not understood here: {pattern}")
            dir_only = pattern.endswith("/")
            pattern = pattern.rstrip("/")
            anchored = "/" in pattern
            self.patterns.append((pattern.lstrip("/"), dir_only, anchored))

    def __call__(self, path: Path, is_dir: bool = False) -> bool:
        for pattern, dir_only, anchored in self.patterns:
            if dir_only and not is_dir:
                continue
            if fnmatch.fnmatchcase(path.as_posix() if anchored else path.name, pattern):
                return True
        return False


def clean_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    # Set in some shells and containers; makes setuptools warn "byte-compiling is disabled",
    # a remark on the environment, not on the package.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # The sdist's suite must read the sdist's own data.
    env.pop("REP_CORPUS_DIR", None)
    return env


def run(args: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=clean_env(**extra), capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """sdist and wheel, built by `python -m build` from a copy of the repository's files
    (the developer's tree stays untouched; leftovers there cannot sneak in)."""
    tmp = tmp_path_factory.mktemp("packaging")
    files = source_files()
    source = tmp / "source"
    for name in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    out = tmp / "dist"
    built = run([sys.executable, "-m", "build", "--no-isolation", "-o", str(out), "."], source)
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dist(sdist, wheel, output, files, tmp)


@pytest.fixture(scope="module")
def unpacked_sdist(dist: Dist) -> Path:
    with tarfile.open(dist.sdist) as archive:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12: refuses links and escapes
            archive.extractall(dist.tmp / "sdist", filter="data")
        else:
            archive.extractall(dist.tmp / "sdist")  # the sdist was just built here
    (root,) = (dist.tmp / "sdist").iterdir()
    return root


def sdist_names(dist: Dist) -> set[str]:
    with tarfile.open(dist.sdist) as archive:
        return {m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile()}


def test_build_prints_no_warning(dist: Dist) -> None:
    """`python -m build` (sdist, then the wheel from the sdist) says nothing to worry about:
    no deprecated licence table, no MANIFEST.in pattern that matches nothing."""
    warnings = [
        line
        for line in dist.output.splitlines()
        if "warn" in line.lower() and not line.lstrip().lower().startswith(FILE_LINES)
    ]
    assert not warnings, "\n".join(warnings)
    assert f"Successfully built {dist.sdist.name} and {dist.wheel.name}" in dist.output


def test_twine_check_passes_both(dist: Dist) -> None:
    """`twine check --strict`: PyPI would accept the metadata and render the README."""
    checked = run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dist.sdist), str(dist.wheel)],
        dist.tmp,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2, checked.stdout


def test_long_description_links_work_on_pypi(dist: Dist) -> None:
    """PyPI shows the README with no repository around it: every link is absolute, the
    project's own point where the metadata's Project-URLs say the project lives."""
    with zipfile.ZipFile(dist.wheel) as wheel:
        info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(info).decode()
    headers, _, description = metadata.partition("\n\n")
    urls = dict(
        line.removeprefix("Project-URL: ").split(", ", 1)
        for line in headers.splitlines()
        if line.startswith("Project-URL: ")
    )
    assert {"Homepage", "Documentation", "Source", "Changelog", "Issues"} <= set(urls)
    home = urls["Homepage"]
    assert all(url.startswith(home) for url in urls.values()), urls
    targets = re.findall(r"\]\(([^)\s]+)\)", description)
    assert len(targets) >= 20, targets  # the README's page table and its links
    relative = [t for t in targets if not t.startswith(("https://", "http://", "#"))]
    assert not relative, f"links that break on PyPI: {relative}"
    ours = [t for t in targets if "scrapy-rep" in t]
    assert ours, targets
    assert all(t.startswith(home) for t in ours), [t for t in ours if not t.startswith(home)]
    assert "pip install scrapy-rep " not in description.split("Once it is published")[0]


def test_license_is_in_the_sdist_and_the_wheel(dist: Dist) -> None:
    """The BSD-3-Clause text ships in both, declared as an SPDX expression."""
    text = (REPO / "LICENSE").read_bytes()
    assert text.startswith(b"BSD 3-Clause License")
    with tarfile.open(dist.sdist) as archive:
        (top,) = {m.name.split("/", 1)[0] for m in archive.getmembers()}
        sdist_license = archive.extractfile(f"{top}/LICENSE")
        assert sdist_license is not None
        assert sdist_license.read() == text
        pkg_info = archive.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        sdist_metadata = pkg_info.read().decode()
    with zipfile.ZipFile(dist.wheel) as wheel:
        info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        dist_info = info.removesuffix("METADATA")
        assert wheel.read(f"{dist_info}licenses/LICENSE") == text
        wheel_metadata = wheel.read(info).decode()
    for metadata in (sdist_metadata, wheel_metadata):
        assert "License-Expression: BSD-3-Clause" in metadata
        assert "License-File: LICENSE" in metadata


def test_wheel_holds_the_typed_package_and_the_command_only(dist: Dist) -> None:
    """The wheel installs scrapy_rep (typed) and the `scrapy robots` command, no tests."""
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = wheel.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "robots = scrapy_rep.commands.robots:Command" in wheel.read(entry_points).decode()
    assert "scrapy_rep/py.typed" in names
    assert {name.split("/", 1)[0] for name in names} == {
        "scrapy_rep",
        Path(entry_points).parent.name,
    }


def test_sdist_carries_every_file_of_the_repository(dist: Dist) -> None:
    """Tests, their helpers and data, example project, benchmarks, Makefile, changelog:
    everything but CI wiring, so `make test` runs from the unpacked sdist."""
    missing = sorted(dist.source_files - NOT_SHIPPED - sdist_names(dist))
    shown = ", ".join(missing[:SHOWN]) + (
        f" and {len(missing) - SHOWN} more" * (len(missing) > SHOWN)
    )
    assert not missing, f"{len(missing)} files not in the sdist (MANIFEST.in?): {shown}"


def test_without_git_the_sources_are_the_sdists_files_not_make_tests_output(
    dist: Dist, unpacked_sdist: Path
) -> None:
    """In an unpacked sdist where `make test` ran (venvs, docs build, coverage data, caches),
    the packaging test counts as sources exactly what the sdist shipped."""
    tree = dist.tmp / "after-make-test"
    shutil.copytree(unpacked_sdist, tree)
    for leftover in [
        ".venv/bin/python",
        ".venv-floor/lib/site-packages/scrapy/__init__.py",
        "docs/_build/html/reference.html",
        ".coverage",
        ".coverage.host.1234.XyZ",
        ".mypy_cache/3.11/cache.db",
        ".ruff_cache/0.6/entry",
        ".pytest_cache/README.md",
        ".hypothesis/examples/x",
        "tests/__pycache__/test_rfc9309.cpython-311.pyc",
        "scrapy_rep.egg-info/SOURCES.txt",
        "example_project/.scrapy/httpcache/x",
        "redis.log",
    ]:
        (tree / leftover).parent.mkdir(parents=True, exist_ok=True)
        (tree / leftover).write_text("made by make test\n")
    shipped = {name for name in sdist_names(dist) if ".egg-info/" not in name}
    assert source_files(tree) == shipped


def test_sdist_suite_collects_against_the_sdists_own_package(unpacked_sdist: Path) -> None:
    """From the unpacked sdist, `import scrapy_rep` finds the sdist's copy, and every test
    module imports (each one yields tests, none errors)."""
    env = {"PYTHONPATH": str(unpacked_sdist)}
    where = "import scrapy_rep; print(scrapy_rep.__file__)"
    imported = run([sys.executable, "-c", where], unpacked_sdist, **env)
    assert imported.returncode == 0, imported.stderr
    assert Path(imported.stdout.strip()).is_relative_to(unpacked_sdist)

    collected = run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        unpacked_sdist,
        **env,
    )
    output = collected.stdout + collected.stderr
    assert collected.returncode == 0, output
    modules = {line.split("::", 1)[0] for line in collected.stdout.splitlines() if "::" in line}
    expected = {f"tests/{path.name}" for path in (unpacked_sdist / "tests").glob("test_*.py")}
    assert modules == expected, output


def test_sdist_suite_runs_parser_tests_a_crawl_and_the_corpus_check(
    unpacked_sdist: Path,
) -> None:
    """The fast subset passes from the unpacked sdist, nothing skipped."""
    ran = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SDIST_SUBSET],
        unpacked_sdist,
        PYTHONPATH=str(unpacked_sdist),
    )
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output
    summary = re.search(r"(\d+) passed", output)
    assert summary, output
    assert int(summary[1]) >= len(SDIST_SUBSET), output
    assert "skipped" not in output, output
