"""The crawl report (scrapy_rep/report/): what robots.txt did to each origin, told at
INFO while the crawl runs, summarised at spider close, and written to ``REP_REPORT``.

Real crawls against real local servers; every count is checked against what the
servers saw (a forbidden or dropped request never reaches its server).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from crawls import PATIENT, run_crawl
from scrapy import Request, signals
from scrapy.crawler import Crawler
from servers import Reply, ScriptedServer, gaps, refused_port

from scrapy_rep._robots import robots_service
from scrapy_rep.config import Config
from scrapy_rep.exceptions import InvalidSetting

REPORT_LOGGER = "scrapy_rep.report"


def told(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    """Messages of the report's logger at ``level``, the close summary excepted."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == REPORT_LOGGER
        and r.levelno == level
        and not r.getMessage().startswith("Crawl report:")
    ]


def summary(caplog: pytest.LogCaptureFixture) -> str:
    [text] = [
        r.getMessage()
        for r in caplog.records
        if r.name == REPORT_LOGGER and r.getMessage().startswith("Crawl report:")
    ]
    return text


def records(path: Path) -> list[dict[str, Any]]:
    text = path.read_text("utf-8")
    if path.suffix == ".json":
        loaded: list[dict[str, Any]] = json.loads(text)
        return loaded
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="scrapy_rep")
    return caplog


# -- forbidden -------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_forbidding_origin_is_told_once_then_summarised_with_its_rules(
    site: ScriptedServer, logs: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    site.robots(
        "User-agent: *\nAllow: /private/ok\nDisallow: /private\nDisallow: /cart\n"
        "Sitemap: /sitemap.xml\n"
    )
    report = tmp_path / "report.jsonl"
    asked = [*(f"/private/{i}" for i in range(5)), "/cart", "/private/ok", "/"]
    result = await run_crawl([site.url(p) for p in asked], {"REP_REPORT": str(report)})

    served = set(site.pages())
    assert served == {"/private/ok", "/"}
    never = Counter(
        "line 3" if p.startswith("/private") else "line 4" for p in asked if p not in served
    )
    assert never == {"line 3": 5, "line 4": 1}
    assert told(logs) == [
        f"robots.txt of {site.origin} forbids requests: 1 so far, the first by line 3 "
        "(Disallow: /private); more are counted for the summary at spider close"
    ]
    assert summary(logs) == "\n".join(
        [
            "Crawl report: robots.txt changed what happened to 1 of 1 origin "
            "(6 requests: 6 forbidden, 0 dropped, 0 paced)",
            f"  {site.origin}  robots.txt parsed (HTTP 200), 1 sitemap",
            "      forbidden 6: line 3 (Disallow: /private) x5, line 4 (Disallow: /cart) x1",
            f"  every origin is in REP_REPORT = {str(report)!r} (1 record)",
        ]
    )
    [record] = records(report)
    assert record == {
        "origin": site.origin,
        "outcome": "parsed",
        "status": 200,
        "reason": "",
        "stale": False,
        "fetches": site.hits("/robots.txt"),
        "delay": 0.0,
        "asked_delay": 0.0,
        "delay_source": "",
        "sitemaps": 1,
        "forbidden": 6,
        "forbidden_rules": [
            {"line": 3, "rule": "Disallow: /private", "count": 5},
            {"line": 4, "rule": "Disallow: /cart", "count": 1},
        ],
        "dropped": 0,
        "dropped_reason": "",
        "paced": 0,
        "dry_run": {"forbidden": 0, "forbidden_rules": [], "dropped": 0},
        "evicted": False,
        "stop_signal": None,
    }
    assert result.stats["rep/forbidden"] == record["forbidden"]


