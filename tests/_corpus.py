"""Where the robots.txt data of the tests (and of benchmarks/parser.py) lives.

It ships in ``tests/data/`` (see its README.md): ``robots-data.tar.xz`` holds the corpus
bodies, the benchmark URLs (``robots-bench-urls/site-urls.tsv``) and the synthetic worst
cases; ``MANIFEST.tsv`` lists the corpus. The archive is unpacked once per process, on
first use (0.5 s on a quiet machine), into a temporary directory removed at exit.
``$REP_CORPUS_DIR`` names another corpus directory instead, with ``robots-bench-urls/``
beside it.

Missing data fails the tests rather than skipping them: it ships with the repository and the
sdist, so a missing file means a broken checkout or package, which a skip would hide.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
ARCHIVE = DATA_DIR / "robots-data.tar.xz"


@functools.cache
def unpacked() -> Path:
    """The archive unpacked into a fresh temporary directory, once per process, with
    MANIFEST.tsv in ``robots-corpus/``; FileNotFoundError when the archive is missing."""
    if not ARCHIVE.is_file():
        raise FileNotFoundError(
            f"test data not found at {ARCHIVE}; it ships with the repository and the sdist"
            " (see tests/data/README.md), or set REP_CORPUS_DIR"
        )
    target = Path(tempfile.mkdtemp(prefix="scrapy-rep-data-"))
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    _unpack(ARCHIVE, target)
    shutil.copyfile(DATA_DIR / "MANIFEST.tsv", target / "robots-corpus" / "MANIFEST.tsv")
    return target


def _unpack(archive: Path, target: Path) -> None:
    # Most of the time goes to creating the 2,166 files (decompressing takes 0.2 s of CPU):
    # TMPDIR=/dev/shm makes it quicker on a busy disk.
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12: no links, nothing outside
            tar.extractall(target, filter="data")
        else:
            tar.extractall(target)  # older patch releases; the archive is our own


def corpus_dir() -> Path:
    """The corpus directory: ``$REP_CORPUS_DIR``, else the unpacked copy of tests/data/."""
    configured = os.environ.get("REP_CORPUS_DIR")
    if configured:
        return Path(configured)
    return unpacked() / "robots-corpus"


def site_urls_path() -> Path:
    """``site-urls.tsv`` (site, url) of the benchmark crawl, beside the corpus."""
    return corpus_dir().parent / "robots-bench-urls" / "site-urls.tsv"


def missing_message(path: Path) -> str:
    return f"robots.txt data not found at {path}; it ships in tests/data/, or set REP_CORPUS_DIR"


def require_corpus() -> Path:
    """The corpus directory, with its MANIFEST.tsv and site-urls.tsv; fails the calling test
    when any of them is missing."""
    import pytest

    try:
        directory = corpus_dir()
    except FileNotFoundError as error:
        pytest.fail(str(error), pytrace=False)
    for needed in (directory / "MANIFEST.tsv", site_urls_path()):
        if not needed.is_file():
            pytest.fail(missing_message(needed), pytrace=False)
    return directory


@dataclass(frozen=True)
class CorpusFile:
    filename: str
    size: int
    sha256: str
    features: frozenset[str]
    path: Path

    @property
    def site(self) -> str:
        return self.filename.removesuffix(".txt")


def manifest(directory: Path) -> list[CorpusFile]:
    """The files MANIFEST.tsv lists (the list to use; not the directory listing)."""
    files = []
    with open(directory / "MANIFEST.tsv", encoding="utf-8", newline="") as lines:
        header = next(lines).rstrip("\n").split("\t")
        for line in lines:
            row = dict(zip(header, line.rstrip("\n").split("\t"), strict=True))
            files.append(
                CorpusFile(
                    filename=row["filename"],
                    size=int(row["size_bytes"]),
                    sha256=row["sha256"],
                    features=frozenset(filter(None, row.get("features", "").split(","))),
                    path=directory / row["filename"],
                )
            )
    return files


def site_urls(path: Path) -> Iterator[tuple[str, str]]:
    """(site, url) rows of ``site-urls.tsv``, in file order."""
    with open(path, encoding="utf-8", newline="") as lines:
        next(lines)  # header
        for line in lines:
            site, _, url = line.rstrip("\n").partition("\t")
            yield site, url
