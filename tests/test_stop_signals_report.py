"""The REP_REPORT file holds each origin's stop-signal state, read after a real crawl.

Each origin on a loopback address of its own (a download slot is a host name).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_twisted
from crawls import run_crawl
from scrapy import Request
from servers import PAGE, Reply, ScriptedServer
from test_report import records
from test_stop_signals_pages import CHALLENGE_PAGE, FAST, pages, script_pages

CASES = {
    "challenged": Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"}),
    "payment": Reply(402, b"", {"crawler-price": "USD 0.01"}),
    "blocked": Reply(403, b"", {"x-vercel-mitigated": "deny"}),
    "refusing": Reply(403, b"Forbidden"),
    "plain": Reply(200, PAGE),
}


@pytest.fixture
def sites() -> Iterator[dict[str, ScriptedServer]]:
    servers = {name: ScriptedServer(f"127.0.0.{231 + n}") for n, name in enumerate(CASES)}
    try:
        for name, site in servers.items():
            site.__enter__()
            site.robots("User-agent: *\nAllow: /\n")
            script_pages(site, CASES[name], 10)
        yield servers
    finally:
        for site in servers.values():
            site.__exit__(None, None, None)


@pytest_twisted.ensureDeferred
async def test_each_origin_s_stop_signal_state_is_in_the_file(
    sites: dict[str, ScriptedServer], tmp_path: Path
) -> None:
    report = tmp_path / "robots.jsonl"
    settings = {
        **FAST,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "REP_BLOCK_AFTER": 2,
        "REP_REPORT": str(report),
    }
    urls = [url for site in sites.values() for url in pages(site, 10)]
    result = await run_crawl(urls, settings)

    written = {record["origin"]: record for record in records(report)}
    assert len(written) == len(sites)  # one record per origin, none added
    state = {name: written[site.origin]["stop_signal"] for name, site in sites.items()}
    sent = {name: len(site.page_hits()) for name, site in sites.items()}
    assert state["plain"] is None
    assert sent["plain"] == 10
    for name in ("challenged", "payment", "blocked", "refusing"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", state[name].pop("first_at"))
        assert state[name]["slot"] == sites[name].host
        assert state[name]["not_sent"] == 10 - sent[name]  # every request accounted for
    assert state["challenged"] == {
        "slot": sites["challenged"].host,
        "kind": "challenge",
        "provider": "Cloudflare",
        "marker": "cf-mitigated: challenge",
        "price": None,
        "scheme": None,
        "answers": sent["challenged"],
        "pauses": 3,
        "probes": 3,
        "stopped": True,
        "from_cluster": False,
        "not_sent": 10 - sent["challenged"],
    }
    assert sent["challenged"] == 1 + 3  # the first answer, then 3 probes
    assert state["payment"] == {
        "slot": sites["payment"].host,
        "kind": "payment",
        "provider": "Cloudflare pay per crawl",
        "marker": "HTTP 402 + crawler-price",
        "price": "USD 0.01",
        "scheme": "crawler-price",
        "answers": 1,
        "pauses": 0,
        "probes": 0,
        "stopped": True,
        "from_cluster": False,
        "not_sent": 9,
    }
    blocked = state["blocked"]
    assert (blocked["kind"], blocked["provider"], blocked["marker"]) == (
        "block",
        "Vercel",
        "x-vercel-mitigated: deny",
    )
    assert (blocked["stopped"], blocked["pauses"], blocked["not_sent"]) == (True, 0, 9)
    refusing = state["refusing"]
    assert (refusing["kind"], refusing["provider"], refusing["marker"]) == (
        "refusal",
        "the site",
        "2 plain 403s in a row",
    )
    assert (refusing["stopped"], refusing["pauses"], refusing["probes"]) == (True, 3, 3)
    # the file adds up to the stats
    stats = result.stats
    not_sent = sum(record["not_sent"] for record in state.values() if record)
    assert not_sent == stats["rep/challenge/dropped"] + stats["rep/payment/dropped"]
    assert sum(bool(record and record["stopped"]) for record in state.values()) == (
        stats["rep/challenge/stopped"] + stats["rep/payment/stopped"]
    )


@pytest_twisted.ensureDeferred
async def test_an_origin_without_a_report_record_still_has_its_state_written(
    sites: dict[str, ScriptedServer], tmp_path: Path
) -> None:
    """dont_obey_robotstxt requests fetch no robots.txt: the report held no
    record of the origin; its stop-signal state gets one of its own."""
    site = sites["blocked"]
    report = tmp_path / "robots.json"
    urls = pages(site, 3)
    asked: list[str | Request] = [Request(url, meta={"dont_obey_robotstxt": True}) for url in urls]
    await run_crawl(asked, {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1, "REP_REPORT": str(report)})
    [record] = records(report)
    assert record["origin"] == site.origin
    assert record["outcome"] is None
    assert record["fetches"] == 0
    assert record["stop_signal"]["kind"] == "block"
    assert record["stop_signal"]["not_sent"] == 3 - len(site.page_hits())
    assert site.hits("/robots.txt") == 0
