"""RobotsTxtMiddleware and the robots.txt access results of RFC 9309 §2.3.1.

Real crawls against real local servers: each test asserts what reached the
server and the ``rep/`` stats.
"""

from __future__ import annotations

import logging
from itertools import pairwise
from types import ModuleType
from typing import Any

import pytest
import pytest_twisted
from clock_steps import until
from crawls import run_crawl
from scrapy import Request
from scrapy.crawler import Crawler
from servers import Gate, Reply, ScriptedServer, refused_port
from twisted.internet.defer import ensureDeferred

from scrapy_rep import ForbiddenByRobots, RobotsTxtUnavailable
from scrapy_rep import signals as rep_signals

ROBOTS = "User-agent: *\nDisallow: /private\n"


def pages(site: ScriptedServer, prefix: str, count: int) -> list[str]:
    return [site.url(f"{prefix}/{i}") for i in range(count)]


# -- 2xx -----------------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_2xx_rules_drop_disallowed_requests_with_line_and_rule(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    site.robots("# rules\nUser-agent: *\nAllow: /private/ok\nDisallow: /private\n")
    caplog.set_level(logging.DEBUG, logger="scrapy_rep")
    result = await run_crawl([*pages(site, "/private", 3), site.url("/private/ok"), site.url("/")])

    assert site.hits("/robots.txt") == 1
    assert [p for p in site.paths() if p.startswith("/private")] == ["/private/ok"]
    assert site.hits("/") == 1
    failure = result.failures[site.url("/private/0")]
    assert isinstance(failure.value, ForbiddenByRobots)
    assert failure.value.decision.line == 4
    assert failure.value.decision.rule == "Disallow: /private"
    assert result.stats["rep/forbidden"] == 3
    assert result.stats["rep/robotstxt/response_status_count/200"] == 1
    assert result.stats["rep/robotstxt/outcome/parsed"] == 1
    assert (
        f"Forbidden by robots.txt line 4 (Disallow: /private): <GET {site.url('/private/1')}>"
        in caplog.text
    )


@pytest_twisted.ensureDeferred
async def test_2xx_html_page_has_no_rules_and_allows_all(site: ScriptedServer) -> None:
    site.script(
        "/robots.txt", Reply(body=b"<html><body>Disallow: /private is not a line</body></html>")
    )
    result = await run_crawl(pages(site, "/private", 2))
    assert site.hits("/private/0") == site.hits("/private/1") == 1
    assert "rep/forbidden" not in result.stats


# -- 3xx -----------------------------------------------------------------------------------------


def redirect_chain(site: ScriptedServer, hops: int, final: str) -> None:
    """/robots.txt -> /r1 -> ... -> /r{hops-1} -> final (absolute URL)."""
    names = ["/robots.txt"] + [f"/r{i}" for i in range(1, hops)]
    targets = [*names[1:], final]
    for name, target in zip(names, targets, strict=True):
        site.script(name, Reply(status=301, headers={"Location": target}))


@pytest_twisted.ensureDeferred
async def test_3xx_five_redirects_across_hosts_apply_the_target_rules_to_the_origin(
    site: ScriptedServer, site2: ScriptedServer
) -> None:
    site2.script("/rules.txt", Reply(body=ROBOTS.encode()))
    redirect_chain(site, 5, site2.url("/rules.txt"))
    result = await run_crawl([site.url("/private/a"), site.url("/public")])

    assert site2.hits("/rules.txt") == 1
    assert site.hits("/private/a") == 0
    assert site.hits("/public") == 1
    assert result.stats["rep/robotstxt/response_status_count/301"] == 5
    assert result.stats["rep/robotstxt/outcome/parsed"] == 1
    assert site2.hits("/robots.txt") == 0  # the target host's own robots.txt is not involved


