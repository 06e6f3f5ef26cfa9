"""tests/scrapy_sdist.py: Scrapy's own tests come from one download, or the module is skipped.

The index is a real local server speaking the JSON listing pip reads (PEP 691): the first
run fetches the listing and the one sdist file (no build, no build tools), and a failed,
stalled or tampered download skips with its reason instead of erroring the run.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import scrapy
import scrapy_sdist
from servers import Gate, Reply, ScriptedServer

pytestmark = pytest.mark.reactor_free  # no crawl in pytest's process: its reactor changes nothing

VERSION = scrapy.__version__
ARCHIVE = f"/files/scrapy-{VERSION}.tar.gz"


def sdist_bytes() -> bytes:
    """A small sdist: a test module under tests/ and a module outside it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in {
            f"scrapy-{VERSION}/tests/test_example.py": b"VALUE = 42\n",
            f"scrapy-{VERSION}/scrapy/engine.py": b"raise SystemExit\n",
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    return buffer.getvalue()


def listing(sha256: str) -> Reply:
    files = [
        {"filename": f"scrapy-{VERSION}-py3-none-any.whl", "url": "/files/wheel", "hashes": {}},
        {"filename": f"scrapy-{VERSION}.tar.gz", "url": ARCHIVE, "hashes": {"sha256": sha256}},
    ]
    body = json.dumps({"meta": {"api-version": "1.0"}, "name": "scrapy", "files": files})
    return Reply(body=body.encode(), headers={"Content-Type": "application/json"})


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ScriptedServer]:
    """A local index; the sdist cache in a fresh folder; not in CI unless a test says so."""
    with ScriptedServer() as server:
        monkeypatch.setattr(scrapy_sdist, "INDEX", server.url("/simple"))
        monkeypatch.setattr(scrapy_sdist, "CACHE", tmp_path / "scrapy-sdist")
        monkeypatch.delenv("CI", raising=False)
        yield server


def test_first_run_fetches_the_listing_and_the_sdist_only(index: ScriptedServer) -> None:
    body = sdist_bytes()
    index.script("/simple/scrapy/", listing(hashlib.sha256(body).hexdigest()))
    index.script(ARCHIVE, Reply(body=body, headers={"Content-Type": "application/gzip"}))

    tests_dir = scrapy_sdist.scrapy_tests_dir()

    assert (tests_dir / "test_example.py").read_text() == "VALUE = 42\n"
    assert not list(tests_dir.parent.rglob("engine.py"))  # only tests/ is unpacked
    assert index.paths() == ["/simple/scrapy/", ARCHIVE]
    accept = index.log()[0].headers["Accept"]
    assert accept == "application/vnd.pypi.simple.v1+json"
    # The second run reads the kept copy: nothing more reaches the index.
    assert scrapy_sdist.scrapy_tests_dir() == tests_dir
    assert index.hits() == 2


def test_an_index_error_skips_with_the_status(index: ScriptedServer) -> None:
    index.script("/simple/scrapy/", Reply(status=503, body=b"down for maintenance"))
    with pytest.raises(pytest.skip.Exception, match=r"own tests unavailable: .*503"):
        scrapy_sdist.scrapy_tests_dir()


def test_a_stalled_index_skips_after_the_timeout(
    index: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scrapy_sdist, "TIMEOUT", 0.5)
    release = Gate()
    index.script("/simple/scrapy/", Reply(wait_for=release, wait_timeout=30))
    started = time.monotonic()
    try:
        with pytest.raises(pytest.skip.Exception, match="timed out"):
            scrapy_sdist.scrapy_tests_dir()
    finally:
        release.set()
    assert time.monotonic() - started < 15  # not the 300 s of a stuck `pip download`


def test_an_sdist_that_does_not_match_its_hash_is_not_used(index: ScriptedServer) -> None:
    index.script("/simple/scrapy/", listing("0" * 64))
    index.script(ARCHIVE, Reply(body=sdist_bytes()))
    with pytest.raises(pytest.skip.Exception, match="does not match the sha256"):
        scrapy_sdist.scrapy_tests_dir()
    assert not scrapy_sdist.CACHE.joinpath(VERSION).exists()


def test_a_version_the_index_does_not_list_skips(index: ScriptedServer) -> None:
    index.script("/simple/scrapy/", Reply(body=b'{"files": []}'))
    with pytest.raises(pytest.skip.Exception, match=f"scrapy-{VERSION}.tar.gz is not listed"):
        scrapy_sdist.scrapy_tests_dir()


def test_in_ci_a_failed_download_fails(
    index: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    index.script("/simple/scrapy/", Reply(status=404))
    with pytest.raises(pytest.fail.Exception, match="CI=true: these tests must run"):
        scrapy_sdist.scrapy_tests_dir()
