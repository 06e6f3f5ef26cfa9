"""Where the shared robots.txt data lives, for tests and scripts.

The data stays outside the repository: ``$REP_CORPUS_DIR`` names the corpus
directory, else it is ``../shared/data/robots-corpus`` next to the repository.
The benchmark URLs sit beside it (``robots-bench-urls/site-urls.tsv``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def corpus_dir() -> Path:
    """The corpus directory: ``$REP_CORPUS_DIR``, else ``<repo>/../shared/data/robots-corpus``."""
    configured = os.environ.get("REP_CORPUS_DIR")
    if configured:
        return Path(configured)
    return REPO_ROOT.parent / "shared" / "data" / "robots-corpus"


def site_urls_path() -> Path:
    """``site-urls.tsv`` (site, url) of the benchmark crawl, beside the corpus."""
    return corpus_dir().parent / "robots-bench-urls" / "site-urls.tsv"


def missing_message(path: Path) -> str:
    return f"robots corpus not found at {path}; set REP_CORPUS_DIR"


def require_corpus() -> Path:
    """The corpus directory, or skip the calling test when it is really missing."""
    import pytest

    directory = corpus_dir()
    if not (directory / "MANIFEST.tsv").is_file():
        pytest.skip(missing_message(directory))
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