@pytest_twisted.ensureDeferred
async def test_3xx_more_than_five_redirects_is_unavailable_and_allows_all(
    site: ScriptedServer,
) -> None:
    site.script("/rules.txt", Reply(body=b"User-agent: *\nDisallow: /\n"))
    redirect_chain(site, 6, site.url("/rules.txt"))
    result = await run_crawl([site.url("/private/a")])

    assert site.hits("/rules.txt") == 0  # the 6th redirect is not followed
    assert site.hits("/private/a") == 1
    assert result.stats["rep/robotstxt/redirects_exceeded"] == 1
    assert result.stats["rep/robotstxt/outcome/unavailable"] == 1


# -- 4xx -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [404, 403, 401, 410])
@pytest_twisted.ensureDeferred
async def test_4xx_allows_all_whatever_its_body_says(site: ScriptedServer, status: int) -> None:
    site.script("/robots.txt", Reply(status=status, body=b"User-agent: *\nDisallow: /\n"))
    result = await run_crawl(pages(site, "/private", 2))

    assert site.hits("/private/0") == site.hits("/private/1") == 1
    assert result.stats[f"rep/robotstxt/response_status_count/{status}"] == 1
    assert result.stats["rep/robotstxt/outcome/unavailable"] == 1
    assert "rep/forbidden" not in result.stats


# -- unreachable: 429, 5xx, network errors ---------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
@pytest_twisted.ensureDeferred
async def test_429_and_5xx_disallow_all_and_drop_with_a_reason(
    site: ScriptedServer, status: int
) -> None:
    site.script("/robots.txt", Reply(status=status, body=b"User-agent: *\nAllow: /\n"))
    urls = pages(site, "/page", 3)
    result = await run_crawl(urls)

    assert site.hits("/robots.txt") == 1
    assert site.hits() == 1  # nothing but robots.txt reached the server
    assert result.stats["rep/robotstxt/outcome/unreachable"] == 1
    assert result.stats["rep/unreachable/dropped"] == 3
    failure = result.failures[urls[0]]
    assert isinstance(failure.value, RobotsTxtUnavailable)
    assert failure.value.reason == f"HTTP {status}"


@pytest_twisted.ensureDeferred
async def test_5xx_is_retried_within_rep_fetch_retries_and_its_body_never_parsed(
    site: ScriptedServer,
) -> None:
    site.script("/robots.txt", Reply(status=503, body=b"User-agent: *\nAllow: /\n"))
    result = await run_crawl([site.url("/page")], {"RETRY_ENABLED": True, "REP_FETCH_RETRIES": 2})
    assert site.hits("/robots.txt") == 3
    assert site.hits("/page") == 0
    assert result.stats["rep/unreachable/dropped"] == 1


@pytest_twisted.ensureDeferred
async def test_refused_connection_disallows_all() -> None:
    url = f"http://127.0.0.1:{refused_port()}/page"
    result = await run_crawl([url])
    assert result.failed_with(url) is RobotsTxtUnavailable
    exceptions = [k for k in result.stats if k.startswith("rep/robotstxt/exception_count/")]
    assert len(exceptions) == 1  # by dotted name: Scrapy's or Twisted's, by version
    assert exceptions[0].endswith("ConnectionRefusedError")
    assert result.stats["rep/unreachable/dropped"] == 1


@pytest_twisted.ensureDeferred
async def test_timeout_uses_rep_fetch_timeout_and_disallows_all(
    site: ScriptedServer, rep_clock: ModuleType
) -> None:
    """A robots.txt that does not answer ends at REP_FETCH_TIMEOUT (60 s of
    scrapy-rep's clock, which the test moves past it), not at DOWNLOAD_TIMEOUT
    (180 s): the origin's page is dropped, the timeout counted."""
    fetch_timeout = 60.0
    never = Gate()
    site.script("/robots.txt", Reply(wait_for=never, wait_timeout=2 * fetch_timeout))
    settings = {"REP_FETCH_TIMEOUT": fetch_timeout, "DOWNLOAD_TIMEOUT": 3 * fetch_timeout}
    crawl = ensureDeferred(run_crawl([site.url("/page")], settings))
    try:
        await until(lambda: site.hits("/robots.txt"))
        [sent] = [hit.time for hit in site.log() if hit.path == "/robots.txt"]
        rep_clock.advance(max(sent + fetch_timeout + 1 - rep_clock.now(), 0.0))
        await until(lambda: crawl.called, within=fetch_timeout / 4)
    finally:
        never.set()
    result = await crawl
    assert site.hits("/page") == 0
    assert result.failed_with(site.url("/page")) is RobotsTxtUnavailable
    assert any("TimeoutError" in k for k in result.stats), result.rep_stats()


