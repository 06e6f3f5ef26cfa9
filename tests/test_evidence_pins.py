"""``scrapy robots --pins DIR``: what a URL's verdict was when an evidence archive was made.

A crawl with ``REP_EVIDENCE`` only (no ``REP_STATE_DIR``) archives each
robots.txt; the site then changes it. ``scrapy robots --pins DIR URL`` takes
the pins from ``DIR/evidence.jsonl`` and the pinned body from the WARC record
that line names (or, for a revisit record, the record it refers to), so it
says what changed in the rule lines and each URL's verdict then beside the
one now. An archive that cannot give the body back costs a ``note:`` line,
never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from crawls import run_crawl
from servers import ScriptedServer
from test_evidence import SETTINGS, TOKEN, jsonl

pytestmark = pytest.mark.slow  # scrapy robots subprocesses

THEN = "User-agent: *\nDisallow: /private\n"
NOW = "User-agent: *\nDisallow: /private\nDisallow: /new\nDisallow: /more\n"


def check(scrapy_robots: Any, pins: Path, *urls: str, cwd: Path, json_out: bool = False) -> Any:
    args = ["--agent", TOKEN, "--pins", str(pins), *(["--json"] if json_out else []), *urls]
    result = scrapy_robots(*args, cwd=cwd)
    assert "Traceback" not in result.stderr, result.stderr
    return result


@pytest_twisted.ensureDeferred
async def test_the_verdict_then_beside_the_one_now_from_the_archive(
    site: ScriptedServer, tmp_path: Path, scrapy_robots: Any
) -> None:
    site.robots(THEN)
    evidence = tmp_path / "evidence"
    await run_crawl([site.url("/new/1")], {**SETTINGS, "REP_EVIDENCE": str(evidence)})
    assert not list(evidence.glob("*.sqlite*"))  # no state: the WARC record is all there is
    site.robots(NOW)
    new, private = site.url("/new/1"), site.url("/private/x")

    for pins in (evidence, evidence / "evidence.jsonl"):  # the directory or its jsonl
        result = check(scrapy_robots, pins, new, private, cwd=tmp_path)
        out = result.stdout
        assert result.returncode == 1, result.stderr
        assert f"  pinned    sha256 {hashlib.sha256(THEN.encode()).hexdigest()}" in out
        assert f"  now       sha256 {hashlib.sha256(NOW.encode()).hexdigest()}" in out
        assert "  pin       CHANGED: +2 Disallow lines" in out
        assert f"  pinned    ALLOWED    now FORBIDDEN  {new}" in out
        assert f"  pinned    FORBIDDEN  now FORBIDDEN  {private}" in out
        assert "note:" not in out

    data = json.loads(
        check(scrapy_robots, evidence, new, private, cwd=tmp_path, json_out=True).stdout
    )
    (pin,) = data["pins"]
    assert pin["state"] == "changed"
    assert pin["pinned_verdicts"] == [
        {"url": new, "allowed": True, "line": None, "rule": None, "now": "forbidden"},
        {
            "url": private,
            "allowed": False,
            "line": 2,
            "rule": "Disallow: /private",
            "now": "forbidden",
        },
    ]


@pytest_twisted.ensureDeferred
async def test_a_revisit_record_leads_to_the_body_it_refers_to(
    make_site: Any, tmp_path: Path, scrapy_robots: Any
) -> None:
    """Two origins serve the same robots.txt: the second one archived is a
    revisit record, with no body; the body is the first one's."""
    sites = [make_site(), make_site()]
    for site in sites:
        site.robots(THEN)
    evidence = tmp_path / "evidence"
    urls = [site.url("/new/1") for site in sites]
    await run_crawl(urls, {**SETTINGS, "REP_EVIDENCE": str(evidence)})
    (revisited,) = [line for line in jsonl(evidence) if line["hops"][-1].get("revisit_of")]
    (site,) = [site for site in sites if site.origin == revisited["origin"]]
    site.robots(NOW)

    result = check(scrapy_robots, evidence, site.url("/new/1"), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "  pin       CHANGED: +2 Disallow lines" in result.stdout
    assert f"  pinned    ALLOWED    now FORBIDDEN  {site.url('/new/1')}" in result.stdout


@pytest_twisted.ensureDeferred
async def test_a_crawl_pinned_to_an_evidence_jsonl_reads_the_pinned_rules_back(
    site: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """REP_PIN_FILE = an earlier crawl's evidence.jsonl: the crawl's pin
    WARNING names the changed lines, and the requests the pinned rules
    allowed are counted."""
    site.robots(THEN)
    evidence = tmp_path / "evidence"
    await run_crawl([site.url("/a")], {**SETTINGS, "REP_EVIDENCE": str(evidence)})
    site.robots(NOW)
    with caplog.at_level(logging.WARNING, logger="scrapy_rep.pins"):
        second = await run_crawl(
            [site.url("/new/1"), site.url("/private/x")],
            {**SETTINGS, "REP_PIN_FILE": str(evidence / "evidence.jsonl")},
        )
    assert second.stats["rep/pin/changed"] == 1
    assert second.stats["rep/pin/forbidden"] == 2
    assert second.stats["rep/pin/newly_forbidden"] == 1  # /new/1: allowed then
    assert any(
        "+2 Disallow lines; the current rules apply" in record.getMessage()
        for record in caplog.records
    ), caplog.text


def _damaged(evidence: Path, tmp_path: Path, how: str) -> tuple[Path, str]:
    """A copy of ``evidence`` with its pinned record made unreadable ``how``;
    the note's words."""
    copy = tmp_path / how
    shutil.copytree(evidence, copy)
    (line,) = jsonl(copy)
    warc = copy / line["warc_file"]
    data = warc.read_bytes()
    offset = line["warc_offset"]
    if how == "missing":
        warc.unlink()
        return copy, f"cannot read {warc}: No such file or directory"
    if how == "cut":
        warc.write_bytes(data[:offset])
        return copy, f"offset {offset} is past the end of {warc}"
    if how == "corrupt":
        warc.write_bytes(data[:offset] + b"no gzip member" + data[offset + 14 :])
        return copy, f"no readable gzip member at {warc} offset {offset}"
    assert how == "other-bytes"  # a line edited to name another digest than its record's
    line["parsed_sha256"] = hashlib.sha256(b"another body").hexdigest()
    (copy / "evidence.jsonl").write_text(json.dumps(line) + "\n")
    return copy, f"do not have the pinned sha256 {line['parsed_sha256'][:12]}..."


@pytest_twisted.ensureDeferred
async def test_an_archive_that_cannot_give_the_body_back_costs_a_note(
    site: ScriptedServer, tmp_path: Path, scrapy_robots: Any
) -> None:
    site.robots(THEN)
    evidence = tmp_path / "evidence"
    await run_crawl([site.url("/new/1")], {**SETTINGS, "REP_EVIDENCE": str(evidence)})
    site.robots(NOW)
    for how in ("missing", "cut", "corrupt", "other-bytes"):
        damaged, words = _damaged(evidence, tmp_path, how)
        result = check(scrapy_robots, damaged, site.url("/new/1"), cwd=tmp_path)
        out = result.stdout
        assert result.returncode == 1, (how, result.stderr)
        (note,) = [line for line in out.splitlines() if line.startswith("note:")]
        assert note.startswith(
            f"note: the pinned robots.txt of {site.origin}/robots.txt was not read back "
            "from the evidence archive: "
        ), (how, note)
        assert words in note, (how, note)
        assert "  pin       CHANGED: the pinned body is not at hand to compare lines" in out
        assert "  pinned    rules not at hand (see the note above)" in out
