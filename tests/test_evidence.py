"""The evidence archive (REP_EVIDENCE) and provenance (rep_provenance) in real crawls.

Origins whose robots.txt is gzip-encoded, redirected, cut by REP_MAX_SIZE,
an HTML page, a 503 (tried twice), refused, a 404, answered with a challenge
(a Cloudflare 403 and an AWS WAF 202, each with an HTML page), and two that
serve the same file (the second is a revisit). What is checked is what a reader of the
archive would check: warcio reads every file and verifies every digest (and
``warcio check`` passes), each download that got an answer is one response
(or revisit) record, evidence.jsonl's ``parsed_sha256`` is the sha256 of the
bytes the rules were read from, and parsing those bytes again gives the line
and rule of every response's decision.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import scrapy
from crawls import BASE_SETTINGS, run_crawl
from redis_server import RedisServer, shared
from scrapy import Request, Spider
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from servers import Reply, ScriptedServer, refused_port
from twisted.internet.defer import Deferred, gatherResults
from warcio.archiveiterator import ArchiveIterator

from scrapy_rep import RobotsTxt
from scrapy_rep.config import Config
from scrapy_rep.exceptions import InvalidSetting

TOKEN = "testbot"
MAX_SIZE = 300
ROBOTS = "User-agent: *\nDisallow: /private\nAllow: /private/open\n\nSitemap: /sitemap.xml\n"
SAME = "User-agent: testbot\nDisallow: /secret\nCrawl-delay: 0\n"
CHALLENGE_PAGE = b"<!DOCTYPE html><html><head><title>Just a moment...</title></head></html>"
LONG = "User-agent: *\nDisallow: /private\n" + "".join(f"Disallow: /x{i:04d}\n" for i in range(60))


def read_warcs(directory: Path) -> dict[str, Any]:
    """Every record of every WARC file, digests verified: {record id: (headers, payload)},
    and the files' record types in order."""
    records: dict[str, Any] = {}
    types: dict[str, list[str]] = {}
    for path in sorted(directory.glob("*.warc.gz")):
        with path.open("rb") as stream:
            kinds = types[path.name] = []
            for record in ArchiveIterator(stream, check_digests="raise"):
                headers = record.rec_headers
                kinds.append(headers.get_header("WARC-Type"))
                http = record.http_headers
                payload = record.content_stream().read()
                records[headers.get_header("WARC-Record-ID")] = (headers, http, payload)
    return {"records": records, "types": types}