@pytest_twisted.ensureDeferred
async def test_rep_unreachable_allow_lets_requests_through(site: ScriptedServer) -> None:
    site.script("/robots.txt", Reply(status=503))
    result = await run_crawl(pages(site, "/page", 2), {"REP_UNREACHABLE": "allow"})
    assert site.hits("/page/0") == site.hits("/page/1") == 1
    assert result.stats["rep/unreachable/allowed"] == 2


# -- size cap ------------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_body_is_cut_at_rep_max_size_and_the_download_stopped(site: ScriptedServer) -> None:
    head = b"User-agent: *\nDisallow: /early\n"
    filler = b"# " + b"x" * 98 + b"\n"
    body = head + filler * 6000 + b"Disallow: /late\n"  # about 600 kB
    site.script("/robots.txt", Reply(body=body, chunk_size=16_384))
    responses: list[Any] = []

    def listen(crawler: Crawler) -> None:
        def parsed(robots: Any, origin: str, response: Any) -> None:
            responses.append(response)

        crawler.signals.connect(parsed, signal=rep_signals.robotstxt_parsed, weak=False)

    result = await run_crawl(
        [site.url("/early"), site.url("/late")], {"REP_MAX_SIZE": 100_000}, before=listen
    )
    assert site.hits("/early") == 0
    assert site.hits("/late") == 1  # the rule after the cap is not read
    assert result.stats["rep/robotstxt/truncated"] == 1
    (response,) = responses
    assert "download_stopped" in response.flags
    assert len(response.body) < len(body) // 2


# -- per-origin, per-request ---------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_each_port_is_its_own_origin(site: ScriptedServer, site2: ScriptedServer) -> None:
    site.robots("User-agent: *\nDisallow: /a\n")
    site2.robots("User-agent: *\nDisallow: /b\n")
    await run_crawl([site.url("/a"), site.url("/b"), site2.url("/a"), site2.url("/b")])
    assert (site.hits("/robots.txt"), site2.hits("/robots.txt")) == (1, 1)
    assert (site.hits("/a"), site.hits("/b")) == (0, 1)
    assert (site2.hits("/a"), site2.hits("/b")) == (1, 0)


@pytest_twisted.ensureDeferred
async def test_meta_dont_obey_robotstxt_and_rep_user_agent(site: ScriptedServer) -> None:
    site.robots("User-agent: ExampleBot\nDisallow: /x\n\nUser-agent: OtherBot\nDisallow: /y\n")
    await run_crawl(
        [
            Request(site.url("/x/skipped"), meta={"dont_obey_robotstxt": True}),
            site.url("/x/own"),
            site.url("/y/own"),
            Request(site.url("/x/other"), meta={"rep_user_agent": "OtherBot/2.0"}),
            Request(site.url("/y/other"), meta={"rep_user_agent": "OtherBot/2.0"}),
        ]
    )
    assert site.hits("/x/skipped") == 1
    assert (site.hits("/x/own"), site.hits("/y/own")) == (0, 1)
    assert (site.hits("/x/other"), site.hits("/y/other")) == (1, 0)


@pytest_twisted.ensureDeferred
async def test_token_comes_from_robotstxt_user_agent(site: ScriptedServer) -> None:
    site.robots("User-agent: SpecialBot\nDisallow: /\n")
    await run_crawl([site.url("/a")], {"ROBOTSTXT_USER_AGENT": "SpecialBot"})
    assert site.hits("/a") == 0