@pytest_twisted.ensureDeferred
async def test_dry_run_counts_would_be_drops_apart(
    site: ScriptedServer, logs: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    site.robots("User-agent: *\nDisallow: /private\n")
    report = tmp_path / "report.json"
    urls = [site.url(f"/private/{i}") for i in range(3)]
    await run_crawl(urls, {"REP_DRY_RUN": True, "REP_REPORT": str(report)})

    assert site.hits("/private/0") == site.hits("/private/2") == 1  # all let through
    assert told(logs) == [
        f"robots.txt of {site.origin} would forbid requests (dry run: let through): 1 so far, "
        "the first by line 2 (Disallow: /private); more are counted for the summary at "
        "spider close"
    ]
    assert summary(logs).splitlines()[:3] == [
        "Crawl report: robots.txt changed what happened to 1 of 1 origin (0 requests: "
        "0 forbidden, 0 dropped, 0 paced, dry run: 3 would be forbidden, 0 would be dropped)",
        f"  {site.origin}  robots.txt parsed (HTTP 200)",
        "      would be forbidden (dry run) 3: line 2 (Disallow: /private) x3",
    ]
    [record] = records(report)
    assert record["forbidden"] == 0
    assert record["forbidden_rules"] == []
    assert record["dry_run"] == {
        "forbidden": 3,
        "forbidden_rules": [{"line": 2, "rule": "Disallow: /private", "count": 3}],
        "dropped": 0,
    }


# -- Crawl-delay -------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_crawl_delay_is_told_once_with_its_cause(
    site: ScriptedServer, logs: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    site.robots("User-agent: *\nCrawl-delay: 0.2\n")
    report = tmp_path / "report.jsonl"
    await run_crawl([site.url(f"/{i}") for i in range(3)], {"REP_REPORT": str(report)})

    assert len(site.pages()) == 3
    assert min(gaps(site.page_hits())) >= 0.19
    assert told(logs) == [
        f"robots.txt of {site.origin} slows it down: one request every 0.2 s (Crawl-delay: 0.2)"
    ]
    assert "      paced 3: one request every 0.2 s (Crawl-delay: 0.2)" in summary(logs)
    [record] = records(report)
    assert (record["paced"], record["delay"], record["asked_delay"]) == (3, 0.2, 0.2)
    assert record["delay_source"] == "Crawl-delay: 0.2"


@pytest_twisted.ensureDeferred
async def test_a_capped_request_rate_says_so(
    site: ScriptedServer, logs: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    site.robots("User-agent: *\nRequest-rate: 1/30s\nCrawl-delay: 10\n")
    report = tmp_path / "report.jsonl"
    settings = {"REP_REPORT": str(report), "REP_MAX_CRAWL_DELAY": 0.1}
    await run_crawl([site.url(f"/{i}") for i in range(3)], settings)

    assert len(site.pages()) == 3
    assert told(logs) == [
        f"robots.txt of {site.origin} slows it down: one request every 0.1 s "
        "(Request-rate: 1/30s, capped at REP_MAX_CRAWL_DELAY)"
    ]
    assert min(gaps(site.page_hits())) >= 0.09
    [record] = records(report)
    assert (record["paced"], record["delay"], record["asked_delay"]) == (3, 0.1, 30.0)


# -- unreachable -------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_unreachable_drops_are_counted_not_told_again(
    site: ScriptedServer, logs: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    site.script("/robots.txt", Reply(status=503))
    report = tmp_path / "report.jsonl"
    await run_crawl([site.url(f"/{i}") for i in range(3)], {"REP_REPORT": str(report)})

    assert site.pages() == []
    assert told(logs) == []  # the fetcher's WARNING says it, once
    warnings = [r for r in logs.records if r.levelno == logging.WARNING and "503" in r.message]
    assert len(warnings) == 1
    assert summary(logs).splitlines()[1:3] == [
        f"  {site.origin}  robots.txt unreachable (HTTP 503)",
        "      dropped 3: robots.txt unreachable (HTTP 503)",
    ]
    [record] = records(report)
    assert (record["outcome"], record["status"], record["dropped"]) == ("unreachable", 503, 3)
    assert record["dropped_reason"] == "HTTP 503"


# -- the summary's top N and the rest ------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_summary_lists_the_most_affected_origins_and_counts_the_rest(
    make_site: Callable[[], ScriptedServer], logs: pytest.LogCaptureFixture
) -> None:
    sites = [make_site() for _ in range(5)]
    urls = []
    for forbidden, site in enumerate(sites):  # site i forbids i requests; site 0 none
        site.robots("User-agent: *\nDisallow: /no\n")
        urls += [site.url(f"/no/{n}") for n in range(forbidden)] + [site.url("/")]
    await run_crawl(urls, {"REP_REPORT_TOP": 2})

    assert [len(site.pages()) for site in sites] == [1] * 5
    lines = summary(logs).splitlines()
    assert lines == [
        "Crawl report: robots.txt changed what happened to 4 of 5 origins "
        "(10 requests: 10 forbidden, 0 dropped, 0 paced)",
        f"  {sites[4].origin}  robots.txt parsed (HTTP 200)",
        "      forbidden 4: line 2 (Disallow: /no) x4",
        f"  {sites[3].origin}  robots.txt parsed (HTTP 200)",
        "      forbidden 3: line 2 (Disallow: /no) x3",
        "  the other 3 origins: 3 requests: 3 forbidden, 0 dropped, 0 paced",
    ]


@pytest.mark.parametrize("mode", ["disallow", "allow"])
@pytest_twisted.ensureDeferred
async def test_an_unreachable_origin_is_listed_never_folded_into_the_others(
    make_site: Callable[[], ScriptedServer], logs: pytest.LogCaptureFixture, mode: str
) -> None:
    """Below the REP_REPORT_TOP by requests affected (one dropped, or none when
    REP_UNREACHABLE = 'allow' lets its page through), an outage is still listed."""
    sites = [make_site() for _ in range(4)]
    down = make_site()
    down.script("/robots.txt", Reply(status=503))
    urls = [down.url("/")]
    for forbidden, site in enumerate(sites):  # site i forbids i requests
        site.robots("User-agent: *\nDisallow: /no\n")
        urls += [site.url(f"/no/{n}") for n in range(forbidden)] + [site.url("/")]
    await run_crawl(urls, {"REP_REPORT_TOP": 2, "REP_UNREACHABLE": mode, "REP_FETCH_RETRIES": 0})

    dropped = 1 if mode == "disallow" else 0
    assert down.pages() == ([] if dropped else ["/"])
    outage = [f"  {down.origin}  robots.txt unreachable (HTTP 503)"]
    if dropped:
        outage.append("      dropped 1: robots.txt unreachable (HTTP 503)")
    assert summary(logs).splitlines() == [
        f"Crawl report: robots.txt changed what happened to {3 + dropped} of 5 origins "
        f"({6 + dropped} requests: 6 forbidden, {dropped} dropped, 0 paced)",
        f"  {sites[3].origin}  robots.txt parsed (HTTP 200)",
        "      forbidden 3: line 2 (Disallow: /no) x3",
        f"  {sites[2].origin}  robots.txt parsed (HTTP 200)",
        "      forbidden 2: line 2 (Disallow: /no) x2",
        *outage,
        "  the other 2 origins: 1 request: 1 forbidden, 0 dropped, 0 paced",
    ]


@pytest_twisted.ensureDeferred
async def test_past_100_outages_the_rest_are_counted_apart_not_with_the_others(
    site: ScriptedServer, logs: pytest.LogCaptureFixture
) -> None:
    """105 origins whose robots.txt connection is refused (127.0.0.x, one port
    nothing listens on), REP_REPORT_TOP = 0: 100 listed, 5 in a line of their own."""
    port = refused_port()
    down = [f"http://127.0.0.{n}:{port}" for n in range(2, 107)]
    settings = {"REP_REPORT_TOP": 0, "REP_FETCH_RETRIES": 0, "CONCURRENT_REQUESTS": 64}
    await run_crawl([origin + "/" for origin in down] + [site.url("/")], settings)

    lines = summary(logs).splitlines()
    assert lines[0] == (
        "Crawl report: robots.txt changed what happened to 105 of 106 origins "
        "(105 requests: 0 forbidden, 105 dropped, 0 paced)"
    )
    listed = [line.split()[0] for line in lines if line.startswith("  http://")]
    assert len(listed) == 100
    assert set(listed) < set(down)
    assert lines[-2:] == [
        "  5 more origins with robots.txt unreachable: 5 requests: 0 forbidden, 5 dropped, 0 paced",
        "  the other 1 origin: none affected",
    ]
    assert site.pages() == ["/"]


# -- the file ----------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_json_report_is_one_array(
    site: ScriptedServer, site2: ScriptedServer, tmp_path: Path
) -> None:
    site.robots("User-agent: *\nDisallow: /\n")
    site2.script("/robots.txt", Reply(status=404))
    report = tmp_path / "audit" / "report.json"  # the folder is made
    await run_crawl([site.url("/a"), site2.url("/b")], {"REP_REPORT": str(report)})

    found = {r["origin"]: r for r in records(report)}
    assert set(found) == {site.origin, site2.origin}
    assert found[site.origin]["forbidden"] == 1
    assert site.pages() == []
    assert found[site2.origin]["outcome"] == "unavailable"
    assert found[site2.origin]["reason"] == "HTTP 404"
    assert site2.pages() == ["/b"]