def warcio_check(directory: Path) -> None:
    """``warcio check`` passes on every WARC file of ``directory`` (never skipped:
    warcio is in the test extra, its command line too)."""
    cli = Path(sys.executable).with_name("warcio")
    command = str(cli) if cli.exists() else shutil.which("warcio")
    assert command, "warcio's command line not found (the test extra of pyproject.toml)"
    files = [str(path) for path in sorted(directory.glob("*.warc.gz"))]
    assert files, f"no WARC file in {directory}"
    run = subprocess.run([command, "check", "-v", *files], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def jsonl(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (directory / "evidence.jsonl").read_text().splitlines()]


def sites(make_site: Any) -> dict[str, Any]:
    """The origins of the module docstring: {name: server or origin text}."""
    found: dict[str, Any] = {name: make_site() for name in ("gzip", "redirect", "long", "html")}
    found.update({name: make_site() for name in ("503", "404", "same1", "same2")})
    found.update({name: make_site() for name in ("cf-403", "waf-202")})
    found["gzip"].script(
        "/robots.txt",
        Reply(
            body=gzip.compress(ROBOTS.encode()),
            headers={"Content-Type": "text/plain", "Content-Encoding": "gzip"},
        ),
    )
    found["redirect"].script(
        "/robots.txt", Reply(status=301, headers={"Location": "/moved/robots.txt"})
    )
    found["redirect"].script(
        "/moved/robots.txt", Reply(body=ROBOTS.encode(), headers={"Content-Type": "text/plain"})
    )
    found["long"].robots(LONG)
    found["html"].script("/robots.txt", Reply(body=b"<html><body>Welcome</body></html>"))
    found["503"].script("/robots.txt", Reply(status=503, headers={"Retry-After": "0"}))
    found["404"].script("/robots.txt", Reply(status=404))
    found["cf-403"].script(
        "/robots.txt",
        Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge", "Content-Type": "text/html"}),
    )
    found["waf-202"].script(
        "/robots.txt",
        Reply(202, CHALLENGE_PAGE, {"x-amzn-waf-action": "challenge", "Content-Type": "text/html"}),
    )
    found["same1"].robots(SAME)
    found["same2"].robots(SAME)
    return found


SETTINGS = {
    "ROBOTSTXT_USER_AGENT": TOKEN,
    "USER_AGENT": f"{TOKEN}/1.0 (+https://example.com/bot)",
    "REP_MAX_SIZE": MAX_SIZE,
    "REP_FETCH_RETRIES": 1,
    "REP_UNREACHABLE": "allow",
    "REP_FETCH_TIMEOUT": 10.0,
    "DOWNLOAD_TIMEOUT": 60,  # pages: a busy machine's slow answer is no failure here
}


@pytest_twisted.ensureDeferred
async def test_archive_holds_every_fetch_and_hop_verifiable_with_warcio(
    make_site: Any, tmp_path: Path
) -> None:
    """Every robots.txt download, hop and retry is a record warcio verifies;
    evidence.jsonl's parsed_sha256 is the sha256 of the bytes parsed, and those
    bytes parsed again give each response's decision."""
    servers = sites(make_site)
    refused = f"http://127.0.0.1:{refused_port()}"
    origins = {name: server.origin for name, server in servers.items()}
    origins["refused"] = refused
    paths = ("/a", "/private/open/b", "/secret", "/x0001")
    urls = [origin + path for origin in origins.values() for path in paths]
    evidence = tmp_path / "evidence"
    result = await run_crawl(urls, {**SETTINGS, "REP_EVIDENCE": str(evidence)})

    archive = read_warcs(evidence)
    warcio_check(evidence)
    records = archive["records"]
    for kinds in archive["types"].values():
        assert kinds[0] == "warcinfo"
    lines = [line for line in jsonl(evidence) if line["file"] == "/robots.txt"]
    by_origin = {line["origin"]: line for line in lines}
    assert set(by_origin) == set(origins.values())
    assert len(lines) == len(origins)  # one fetch each

    # one response (or revisit) record per download that got an answer
    for name, server in servers.items():
        line = by_origin[server.origin]
        answered = [hop for hop in line["hops"] if hop["status"] is not None]
        robots_hits = sum(1 for hit in server.log() if "robots.txt" in hit.path)
        assert len(answered) == robots_hits, name
        for hop in answered:
            headers, _http, _payload = records[hop["record_id"]]
            assert headers.get_header("WARC-Type") in ("response", "revisit")
            assert headers.get_header("WARC-Target-URI") == hop["url"]
            request_id = headers.get_header("WARC-Concurrent-To")
            assert records[request_id][0].get_header("WARC-Type") == "request"
    response_records = sum(
        1 for h, _, _ in records.values() if h.get_header("WARC-Type") in ("response", "revisit")
    )
    assert response_records == sum(
        1 for line in jsonl(evidence) for hop in line["hops"] if hop["status"] is not None
    )

    # what each kind of origin left
    assert [hop["status"] for hop in by_origin[origins["redirect"]]["hops"]] == [301, 200]
    assert [hop["status"] for hop in by_origin[origins["503"]]["hops"]] == [503, 503]
    assert by_origin[origins["503"]]["outcome"] == "unreachable"
    assert by_origin[origins["404"]]["outcome"] == "unavailable"
    assert by_origin[origins["html"]]["outcome"] == "parsed"  # as RFC 9309 reads a 200
    # a challenge page is archived as received, but is no robots.txt: no rules
    # are read from it, and the pages let through (REP_UNREACHABLE = "allow")
    # say that they were checked against none
    for name, status, marker in (
        ("cf-403", 403, "cf-mitigated"),
        ("waf-202", 202, "x-amzn-waf-action"),
    ):
        challenged = by_origin[origins[name]]
        assert challenged["outcome"] == "challenged", name
        assert challenged["parsed_sha256"] is None
        assert [hop["status"] for hop in challenged["hops"]] == [status]
        headers, http, payload = records[challenged["warc_record_id"]]
        assert http.get_header(marker) == "challenge"  # every header value kept
        if headers.get_header("WARC-Type") == "revisit":  # the same page as the other
            payload = records[headers.get_header("WARC-Refers-To")][2]
        assert payload == CHALLENGE_PAGE
        assert hashlib.sha256(payload).hexdigest() == challenged["sha256"]
        reading = json.loads(records[challenged["metadata_record_id"]][2])
        assert reading["outcome"] == "challenged"
        assert reading["parsed_sha256"] is None
        assert "groups" not in reading
        assert not reading.get("rules_from")
        let_through = [
            response
            for url, response in result.responses.items()
            if url.startswith(origins[name] + "/")
        ]
        failed = {url: result.failed_with(url) for url in result.failures}
        assert {r.url for r in let_through} == {origins[name] + path for path in paths}, failed
        for response in let_through:
            robotstxt = response.meta["rep_provenance"]["robotstxt"]
            assert robotstxt["outcome"] == "challenged"
            assert robotstxt["status"] == status
            assert robotstxt["parsed_sha256"] is None
            assert robotstxt["warc_record_id"] == challenged["warc_record_id"]  # what it rests on
            decision = response.meta["rep_provenance"]["decision"]
            assert (decision["line"], decision["rule"], decision["group"]) == (None, None, [])
    for name in ("404", "503"):  # no rules: the provenance names the answer archived
        kept = by_origin[origins[name]]
        pages = [r for u, r in result.responses.items() if u.startswith(origins[name] + "/")]
        assert pages
        for response in pages:
            robotstxt = response.meta["rep_provenance"]["robotstxt"]
            assert robotstxt["parsed_sha256"] is None
            assert robotstxt["warc_record_id"] == kept["warc_record_id"]
    refused_hops = by_origin[refused]["hops"]
    assert refused_hops
    assert all(hop["status"] is None and hop["error"] for hop in refused_hops)
    gz = records[by_origin[origins["gzip"]]["warc_record_id"]]
    assert gz[0].get_header("Scrapy-Rep-Decoded") == "gzip"
    assert gz[1].get_header("Content-Encoding") is None
    assert gz[2] == ROBOTS.encode()
    long = by_origin[origins["long"]]
    assert records[long["warc_record_id"]][0].get_header("WARC-Truncated") == "length"
    assert long["truncated"]
    assert long["parsed_bytes"] <= MAX_SIZE
    same = [by_origin[origins[name]]["hops"][-1] for name in ("same1", "same2")]
    kinds = sorted(records[hop["record_id"]][0].get_header("WARC-Type") for hop in same)
    assert kinds == ["response", "revisit"]
    # the gzip-encoded and the redirected robots.txt hold the same bytes too,
    # and so do the two challenge pages
    assert result.stats["rep/evidence/revisits"] == 3

    # parsed_sha256: the bytes parsed; parsed again, they decide as the crawl did
    for line in lines:
        if line["outcome"] != "parsed":
            assert line["parsed_sha256"] is None
            continue
        headers, _, payload = records[line["warc_record_id"]]
        if headers.get_header("WARC-Type") == "revisit":
            payload = records[headers.get_header("WARC-Refers-To")][2]
        assert hashlib.sha256(payload).hexdigest() == line["sha256"]
        parsed = payload[: line["parsed_bytes"]]
        assert hashlib.sha256(parsed).hexdigest() == line["parsed_sha256"]
        robots = RobotsTxt.parse(parsed, max_size=MAX_SIZE)
        checked = 0
        for url, response in result.responses.items():
            provenance = response.meta["rep_provenance"]
            if provenance["origin"] != line["origin"]:
                continue
            assert provenance["robotstxt"]["parsed_sha256"] == line["parsed_sha256"]
            assert provenance["robotstxt"]["warc_record_id"] == line["warc_record_id"]
            again = robots.decide(url, user_agent=TOKEN)
            decision = provenance["decision"]
            assert (decision["allowed"], decision["line"], decision["rule"]) == (
                again.allowed,
                again.line,
                again.rule,
            )
            checked += 1
        assert checked

    # every crawled response carries its provenance, JSON-safe
    assert result.responses
    for response in result.responses.values():
        provenance = response.meta["rep_provenance"]
        assert provenance["checked"]
        assert provenance["decision"]["token"] == TOKEN
        json.dumps(provenance)
    forbidden = servers["same1"].origin + "/secret"
    assert forbidden not in result.responses
    assert result.stats["rep/evidence/fetches"] == len(jsonl(evidence))
    assert not result.stats.get("rep/evidence/write_errors")


@pytest_twisted.ensureDeferred
async def test_tdmrep_json_archived_and_usage_in_provenance(
    site: ScriptedServer, tmp_path: Path
) -> None:
    """With a purpose TDMRep governs, tdmrep.json is archived too, and the
    usage statements that applied are in each response's provenance."""
    site.robots("User-agent: *\nAllow: /\nContent-Usage: train-ai=n\n")
    rules = b'[{"location": "/*", "tdm-reservation": 1}]'
    site.script(
        "/.well-known/tdmrep.json", Reply(body=rules, headers={"Content-Type": "application/json"})
    )
    evidence = tmp_path / "evidence"
    settings = {**SETTINGS, "REP_EVIDENCE": str(evidence), "REP_PURPOSES": ["train-ai"]}
    result = await run_crawl([site.url("/a")], settings)
    read_warcs(evidence)
    warcio_check(evidence)
    files = {line["file"]: line for line in jsonl(evidence)}
    tdm = files["/.well-known/tdmrep.json"]
    assert tdm["outcome"] == "parsed"
    assert tdm["parsed_sha256"] == hashlib.sha256(rules).hexdigest()
    usage = result.responses[site.url("/a")].meta["rep_provenance"]["usage"]
    assert usage["train-ai"]["allowed"] is False
    assert any("robots.txt" in where for where in usage["train-ai"]["statements"])


class ItemSpider(Spider):
    name = "rep-items"

    class Page(scrapy.Item):
        url = scrapy.Field()
        rep_provenance = scrapy.Field()

    class Bare(scrapy.Item):
        url = scrapy.Field()

    def __init__(self, urls: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = urls

    async def start(self) -> Any:
        for url in self.urls:
            yield Request(url, dont_filter=True)

    def parse(self, response: Any) -> Any:
        yield {"url": response.url}
        yield self.Page(url=response.url)
        yield self.Bare(url=response.url)


@pytest_twisted.ensureDeferred
async def test_feed_items_carry_provenance(
    site: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """REP_PROVENANCE_FIELD: dicts and items declaring the field carry it into
    FEEDS; an item type without it gets one WARNING and a count."""
    site.robots("User-agent: *\nDisallow: /private\nAllow: /a\n")
    feed = tmp_path / "items.jsonl"
    settings = {
        **BASE_SETTINGS,
        **SETTINGS,
        "REP_PROVENANCE_FIELD": "rep_provenance",
        "FEEDS": {str(feed): {"format": "jsonlines"}},
    }
    caplog.set_level(logging.WARNING, logger="scrapy_rep")
    crawler = get_crawler(ItemSpider, settings)
    urls = [site.url("/a"), site.url("/b"), site.url("/private/c")]
    await deferred_from_coro(crawler.crawl_async(urls=urls))
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    assert len(items) == 6  # 3 per allowed page; /private/c was not downloaded
    filled = [item for item in items if "rep_provenance" in item]
    assert len(filled) == 4
    for item in filled:
        provenance = item["rep_provenance"]
        assert provenance["origin"] == site.origin
        assert provenance["decision"]["allowed"] is True
        assert provenance["robotstxt"]["outcome"] == "parsed"
        assert provenance["robotstxt"]["parsed_sha256"]
    a = next(item for item in filled if item["url"] == site.url("/a"))
    assert a["rep_provenance"]["decision"]["rule"] == "Allow: /a"
    warnings = [r for r in caplog.records if "REP_PROVENANCE_FIELD" in r.getMessage()]
    assert len(warnings) == 1
    assert "Bare" in warnings[0].getMessage()
    assert crawler.stats is not None
    assert crawler.stats.get_value("rep/provenance/unfilled") == 2


@pytest_twisted.ensureDeferred
async def test_unwritable_directory_one_error_and_a_count(
    make_site: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory that cannot be made: one ERROR, every failed write counted,
    the crawl goes on."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    servers = [make_site() for _ in range(3)]
    for server in servers:
        server.robots(ROBOTS)
    caplog.set_level(logging.DEBUG, logger="scrapy_rep")
    settings = {**SETTINGS, "REP_EVIDENCE": str(blocker / "evidence")}
    result = await run_crawl([server.url("/a") for server in servers], settings)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "Evidence could not be written" in errors[0].getMessage()
    assert result.stats["rep/evidence/write_errors"] >= 1 + 3  # at start, then each fetch
    assert len(result.responses) == 3
    assert result.stats["finish_reason"] == "finished"


@pytest_twisted.ensureDeferred
async def test_unwritable_directory_closes_the_spider_when_required(
    site: ScriptedServer, tmp_path: Path
) -> None:
    """REP_EVIDENCE_REQUIRED: an archive that cannot be written stops the crawl
    before any page is fetched unrecorded."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    site.robots(ROBOTS)
    settings = {
        **SETTINGS,
        "REP_EVIDENCE": str(blocker / "evidence"),
        "REP_EVIDENCE_REQUIRED": True,
    }
    result = await run_crawl([site.url(f"/p{i}") for i in range(5)], settings)
    assert result.stats["finish_reason"] == "rep_evidence_failed"
    assert site.pages() == []


@pytest_twisted.ensureDeferred
async def test_files_rotate_by_size_each_with_its_warcinfo(make_site: Any, tmp_path: Path) -> None:
    """REP_EVIDENCE_MAX_FILE_SIZE: a new file once one is past it, each opened
    by a warcinfo record naming scrapy-rep, Scrapy, the token and the user agent."""
    servers = [make_site() for _ in range(3)]
    for number, server in enumerate(servers):
        server.robots(f"User-agent: *\nDisallow: /{number}\n")
    evidence = tmp_path / "evidence"
    settings = {**SETTINGS, "REP_EVIDENCE": str(evidence), "REP_EVIDENCE_MAX_FILE_SIZE": 2000}
    await run_crawl([server.url("/a") for server in servers], settings)
    archive = read_warcs(evidence)
    warcio_check(evidence)
    assert len(archive["types"]) >= 3
    for path in sorted(evidence.glob("*.warc.gz")):
        with path.open("rb") as stream:
            first = next(iter(ArchiveIterator(stream)))
            info = first.content_stream().read().decode()
        assert first.rec_headers.get_header("WARC-Type") == "warcinfo"
        assert "scrapy-rep/" in info
        assert f"Scrapy {scrapy.__version__}" in info
        assert f"robots-token: {TOKEN}" in info
        assert f"http-header-user-agent: {SETTINGS['USER_AGENT']}" in info
    written = [record for record in archive["records"].values()]
    assert sum(1 for h, _, _ in written if h.get_header("WARC-Type") == "response") == 3


@pytest_twisted.ensureDeferred
async def test_cached_answer_recorded_with_its_original_date(
    site: ScriptedServer, tmp_path: Path
) -> None:
    """A robots.txt served by Scrapy's HTTP cache is recorded as such, dated by
    its original answer's Date, not by the time it was read from the cache."""
    date = "Tue, 01 Jan 2030 10:00:00 GMT"
    site.script(
        "/robots.txt",
        Reply(body=ROBOTS.encode(), headers={"Content-Type": "text/plain", "Date": date}),
    )
    cache = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_DIR": str(tmp_path / "cache")}
    first, second = tmp_path / "first", tmp_path / "second"
    await run_crawl([site.url("/a")], {**SETTINGS, **cache, "REP_EVIDENCE": str(first)})
    await run_crawl([site.url("/a")], {**SETTINGS, **cache, "REP_EVIDENCE": str(second)})
    assert site.hits("/robots.txt") == 1
    (line,) = jsonl(second)
    assert line["cached"] is True
    assert line["fetched_at"] == "2030-01-01T10:00:00.000000Z"
    headers = read_warcs(second)["records"][line["warc_record_id"]][0]
    assert headers.get_header("WARC-Date") == "2030-01-01T10:00:00.000000Z"
    assert headers.get_header("Scrapy-Rep-Served-From") == "scrapy-httpcache"
    assert jsonl(first)[0]["cached"] is False


def test_settings_are_checked() -> None:
    assert Config.from_settings({}).evidence is None
    config = Config.from_settings({"REP_EVIDENCE": Path("/tmp/x"), "REP_PROVENANCE_FIELD": "p"})
    assert config.evidence == "/tmp/x"
    assert config.provenance_field == "p"
    for name, value in (
        ("REP_EVIDENCE", 5),
        ("REP_EVIDENCE_MAX_FILE_SIZE", 0),
        ("REP_EVIDENCE_REQUIRED", "maybe"),
        ("REP_PROVENANCE_FIELD", ["a"]),
    ):
        with pytest.raises(InvalidSetting, match=name):
            Config.from_settings({name: value})


@pytest_twisted.ensureDeferred
async def test_provenance_always_overwritten_and_unchecked_requests_say_so(
    site: ScriptedServer,
) -> None:
    """A request carrying a provenance (meta copied from another response) gets
    its own; one robots.txt does not apply to says it was not checked; without
    REP_EVIDENCE nothing names a WARC record."""
    site.robots("User-agent: *\nDisallow: /private\n")
    stale = {"rep_provenance": {"origin": "https://elsewhere.example", "checked": True}}
    urls: list[str | Request] = [
        Request(site.url("/a"), meta=dict(stale)),
        Request(site.url("/b"), meta={**stale, "dont_obey_robotstxt": True}),
    ]
    result = await run_crawl(urls, SETTINGS)
    checked = result.responses[site.url("/a")].meta["rep_provenance"]
    assert checked["origin"] == site.origin
    assert checked["decision"]["allowed"] is True
    assert checked["decision"]["line"] is None  # no rule matched
    assert (
        checked["robotstxt"]["parsed_sha256"]
        == hashlib.sha256(b"User-agent: *\nDisallow: /private\n").hexdigest()
    )
    assert checked["robotstxt"]["warc_record_id"] is None
    unchecked = result.responses[site.url("/b")].meta["rep_provenance"]
    assert unchecked["checked"] is False
    assert unchecked["reason"] == "dont_obey_robotstxt"
    assert unchecked["origin"] is None


@pytest.mark.asyncio_only
@pytest_twisted.ensureDeferred
async def test_in_a_cluster_only_the_fetching_worker_records(
    site: ScriptedServer, redis_server: RedisServer, redis_prefix: str, tmp_path: Path
) -> None:
    """Two workers sharing robots.txt through Redis, and one evidence directory:
    the robots.txt is downloaded and archived once, by the worker that fetched
    it; the other's responses name the same parsed bytes, learned with the rules."""
    site.robots(ROBOTS, delay=0.5)
    evidence = tmp_path / "evidence"
    settings = {**SETTINGS, **shared(redis_server, redis_prefix), "REP_EVIDENCE": str(evidence)}
    results: list[Any] = await gatherResults(
        [Deferred.fromCoroutine(run_crawl([site.url(f"/{n}")], settings)) for n in range(2)]
    )
    assert site.hits("/robots.txt") == 1
    (line,) = jsonl(evidence)
    assert line["parsed_sha256"] == hashlib.sha256(ROBOTS.encode()).hexdigest()
    read_warcs(evidence)
    warcio_check(evidence)
    fetched = [r for r in results if r.stats.get("rep/evidence/fetches")]
    assert len(fetched) == 1
    shas = sorted(
        str(r.responses[url].meta["rep_provenance"]["robotstxt"]["parsed_sha256"])
        for r in results
        for url in r.responses
    )
    # the worker that learned the rules from Redis names the same bytes
    assert shas == [line["parsed_sha256"]] * 2


@pytest_twisted.ensureDeferred
async def test_a_304_is_recorded_as_a_not_modified_revisit(make_site: Any, tmp_path: Path) -> None:
    """A 304 answer is a revisit record (server-not-modified profile) that refers
    to the latest copy of that URL the archive holds, when it holds one (here
    none: the record refers to nothing)."""
    site = make_site()
    site.script("/robots.txt", Reply(status=304, headers={"ETag": '"v1"'}))
    evidence = tmp_path / "evidence"
    result = await run_crawl([site.url("/a")], {**SETTINGS, "REP_EVIDENCE": str(evidence)})
    warcio_check(evidence)
    (line,) = jsonl(evidence)
    assert line["status"] == 304
    assert line["validators"] == {"etag": '"v1"'}
    headers = read_warcs(evidence)["records"][line["warc_record_id"]][0]
    assert headers.get_header("WARC-Type") == "revisit"
    assert headers.get_header("WARC-Profile").endswith("/revisit/server-not-modified")
    assert headers.get_header("WARC-Refers-To") is None
    assert result.stats["rep/evidence/revisits"] == 1