@pytest_twisted.ensureDeferred
async def test_dry_run_lets_everything_through_and_counts(site: ScriptedServer) -> None:
    site.robots(ROBOTS)
    result = await run_crawl(pages(site, "/private", 3), {"REP_DRY_RUN": True})
    assert all(site.hits(f"/private/{i}") == 1 for i in range(3))
    assert result.stats["rep/dry_run/forbidden"] == 3
    assert "rep/forbidden" not in result.stats  # would-be drops are not counted as drops
    assert not result.failures


@pytest_twisted.ensureDeferred
async def test_signals_forbidden_parsed_and_sitemaps_once_per_origin(
    site: ScriptedServer,
) -> None:
    site.robots(ROBOTS + "Sitemap: /s1.xml\nSitemap: /s1.xml\nSitemap: http://other.test/s2.xml\n")
    seen: dict[str, list[Any]] = {"forbidden": [], "parsed": [], "sitemaps": []}

    def listen(crawler: Crawler) -> None:
        def forbidden(request: Request, decision: Any, origin: str) -> None:
            seen["forbidden"].append((request.url, decision.rule, origin))

        def parsed(robots: Any, origin: str, response: Any) -> None:
            seen["parsed"].append((origin, response.status))

        def sitemaps(urls: tuple[str, ...], origin: str) -> None:
            seen["sitemaps"].append((urls, origin))

        for handler, signal in (
            (forbidden, rep_signals.request_forbidden),
            (parsed, rep_signals.robotstxt_parsed),
            (sitemaps, rep_signals.sitemaps_found),
        ):
            crawler.signals.connect(handler, signal=signal, weak=False)

    await run_crawl([site.url("/private/a"), site.url("/b"), site.url("/c")], before=listen)
    assert seen["forbidden"] == [(site.url("/private/a"), "Disallow: /private", site.origin)]
    assert seen["parsed"] == [(site.origin, 200)]
    assert seen["sitemaps"] == [((site.url("/s1.xml"), "http://other.test/s2.xml"), site.origin)]


