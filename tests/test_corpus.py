"""Every real robots.txt of the corpus parses and answers.

The corpus (2,166 files from public crawls, byte-exact) ships in tests/data/ (or is found
through ``$REP_CORPUS_DIR``); see tests/_corpus.py. Missing data fails these tests.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import pytest
from _corpus import CorpusFile, manifest, require_corpus, site_urls, site_urls_path

from scrapy_rep import Decision, RobotsTxt
from scrapy_rep.robotstxt import DEFAULT_MAX_SIZE

# every file of the corpus: CPU-heavy
pytestmark = [pytest.mark.corpus, pytest.mark.reactor_free, pytest.mark.scrapy_free]

AGENTS = ("examplebot", "Googlebot", "Mozilla")
# Comparisons between two parses: one agent that usually has its own group, one that uses *.
COMPARED_AGENTS = ("examplebot", "Googlebot")
PROBE_URLS = (
    "/",
    "/robots.txt",
    "/index.html?q=1&page=2",
    "https://example.com/search?q=%E3%83%84#top",
    "/wp-admin/admin-ajax.php",
    "/ツ/%7Efoo/*/$",
)
SITE_URLS_PER_FILE = 20


@pytest.fixture(scope="module")
def corpus() -> list[CorpusFile]:
    return manifest(require_corpus())


@pytest.fixture(scope="module")
def urls_by_site(corpus: list[CorpusFile]) -> dict[str, list[str]]:
    urls: dict[str, list[str]] = defaultdict(list)
    for site, url in site_urls(site_urls_path()):
        if len(urls[site]) < SITE_URLS_PER_FILE:
            urls[site].append(url)
    return urls


def decisions(robots: RobotsTxt, urls: Iterable[str]) -> list[Decision]:
    return [robots.decide(url, user_agent=agent) for url in urls for agent in COMPARED_AGENTS]


def first_failures(failures: list[str], limit: int = 10) -> str:
    return f"{len(failures)} file(s) failed, first {limit}:\n" + "\n".join(failures[:limit])


def test_manifest_lists_every_corpus_file(corpus: list[CorpusFile]) -> None:
    """MANIFEST.tsv lists 2,166 files; each is present, byte for byte as listed (size and
    sha256: line ends, BOMs and non-UTF-8 bytes survived packing and unpacking)."""
    assert len(corpus) == 2166
    wrong = []
    for entry in corpus:
        data = entry.path.read_bytes() if entry.path.is_file() else None
        if data is None:
            wrong.append(f"{entry.filename}: missing")
        elif len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
            wrong.append(f"{entry.filename}: not the listed bytes ({len(data)} for {entry.size})")
    assert not wrong, first_failures(wrong)


def test_missing_data_fails_the_tests_instead_of_skipping_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data ships with the repository and the sdist: a corpus directory without its
    files fails the corpus tests (naming what is missing), so no run passes without them."""
    monkeypatch.setenv("REP_CORPUS_DIR", str(tmp_path / "robots-corpus"))
    with pytest.raises(pytest.fail.Exception, match=r"not found at .*MANIFEST\.tsv"):
        require_corpus()
    (tmp_path / "robots-corpus").mkdir()
    (tmp_path / "robots-corpus" / "MANIFEST.tsv").write_text("filename\n")
    with pytest.raises(pytest.fail.Exception, match=r"not found at .*site-urls\.tsv"):
        require_corpus()


