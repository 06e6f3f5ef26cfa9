"""What the evidence archive's records say of a robots.txt, read as an auditor would.

tests/test_evidence.py checks that every fetch and hop is archived and
verifiable; this checks what the records hold: the warcinfo record (the
declared purposes beside the token and user agent), the request record (the
headers sent), the metadata record (scrapy-rep's reading: outcome, parsed
bytes' digest, expiry, the groups chosen for the token, Crawl-delay,
sitemaps, usage lines) and evidence.jsonl's pointer (file and offset) to
the response record, in a file named after the host and the process.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from crawls import run_crawl
from scrapy import Request
from servers import ScriptedServer
from test_evidence import SETTINGS, TOKEN, jsonl, read_warcs, warcio_check
from warcio.archiveiterator import ArchiveIterator

from scrapy_rep import ForbiddenByRobots

ROBOTS = (
    "User-agent: testbot\n"
    "Disallow: /secret\n"
    "Crawl-delay: 0.2\n"
    "Content-Usage: train-ai=n\n"
    "\n"
    "User-agent: *\n"
    "Disallow: /\n"
    "\n"
    "Sitemap: /sitemap.xml\n"
)


@pytest_twisted.ensureDeferred
async def test_the_records_say_what_was_read_and_where_it_is(
    site: ScriptedServer, tmp_path: Path
) -> None:
    site.robots(ROBOTS)
    evidence = tmp_path / "evidence"
    settings = {**SETTINGS, "REP_EVIDENCE": str(evidence), "REP_PURPOSES": ["train-ai"]}
    await run_crawl([site.url("/a")], settings)
    warcio_check(evidence)
    records = read_warcs(evidence)["records"]
    (line,) = [line for line in jsonl(evidence) if line["file"] == "/robots.txt"]

    # warcinfo: who crawled, as whom, for what
    infos = [
        payload for h, _, payload in records.values() if h.get_header("WARC-Type") == "warcinfo"
    ]
    assert infos
    for info in infos:
        assert "rep-purposes: train-ai\r\n" in info.decode()

    # file names carry the host and the process (workers may share a directory)
    host = re.sub(r"[^\w-]", "_", socket.gethostname().split(".")[0])
    assert re.fullmatch(
        rf"rep-\d{{14}}-{re.escape(host)}-{os.getpid()}-\d{{5}}\.warc\.gz", line["warc_file"]
    ), line["warc_file"]

    # evidence.jsonl points at the response record: its file, and the offset
    # of its gzip member, which a WARC reader opens at
    with (evidence / line["warc_file"]).open("rb") as stream:
        stream.seek(line["warc_offset"])
        record = next(iter(ArchiveIterator(stream)))
        assert record.rec_headers.get_header("WARC-Record-ID") == line["warc_record_id"]
        assert record.rec_headers.get_header("WARC-Type") == "response"
        assert record.content_stream().read() == ROBOTS.encode()

    # the request record: the headers sent
    response_headers = records[line["warc_record_id"]][0]
    request = records[response_headers.get_header("WARC-Concurrent-To")]
    assert request[1].get_header("User-Agent") == SETTINGS["USER_AGENT"]
    assert request[1].protocol == "GET"

    # the metadata record: scrapy-rep's reading of it
    reading = json.loads(records[line["metadata_record_id"]][2])
    assert reading["outcome"] == "parsed"
    assert reading["parsed_sha256"] == hashlib.sha256(ROBOTS.encode()).hexdigest()
    assert reading["token"] == TOKEN
    assert reading["groups"] == [TOKEN]  # the group chosen for the token, not *
    assert reading["crawl_delay"] == {"line": 3, "text": "Crawl-delay: 0.2", "seconds": 0.2}
    assert reading["sitemaps"] == [site.url("/sitemap.xml")]
    assert reading["usage_at_root"] == {
        "train-ai": {"allowed": False, "lines": [{"line": 4, "text": "Content-Usage: train-ai=n"}]}
    }
    assert reading["expires"] > reading["fetched_at"]
    assert reading["warc_record_id"] == line["warc_record_id"]


@pytest_twisted.ensureDeferred
async def test_the_evidence_directory_serves_as_the_state_directory(
    site: ScriptedServer, tmp_path: Path
) -> None:
    """REP_STATE_DIR and REP_EVIDENCE one directory (docs/state.md): the second
    crawl takes the rules from the state, downloads nothing and so archives
    nothing; its responses name the parsed bytes the first crawl archived."""
    site.robots(ROBOTS)
    directory = tmp_path / "evidence"
    settings = {**SETTINGS, "REP_EVIDENCE": str(directory), "REP_STATE_DIR": str(directory)}
    await run_crawl([site.url("/a")], settings)
    second = await run_crawl([site.url("/b"), site.url("/secret")], settings)
    assert site.hits("/robots.txt") == 1
    assert second.stats["rep/state/used"] == 1
    assert second.failed_with(site.url("/secret")) is ForbiddenByRobots
    warcio_check(directory)
    (line,) = jsonl(directory)  # the first crawl's fetch, and no other
    robotstxt = second.responses[site.url("/b")].meta["rep_provenance"]["robotstxt"]
    assert robotstxt["parsed_sha256"] == line["parsed_sha256"]


@pytest.mark.parametrize("frontier", [True, False], ids=["frontier", "no-frontier"])
@pytest_twisted.ensureDeferred
async def test_required_archive_failing_mid_crawl_sends_nothing_more(
    make_site: Any, tmp_path: Path, frontier: bool
) -> None:
    """REP_EVIDENCE_REQUIRED, the archive failing after the start (its
    directory replaced by a file once origin A is crawled): the spider closes,
    and origin B's pages, which waited for the robots.txt whose record failed
    (in the frontier's queue, or in the robots middleware without it), are
    not sent (before: the spider closed, and all 5 were sent)."""
    first, second = make_site(), make_site()
    first.robots("User-agent: *\nDisallow: /private\n")  # no Crawl-delay: pages go at once
    second.robots("User-agent: *\nDisallow: /private\n")
    evidence = tmp_path / "evidence"
    later = [second.url(f"/p{n}") for n in range(5)]

    def follow(response: Any) -> list[Request]:
        if not response.url.startswith(first.origin):
            return []
        evidence.rename(tmp_path / "archived")
        evidence.write_text("not a directory any more")
        return [Request(url, dont_filter=True) for url in later]

    settings = {
        **SETTINGS,
        "REP_EVIDENCE": str(evidence),
        "REP_EVIDENCE_REQUIRED": True,
        "REP_EVIDENCE_MAX_FILE_SIZE": 1,  # each record opens a new file: the next one fails
        "REP_FRONTIER": frontier,
    }
    result = await run_crawl([first.url("/a")], settings, follow=follow)
    assert result.stats["finish_reason"] == "rep_evidence_failed"
    assert second.hits("/robots.txt") == 1  # its record is the one that failed
    assert second.pages() == []
    # Those that reached the robots middleware ended with IgnoreRequest,
    # counted (the spider, closing, gets no errback): without the frontier all
    # 5 waited there; the frontier hands out none, or some, before the engine
    # stops asking it (on Twisted's reactor, none).
    dropped = result.stats.get("rep/evidence/dropped", 0)
    if frontier:
        assert dropped <= 5
    else:
        assert dropped == 5
    assert [line["origin"] for line in jsonl(tmp_path / "archived")] == [first.origin]