@pytest_twisted.ensureDeferred
async def test_scrapy_robots_parsed_signal_gets_a_scrapy_robot_parser(
    site: ScriptedServer,
) -> None:
    from scrapy import signals

    if not hasattr(signals, "robots_parsed"):
        pytest.skip("Scrapy < 2.18 has no robots_parsed signal")
    site.robots("User-agent: *\nDisallow: /private\nCrawl-delay: 0.01\n")
    verdicts: list[Any] = []

    def listen(crawler: Crawler) -> None:
        def parsed(robotparser: Any, request: Request) -> None:
            verdicts.append(
                (
                    robotparser.allowed(site.url("/private"), "ExampleBot"),
                    robotparser.allowed(site.url("/public"), b"ExampleBot"),
                    robotparser.crawl_delay("ExampleBot"),
                )
            )

        crawler.signals.connect(parsed, signal=signals.robots_parsed, weak=False)

    await run_crawl([site.url("/")], before=listen)
    assert verdicts == [(False, True, 0.01)]


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_capped_crawl_delay_warns_once_and_counts(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    site.robots("User-agent: *\nCrawl-delay: 120\n")
    result = await run_crawl(pages(site, "/p", 3), {"REP_MAX_CRAWL_DELAY": 0.2})
    assert result.stats["rep/crawl_delay/applied"] == 1
    assert result.stats["rep/crawl_delay/capped"] == 1
    warnings = [r for r in caplog.records if "REP_MAX_CRAWL_DELAY" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    times = sorted(hit.time for hit in site.log() if hit.path.startswith("/p/"))
    assert len(times) == 3
    assert min(b - a for a, b in pairwise(times)) >= 0.19


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_request_rate_counts_as_a_delay(site: ScriptedServer) -> None:
    site.robots("User-agent: *\nRequest-rate: 1/0.3\n")
    result = await run_crawl(pages(site, "/p", 3))
    assert result.stats["rep/crawl_delay/applied"] == 1
    times = sorted(hit.time for hit in site.log() if hit.path.startswith("/p/"))
    assert min(b - a for a, b in pairwise(times)) >= 0.29


@pytest_twisted.ensureDeferred
async def test_rep_obey_crawl_delay_false_ignores_it(site: ScriptedServer) -> None:
    site.robots("User-agent: *\nCrawl-delay: 30\n")
    result = await run_crawl(pages(site, "/p", 3), {"REP_OBEY_CRAWL_DELAY": False})
    assert all(site.hits(f"/p/{i}") == 1 for i in range(3))
    assert "rep/crawl_delay/applied" not in result.stats


@pytest_twisted.ensureDeferred
async def test_port_0_is_an_origin_of_its_own() -> None:
    """http://h:0/ is not http://h/: its robots.txt is asked of port 0 (where
    nothing can answer), never taken from the port-80 service."""
    result = await run_crawl(["http://127.0.0.1:0/a"])
    failure = result.failures["http://127.0.0.1:0/a"].value
    assert isinstance(failure, RobotsTxtUnavailable)
    assert failure.origin == "http://127.0.0.1:0"
    assert result.stats["rep/robotstxt/outcome/unreachable"] == 1


@pytest_twisted.ensureDeferred
async def test_an_evicted_unreachable_origin_keeps_its_backoff(
    site: ScriptedServer, site2: ScriptedServer
) -> None:
    """With room for one origin, the 503 origin is pushed out by the other one
    each time, but its robots.txt is not asked again before REP_RETRY_MIN."""
    site.script("/robots.txt", Reply(status=503))
    urls = [server.url(f"/{i}") for i in range(3) for server in (site, site2)]
    # REP_FRONTIER off: the requests alternate between the origins in the middleware
    settings = {"REP_CACHE_MAX_ORIGINS": 1, "CONCURRENT_REQUESTS": 1, "REP_MAX_WAITING": 0}
    result = await run_crawl(urls, {**settings, "REP_FRONTIER": False})
    assert site.hits("/robots.txt") == 1
    assert site2.hits("/robots.txt") == 3  # a parsed file is simply fetched again
    assert all(result.failed_with(site.url(f"/{i}")) is RobotsTxtUnavailable for i in range(3))
    assert sorted(site2.pages()) == ["/0", "/1", "/2"]


@pytest.mark.parametrize(
    "location", ["http://[", "http://127.0.0.1:99999/robots.txt", "ftp://example.com/r", "//"]
)
@pytest_twisted.ensureDeferred
async def test_an_unusable_location_is_no_robots_txt_not_an_error(
    site: ScriptedServer, location: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A redirect that cannot be followed leads to no robots.txt (unavailable:
    everything allowed, §2.3.1.2), with no ERROR and no traceback."""
    site.script("/robots.txt", Reply(status=301, headers={"Location": location}))
    with caplog.at_level(logging.DEBUG):
        result = await run_crawl([site.url("/a")])
    assert site.hits("/a") == 1
    assert result.stats["rep/robotstxt/outcome/unavailable"] == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest_twisted.ensureDeferred
async def test_requests_robots_txt_does_not_cover_pass_untouched(site: ScriptedServer) -> None:
    """A data: URL has no origin robots.txt could speak for: it is downloaded as
    without scrapy-rep, no robots.txt is asked for, nothing is counted."""
    site.robots("User-agent: *\nDisallow: /\n")
    result = await run_crawl(["data:text/plain,hello", site.url("/a")])
    assert result.responses["data:text/plain,hello"].body == b"hello"
    assert result.failed_with(site.url("/a")) is ForbiddenByRobots
    assert result.stats["rep/robotstxt/request_count"] == 1
    assert result.stats["rep/forbidden"] == 1