def test_every_corpus_file_parses_and_answers(
    corpus: list[CorpusFile], urls_by_site: dict[str, list[str]]
) -> None:
    """Each file parses without error and answers allowed()/decide() for a few URLs
    (fixed probes and its site's own URLs), /robots.txt always allowed; delays()
    names the lines crawl_delay() and request_rate() read."""
    failures = []
    for entry in corpus:
        try:
            robots = RobotsTxt.parse(
                entry.path.read_bytes(), url=f"https://{entry.site}/robots.txt"
            )
            for url in (*PROBE_URLS, *urls_by_site.get(entry.site, ())):
                for agent in AGENTS:
                    decision = robots.decide(url, user_agent=agent)
                    assert decision.allowed is robots.allowed(url, user_agent=agent)
                    assert (decision.line is None) == (decision.rule is None)
            assert robots.allowed("/robots.txt", user_agent="examplebot")
            for agent in AGENTS:
                delay = robots.crawl_delay(user_agent=agent)
                assert delay is None or (isinstance(delay, float) and delay >= 0)
                rate = robots.request_rate(user_agent=agent)
                assert rate is None or (rate[0] > 0 and rate[1] > 0)
                lines = robots.delays(user_agent=agent)
                assert (lines.crawl_delay and lines.crawl_delay.seconds) == delay
                assert (lines.request_rate and lines.request_rate.seconds) == (
                    rate and rate[1] / rate[0]
                )
            assert all(isinstance(s, str) and s for s in robots.sitemaps)
            assert len(set(robots.sitemaps)) == len(robots.sitemaps)
        except Exception as error:  # collect them all, report the first few
            failures.append(f"{entry.filename}: {type(error).__name__}: {error}")
    assert not failures, first_failures(failures)


def test_corpus_bytes_and_text_give_the_same_answers(
    corpus: list[CorpusFile], urls_by_site: dict[str, list[str]]
) -> None:
    """For every valid UTF-8 file, parse(bytes) and parse(str) decide alike."""
    different = []
    for entry in corpus:
        data = entry.path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        urls = (*PROBE_URLS, *urls_by_site.get(entry.site, ()))
        if decisions(RobotsTxt.parse(data), urls) != decisions(RobotsTxt.parse(text), urls):
            different.append(entry.filename)
    assert not different, first_failures(different)


@pytest.mark.parametrize("feature", ["crlf", "cr_only"])
def test_corpus_line_end_style_changes_no_answer(
    corpus: list[CorpusFile], urls_by_site: dict[str, list[str]], feature: str
) -> None:
    """Files written with CRLF or CR line ends decide exactly as their LF version,
    line numbers included."""
    files = [entry for entry in corpus if feature in entry.features]
    assert files, f"no {feature} file in the corpus"
    different = []
    for entry in files:
        data = entry.path.read_bytes()
        unix = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        urls = (*PROBE_URLS, *urls_by_site.get(entry.site, ()))
        if decisions(RobotsTxt.parse(data), urls) != decisions(RobotsTxt.parse(unix), urls):
            different.append(entry.filename)
    assert not different, first_failures(different)


def test_corpus_bom_changes_no_answer(
    corpus: list[CorpusFile], urls_by_site: dict[str, list[str]]
) -> None:
    """Files that start with a UTF-8 BOM decide exactly as without it."""
    files = [entry for entry in corpus if "bom8" in entry.features]
    assert files, "no BOM file in the corpus"
    different = []
    for entry in files:
        data = entry.path.read_bytes()
        assert data.startswith(b"\xef\xbb\xbf"), entry.filename
        urls = (*PROBE_URLS, *urls_by_site.get(entry.site, ()))
        if decisions(RobotsTxt.parse(data), urls) != decisions(RobotsTxt.parse(data[3:]), urls):
            different.append(entry.filename)
    assert not different, first_failures(different)


def test_corpus_files_over_the_limit_read_only_the_first_500_kib(
    corpus: list[CorpusFile], urls_by_site: dict[str, list[str]]
) -> None:
    """Files over 512,000 bytes (DEFAULT_MAX_SIZE) decide as their first 512,000
    bytes (cut line dropped)."""
    files = [entry for entry in corpus if entry.size > DEFAULT_MAX_SIZE]
    assert files, "no file over 512,000 bytes in the corpus"
    different = []
    for entry in files:
        data = entry.path.read_bytes()
        head = data[:DEFAULT_MAX_SIZE]
        if data[DEFAULT_MAX_SIZE : DEFAULT_MAX_SIZE + 1] not in (b"\n", b"\r"):
            head = head[: max(head.rfind(b"\n"), head.rfind(b"\r")) + 1]
        urls = (*PROBE_URLS, *urls_by_site.get(entry.site, ()))
        if decisions(RobotsTxt.parse(data), urls) != decisions(RobotsTxt.parse(head), urls):
            different.append(entry.filename)
    assert not different, first_failures(different)
