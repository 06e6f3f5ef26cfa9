"""The stop-signal settings a user sets, in real crawls: REP_BLOCK_MARKERS,
REP_BLOCK_AFTER = 0, REP_STOP_SIGNALS = False.

Each case on a loopback address of its own (a download slot is a host name).
"""

from __future__ import annotations

import logging

import pytest
import pytest_twisted
from crawls import run_crawl
from scrapy.spidermiddlewares.httperror import HttpError
from servers import Reply, ScriptedServer
from test_stop_signals_pages import (
    CHALLENGE_PAGE,
    FAST,
    accounted,
    pages,
    script_pages,
)

from scrapy_rep import RobotsTxtUnavailable, SiteChallenged

ACME = [
    {"name": "Acme WAF", "kind": "block", "header": "X-Acme-Action", "value": "deny"},
    {"name": "Acme page", "status": [403], "body": "acme-verify"},
]
"""docs/stop-signals.md's example of rules of one's own."""


@pytest_twisted.ensureDeferred
async def test_a_rule_of_your_own_stops_an_origin(own_site: ScriptedServer) -> None:
    """REP_BLOCK_MARKERS reaches the crawl: a header rule of kind block stops
    the origin at its first answer, as a built-in block does."""
    script_pages(own_site, Reply(200, b"<html>no</html>", {"X-Acme-Action": "Deny"}), 10)
    urls = pages(own_site, 10)
    result = await run_crawl(
        urls, {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1, "REP_BLOCK_MARKERS": ACME}
    )
    assert own_site.pages() == ["/page/0"]
    accounted(result, urls, SiteChallenged)
    first = result.failures[urls[0]].value
    assert (first.provider, first.kind, first.marker) == (
        "Acme WAF",
        "block",
        "x-acme-action: deny",
    )
    assert result.stats["rep/challenge/responses/acme-waf"] == 1
    assert result.stats["rep/challenge/dropped"] == 9


@pytest_twisted.ensureDeferred
async def test_a_rule_of_your_own_given_as_json_reads_a_challenged_robots_txt(
    own_site: ScriptedServer,
) -> None:
    """A body rule (as a ``-s`` option would give it: JSON) read on robots.txt:
    no rules, never allow-all."""
    own_site.script("/robots.txt", Reply(403, b"<html>acme-verify</html>"))
    urls = pages(own_site, 3)
    settings = {
        "REP_BLOCK_MARKERS": '[{"name": "Acme page", "status": [403], "body": "acme-verify"}]'
    }
    result = await run_crawl(urls, settings)
    assert own_site.pages() == []  # a plain 403 robots.txt would allow all
    assert {result.failed_with(url) for url in urls} == {RobotsTxtUnavailable}
    assert result.stats["rep/robotstxt/outcome/challenged"] == 1


@pytest_twisted.ensureDeferred
async def test_rep_block_after_0_never_reads_plain_403s_as_a_refusal(
    own_site: ScriptedServer,
) -> None:
    """``0`` turns the count off: 30 plain 403s in a row, every page asked for."""
    script_pages(own_site, Reply(403, b"Forbidden"), 30)
    urls = pages(own_site, 30)
    result = await run_crawl(
        urls, {**FAST, "REP_BLOCK_AFTER": 0, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}
    )
    assert len(own_site.pages()) == 30
    assert {result.failed_with(url) for url in urls} == {HttpError}
    assert not any(k.startswith("rep/challenge/") for k in result.stats)


@pytest_twisted.ensureDeferred
async def test_plain_403s_are_told_as_a_refusal(
    own_site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The INFO line names the refusal and the count that read it so."""
    script_pages(own_site, Reply(403, b"Forbidden"), 6)
    caplog.set_level(logging.INFO, logger="scrapy_rep")
    await run_crawl(
        pages(own_site, 6), {**FAST, "REP_BLOCK_AFTER": 2, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}
    )
    told = [r.getMessage() for r in caplog.records if r.name == "scrapy_rep.challenges"]
    assert told[0] == (
        f"{own_site.origin} refuses this crawler (2 plain 403s in a row); "
        f"paused {FAST['REP_CHALLENGE_PAUSE']:g} s (REP_CHALLENGE_PAUSE), then one probe"
    )


@pytest_twisted.ensureDeferred
async def test_rep_stop_signals_false_leaves_the_answers_to_scrapy(
    own_site: ScriptedServer,
) -> None:
    """Off: a challenge is a 403 as Scrapy hands it, every page is asked for
    (and a challenged robots.txt is a 4xx again: unavailable, allow all)."""
    own_site.script("/robots.txt", Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"}))
    script_pages(own_site, Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"}), 10)
    urls = pages(own_site, 10)
    result = await run_crawl(
        urls, {**FAST, "REP_STOP_SIGNALS": False, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}
    )
    assert len(own_site.pages()) == 10
    assert {result.failed_with(url) for url in urls} == {HttpError}
    assert result.stats["rep/robotstxt/outcome/unavailable"] == 1
    assert not any(k.startswith(("rep/challenge/", "rep/payment/")) for k in result.stats)