@pytest_twisted.ensureDeferred
async def test_unwritable_report_is_one_error_and_the_crawl_goes_on(
    site: ScriptedServer, logs: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    site.robots("User-agent: *\nDisallow: /no\n")
    (tmp_path / "file").write_text("not a folder")
    report = tmp_path / "file" / "report.jsonl"
    result = await run_crawl([site.url("/no"), site.url("/yes")], {"REP_REPORT": str(report)})

    assert site.pages() == ["/yes"]
    assert result.stats["finish_reason"] == "finished"
    [error] = told(logs, logging.ERROR)
    assert error.startswith(f"Cannot write the report file REP_REPORT = {str(report)!r}")
    assert not any(r.exc_info for r in logs.records if r.levelno >= logging.ERROR)
    assert summary(logs).splitlines()[-1] == (
        f"  REP_REPORT = {str(report)!r} could not be written (see the ERROR above)"
    )


@pytest.mark.parametrize("value", ["report.csv", "report", 42])
def test_rep_report_must_name_a_json_or_jsonl_file(value: object) -> None:
    with pytest.raises(InvalidSetting, match="REP_REPORT"):
        Config.from_settings({"REP_REPORT": value})
    assert Config.from_settings({"REP_REPORT": "out/r.JSONL"}).report == "out/r.JSONL"
    assert Config.from_settings({}).report is None


# -- a broad crawl: bounded records, every origin in the file ------------------------------------


SITES = 60
BOUND = 10  # REP_CACHE_MAX_ORIGINS: a sixth of the origins


@pytest.fixture
def many_sites() -> Iterator[list[ScriptedServer]]:
    """SITES servers: SITES origins (scheme, host, port), closed side by side after the
    test (one by one, closing takes a poll interval each)."""
    sites = [ScriptedServer() for _ in range(SITES)]
    yield sites
    with ThreadPoolExecutor(max_workers=len(sites)) as pool:
        list(pool.map(ScriptedServer.close, sites))


@pytest.mark.slow  # 60 servers and 180 requests
@pytest_twisted.ensureDeferred
async def test_records_stay_bounded_and_the_file_holds_every_origin(
    many_sites: list[ScriptedServer], logs: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    sites = many_sites
    for site in sites:
        site.robots("User-agent: *\nDisallow: /private\n")
    report = tmp_path / "report.jsonl"
    held: list[int] = []  # records the report holds, after each response

    def watch(crawler: Crawler) -> None:
        def measure() -> None:
            robots = robots_service(crawler)
            assert robots is not None
            held.append(len(robots.report))

        crawler.signals.connect(measure, signal=signals.response_received, weak=False)

    # every robots.txt first, then the forbidden requests: most records are evicted between
    urls = [site.url(path) for path in ("/", "/private/x") for site in sites]
    settings = {
        "REP_REPORT": str(report),
        "REP_CACHE_MAX_ORIGINS": BOUND,
        # more requests under way than records held, fewer than the origins
        "CONCURRENT_REQUESTS": 16,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 16,  # one slot: every origin is on 127.0.0.1
        "LOG_LEVEL": "INFO",
        **PATIENT,  # many robots.txt at once: a late answer on a busy machine is no outage
    }
    result = await run_crawl(urls, settings, before=watch)

    assert [site.pages() for site in sites] == [["/"]] * SITES
    assert len(held) >= SITES
    assert max(held) == BOUND
    written = records(report)
    by_origin: dict[str, list[dict[str, Any]]] = {}
    for record in written:
        by_origin.setdefault(record["origin"], []).append(record)
    assert set(by_origin) == {site.origin for site in sites}
    for site in sites:  # an origin met again after eviction has several records: they add up
        parts = by_origin[site.origin]
        assert sum(r["forbidden"] for r in parts) == 1
        assert sum(r["fetches"] for r in parts) == site.hits("/robots.txt")
    assert sum(r["evicted"] for r in written) >= SITES - BOUND
    assert result.stats["rep/forbidden"] == SITES
    evicted = sum(r["evicted"] for r in written)
    assert summary(logs).splitlines()[:2] == [
        f"Crawl report: robots.txt changed what happened to {SITES} of {len(written)} origin "
        f"records ({SITES} requests: {SITES} forbidden, 0 dropped, 0 paced)",
        f"  more origins than REP_CACHE_MAX_ORIGINS = {BOUND}: {evicted} records left memory "
        "early; an origin met again after that has another record",
    ]


@pytest_twisted.ensureDeferred
async def test_an_origin_met_again_after_eviction_is_summed_in_the_summary(
    make_site: Callable[[], ScriptedServer], logs: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    a, b, c = make_site(), make_site(), make_site()
    for site in (a, b, c):
        site.robots("User-agent: *\nDisallow: /no\n")
    order = [a.url("/no/1"), a.url("/no/2"), b.url("/"), c.url("/"), a.url("/no/3"), a.url("/")]
    # one at a time, in this order (the highest priority first, nobody waits aside)
    requests: list[str | Request] = [
        Request(url, priority=-rank, dont_filter=True) for rank, url in enumerate(order)
    ]
    report = tmp_path / "report.jsonl"
    settings = {
        "REP_REPORT": str(report),
        "REP_CACHE_MAX_ORIGINS": 1,
        "CONCURRENT_REQUESTS": 1,
        "REP_MAX_WAITING": 0,
        "REP_FRONTIER": False,  # the requests alternate between origins in the middleware
    }
    await run_crawl(requests, settings)

    assert (a.pages(), b.pages(), c.pages()) == (["/"], ["/"], ["/"])
    written = records(report)
    assert [(r["origin"], r["forbidden"], r["evicted"]) for r in written] == [
        (a.origin, 2, True),
        (b.origin, 0, True),
        (c.origin, 0, True),
        (a.origin, 1, False),
    ]
    assert a.hits("/robots.txt") == 2  # its rules were evicted too: fetched again
    assert summary(logs).splitlines() == [
        "Crawl report: robots.txt changed what happened to 2 of 4 origin records "
        "(3 requests: 3 forbidden, 0 dropped, 0 paced)",
        "  more origins than REP_CACHE_MAX_ORIGINS = 1: 3 records left memory early; "
        "an origin met again after that has another record",
        f"  {a.origin}  robots.txt parsed (HTTP 200)",
        "      forbidden 3: line 2 (Disallow: /no) x3",
        "  the other 2 origin records: none affected",
        f"  every origin is in REP_REPORT = {str(report)!r} (4 records)",
    ]
    forbids = [line for line in told(logs) if "forbids requests" in line]
    assert len(forbids) == 2  # told again for the new record: the old one is gone
