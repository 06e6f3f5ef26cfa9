"""robots.txt answered with a challenge, a block or a price: not a robots.txt.

Each case is an origin of its own, on its own loopback address (127.0.0.x).
Before: a 403 challenge read as "unavailable" (allow all), and a 202 AWS WAF
challenge page was parsed as an empty robots.txt (allow all).
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_twisted
from clock_steps import until
from crawls import run_crawl, stat_of
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import Response
from servers import PAGE, Gate, Reply, ScriptedServer
from twisted.internet.defer import ensureDeferred

from scrapy_rep import RobotsTxtUnavailable

CHALLENGE_PAGE = b"<!DOCTYPE html><html><head><title>Just a moment...</title></head></html>"
ROBOTS = b"User-agent: *\nDisallow: /private\n"
_ADDRESSES = itertools.count(2)


@pytest.fixture
def own_site() -> Iterator[ScriptedServer]:
    """A server on a loopback address of its own (127.0.0.2, 127.0.0.3, ...)."""
    with ScriptedServer(f"127.0.0.{next(_ADDRESSES) % 250 + 2}") as server:
        yield server


ROBOTS_CASES = [
    pytest.param(Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"}), id="cloudflare-403"),
    pytest.param(Reply(202, CHALLENGE_PAGE, {"x-amzn-waf-action": "challenge"}), id="aws-waf-202"),
    pytest.param(Reply(429, CHALLENGE_PAGE, {"x-vercel-mitigated": "challenge"}), id="vercel-429"),
    pytest.param(Reply(403, b"", {"x-vercel-mitigated": "deny"}), id="vercel-deny"),
    pytest.param(Reply(402, b"", {"crawler-price": "USD 0.01"}), id="pay-per-crawl"),
    pytest.param(
        Reply(200, b'<script src="/.within.website/x/cmd/anubis/static/js/main.mjs"></script>'),
        id="anubis-200",
    ),
]


@pytest.mark.parametrize("reply", ROBOTS_CASES)
@pytest_twisted.ensureDeferred
async def test_robots_txt_under_a_challenge_is_never_allow_all(
    own_site: ScriptedServer, reply: Reply
) -> None:
    own_site.script("/robots.txt", reply)
    urls = [own_site.url(f"/page/{i}") for i in range(5)]
    result = await run_crawl(urls, {"REP_FETCH_RETRIES": 2})
    assert own_site.pages() == []  # 0 of 5 fetched (before: 5 of 5)
    assert own_site.hits("/robots.txt") == 1  # not retried within the fetch
    assert all(result.failed_with(url) is RobotsTxtUnavailable for url in urls)
    stats = result.stats
    assert stats["rep/robotstxt/outcome/challenged"] == 1
    assert stats.get("rep/robotstxt/outcome/unavailable") is None
    assert stats.get("rep/robotstxt/outcome/parsed") is None
    assert stats["rep/unreachable/dropped"] == 5


@pytest_twisted.ensureDeferred
async def test_under_rep_unreachable_allow_a_challenge_still_keeps_no_rules(
    own_site: ScriptedServer,
) -> None:
    """REP_UNREACHABLE decides, as for an unreachable robots.txt."""
    own_site.script("/robots.txt", Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"}))
    result = await run_crawl([own_site.url("/a")], {"REP_UNREACHABLE": "allow"})
    assert own_site.pages() == ["/a"]
    assert result.stats["rep/unreachable/allowed"] == 1


# myanimelist.net's robots.txt (the corpus), which disallows Imperva's resource path
IMPERVA_SITE_ROBOTS = (
    b"User-agent: *\nDisallow: /admin/\nDisallow: /_Incapsula_Resource\nDisallow: /mymessages.php\n"
)
NEGATIVE_ROBOTS = [
    pytest.param({"cf-ray": "8a1b2c3d4e5f-AMS", "Server": "cloudflare"}, id="cloudflare-served"),
    pytest.param(
        {
            "Content-Security-Policy": "script-src 'self' https://www.google.com/recaptcha/ "
            "https://cdnjs.cloudflare.com/"
        },
        id="csp-naming-cloudflare-and-recaptcha",
    ),
    pytest.param({"x-datadome": "protected"}, id="x-datadome-on-200"),
    pytest.param({}, id="disallowing-incapsula-resource"),
]


@pytest.mark.parametrize("headers", NEGATIVE_ROBOTS)
@pytest_twisted.ensureDeferred
async def test_a_robots_txt_served_behind_a_waf_is_read_as_such(
    own_site: ScriptedServer, headers: dict[str, str]
) -> None:
    """The negative set on robots.txt: its rules apply (before the Imperva rule
    was narrowed, myanimelist.net's robots.txt read as a challenge: every
    request dropped)."""
    own_site.script("/robots.txt", Reply(200, IMPERVA_SITE_ROBOTS, headers))
    urls = [own_site.url("/admin/x"), own_site.url("/anime/1")]
    result = await run_crawl(urls)
    assert own_site.pages() == ["/anime/1"]
    assert result.stats["rep/robotstxt/outcome/parsed"] == 1
    assert result.stats["rep/forbidden"] == 1
    assert not any(k.startswith(("rep/challenge/", "rep/payment/")) for k in result.stats)


def then(*steps: tuple[str, list[str]]) -> Any:
    plan = dict(steps)

    def follow(response: Response) -> list[Request]:
        path = "/" + response.url.split("/", 3)[-1]
        return [Request(url, dont_filter=True) for url in plan.get(path, [])]

    return follow


@pytest.mark.parametrize(
    "challenge",
    [
        Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"}),
        Reply(202, CHALLENGE_PAGE, {"x-amzn-waf-action": "challenge"}),
    ],
    ids=["cloudflare-403", "aws-waf-202"],
)
@pytest_twisted.ensureDeferred
async def test_a_challenge_on_refresh_keeps_the_good_rules(
    own_site: ScriptedServer, challenge: Reply, rep_clock: ModuleType
) -> None:
    """Before: a 403 challenge on refresh replaced good rules with allow-all.
    (The rules expire when the test moves scrapy-rep's clock past
    REP_CACHE_TTL, after /first; /next answers once the challenge is known.)"""
    known = Gate()
    own_site.script("/robots.txt", [Reply(body=ROBOTS), challenge])
    own_site.script("/next", Reply(body=PAGE, wait_for=known, wait_timeout=60))
    follow = then(
        ("/first", [own_site.url("/open")]),  # expired: a refresh starts
        ("/open", [own_site.url("/next")]),
        ("/next", [own_site.url("/private/1")]),  # the challenge is known by now
    )
    crawlers: list[Crawler] = []

    def expire_after_first(response: Response) -> list[Request]:
        if urlsplit(response.url).path == "/first":
            rep_clock.advance(TTL + 1)
        requests: list[Request] = follow(response)
        return requests

    crawl = ensureDeferred(
        run_crawl(
            [own_site.url("/first")],
            {"REP_CACHE_TTL": TTL, "REP_CACHE_MIN_TTL": 0, "REP_RETRY_MIN": 600},
            follow=expire_after_first,
            before=crawlers.append,
        )
    )
    try:
        await until(lambda: stat_of(crawlers, "rep/robotstxt/outcome/challenged") == 1)
    finally:
        known.set()
    result = await crawl
    assert own_site.hits("/robots.txt") == 2
    assert own_site.hits("/private/1") == 0  # the last good rules still apply
    assert result.stats["rep/robotstxt/outcome/challenged"] == 1
    assert result.stats["rep/robotstxt/stale_served"] == 1
    assert result.stats["rep/forbidden"] == 1


TTL = 600.0  # of scrapy-rep's clock: the rules expire only when the test moves it


def test_scrapy_robots_shows_a_challenged_robots_txt(
    own_site: ScriptedServer, tmp_path: Any
) -> None:
    """``scrapy robots URL``, as a user runs it."""
    own_site.script("/robots.txt", Reply(403, CHALLENGE_PAGE, {"cf-mitigated": "challenge"}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("scrapy")), "robots", own_site.url("/a")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert re.search(
        r"fetched +challenged \(HTTP 403, challenge by Cloudflare \(cf-mitigated: challenge\)\): "
        r"not a robots.txt, read as unreachable",
        result.stdout,
    ), result.stdout
    assert f"FORBIDDEN {own_site.url('/a')} robots.txt unreachable" in " ".join(
        result.stdout.split()
    )
