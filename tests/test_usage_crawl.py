"""UsageMiddleware in real crawls against a local server: REP_PURPOSES declared,
each mechanism's statement read from what the server sends, in both actions.

Assertions are on what reached the server (was a page downloaded?), what reached
the spider (its callback or its errback), response.meta["rep_usage"] and the
rep/usage/ stats.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import pytest_twisted
from crawls import PATIENT, loopback_names, run_crawl
from scrapy import Request, signals
from scrapy.crawler import Crawler
from servers import Reply, ScriptedServer

from scrapy_rep import UsageDenied, UsageMiddleware
from scrapy_rep import signals as rep_signals

TRAIN = {"REP_PURPOSES": ["train-ai"]}
# The issue's site: robots.txt denies training but for /open/, where the pages
# deny it themselves, each by another mechanism.
ROBOTS = """User-agent: *
Disallow: /private/
Content-Usage: train-ai=n
Content-Usage: /open/ train-ai=y
"""
NOAI_PAGE = b'<html><head><meta name="robots" content="noai"></head><body>x</body></html>'


def html(head: str = "") -> bytes:
    return f"<html><head><title>t</title>{head}</head><body>page</body></html>".encode()


def issue_site(site: ScriptedServer) -> dict[str, str]:
    """The pages of the issue's example; returns {name: url}."""
    site.robots(ROBOTS)
    site.script("/open/tdm", Reply(body=html(), headers={"tdm-reservation": "1"}))
    site.script("/open/header", Reply(body=html(), headers={"Content-Usage": "train-ai=n"}))
    site.script("/open/noai", Reply(body=NOAI_PAGE))
    site.script("/open/plain", Reply(body=html()))
    names = ("closed", "open/tdm", "open/header", "open/noai", "open/plain", "private/x")
    return {name: site.url(f"/{name}") for name in names}


def usage_of(result: Any, url: str) -> Any:
    return result.responses[url].meta["rep_usage"]


@pytest_twisted.ensureDeferred
async def test_issue_site_annotated_every_page_downloaded_and_reaches_the_spider(
    site: ScriptedServer,
) -> None:
    """REP_USAGE_ACTION = "annotate" (the default): every allowed page is downloaded
    and reaches the spider, with what each mechanism says in rep_usage."""
    urls = issue_site(site)
    result = await run_crawl(list(urls.values()), TRAIN)

    assert site.hits("/private/x") == 0  # Disallow: fetch rules are unchanged
    for name in ("closed", "open/tdm", "open/header", "open/noai", "open/plain"):
        assert site.hits(f"/{name}") == 1, name
    assert usage_of(result, urls["closed"]) == {"train-ai": False}
    assert usage_of(result, urls["open/tdm"]) == {"train-ai": False}
    assert usage_of(result, urls["open/header"]) == {"train-ai": False}
    assert usage_of(result, urls["open/noai"]) == {"train-ai": False}
    assert usage_of(result, urls["open/plain"]) == {"train-ai": True}
    reasons = result.responses[urls["open/tdm"]].meta["rep_usage_reasons"]
    assert reasons == {"train-ai": ("tdm-reservation header: 1",)}
    reasons = result.responses[urls["closed"]].meta["rep_usage_reasons"]
    assert reasons == {"train-ai": ("robots.txt line 3: Content-Usage: train-ai=n",)}
    reasons = result.responses[urls["open/plain"]].meta["rep_usage_reasons"]
    assert reasons == {"train-ai": ("robots.txt line 4: Content-Usage: /open/ train-ai=y",)}
    assert result.responses[urls["open/noai"]].meta["rep_usage_reasons"] == {
        "train-ai": ('<meta name="robots"> noai',)
    }
    stats = result.stats
    assert stats["rep/usage/train-ai/denied"] == 4
    assert stats["rep/usage/train-ai/allowed"] == 1
    assert stats["rep/usage/denied"] == 4
    assert stats["rep/usage/denied_by/robotstxt"] == 1
    assert stats["rep/usage/denied_by/tdmrep"] == 1
    assert stats["rep/usage/denied_by/content-usage"] == 1
    assert stats["rep/usage/denied_by/noai"] == 1
    assert not any(key.startswith("rep/usage/dropped") for key in stats)
    assert site.hits("/.well-known/tdmrep.json") == 1  # train-ai is TDMRep's
    assert stats["rep/usage/tdmrep/outcome/absent"] == 1


@pytest_twisted.ensureDeferred
async def test_issue_site_dropped_robots_denial_not_downloaded_page_denials_not_delivered(
    site: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """REP_USAGE_ACTION = "drop": /closed is not downloaded (robots.txt denies
    train-ai there); the /open/ pages that deny it themselves are downloaded but
    reach the errback with UsageDenied; /open/plain reaches the spider."""
    urls = issue_site(site)
    caplog.set_level(logging.INFO, logger="scrapy_rep")
    result = await run_crawl(list(urls.values()), {**TRAIN, "REP_USAGE_ACTION": "drop"})

    assert site.hits("/closed") == 0
    assert site.hits("/private/x") == 0
    for name in ("open/tdm", "open/header", "open/noai", "open/plain"):
        assert site.hits(f"/{name}") == 1, name
    assert list(result.responses) == [urls["open/plain"]]
    assert usage_of(result, urls["open/plain"]) == {"train-ai": True}
    for name in ("closed", "open/tdm", "open/header", "open/noai"):
        assert result.failed_with(urls[name]) is UsageDenied, name
    closed = result.failures[urls["closed"]].value
    assert closed.response is None
    assert closed.usage == {"train-ai": False}
    assert closed.reasons == {"train-ai": ("robots.txt line 3: Content-Usage: train-ai=n",)}
    assert str(closed) == (
        "Usage preferences deny train-ai: robots.txt line 3: Content-Usage: train-ai=n"
    )
    assert result.failures[urls["open/header"]].value.response.status == 200
    stats = result.stats
    assert stats["rep/usage/dropped/request"] == 1
    assert stats["rep/usage/dropped/response"] == 3
    # once per origin and stage at INFO
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    denied = [message for message in infos if message.startswith("Usage preferences of")]
    assert len(denied) == 2, denied
    assert "not downloaded (REP_USAGE_ACTION = 'drop')" in denied[0]


@pytest_twisted.ensureDeferred
async def test_issue_site_dropped_on_the_oldest_scrapy_too(site: ScriptedServer) -> None:
    """The same with a spider whose callback yields items: nothing of a dropped
    page's reaches the item pipeline (the spider never sees the page)."""
    urls = issue_site(site)
    items: list[dict[str, Any]] = []

    def before(crawler: Crawler) -> None:
        crawler.signals.connect(lambda item, **_: items.append(item), signal="item_scraped")

    result = await run_crawl(
        list(urls.values()), {**TRAIN, "REP_USAGE_ACTION": "drop"}, before=before
    )
    assert list(result.responses) == [urls["open/plain"]]


@pytest_twisted.ensureDeferred
async def test_usage_denied_signal_names_request_response_and_reasons(
    site: ScriptedServer,
) -> None:
    """usage_denied is sent for every request or response whose preferences deny
    every declared purpose, in both actions."""
    urls = issue_site(site)
    seen: list[tuple[str, bool, dict[str, Any]]] = []

    def before(crawler: Crawler) -> None:
        def denied(request: Request, response: Any, usage: Any, reasons: Any, origin: str) -> None:
            assert origin == site.origin
            seen.append((request.url, response is None, usage))

        crawler.signals.connect(denied, signal=rep_signals.usage_denied, weak=False)

    await run_crawl(list(urls.values()), {**TRAIN, "REP_USAGE_ACTION": "drop"}, before=before)
    assert sorted(seen) == sorted(
        [
            (urls["closed"], True, {"train-ai": False}),
            (urls["open/tdm"], False, {"train-ai": False}),
            (urls["open/header"], False, {"train-ai": False}),
            (urls["open/noai"], False, {"train-ai": False}),
        ]
    )


@pytest_twisted.ensureDeferred
async def test_a_tag_repeated_100_times_is_one_reason(site: ScriptedServer) -> None:
    """100 identical robots meta tags and two identical X-Robots-Tag lines: each
    place is named once per purpose, in the order read."""
    site.robots("User-agent: *\nAllow: /\n")
    head = '<meta name="robots" content="noai, noimageai">' * 100
    headers = [("X-Robots-Tag", "noai"), ("X-Robots-Tag", "noai")]
    site.script("/flood", Reply(body=html(head), headers=headers))
    purposes = {"REP_PURPOSES": ["train-ai", "ai-input"]}
    result = await run_crawl([site.url("/flood")], purposes)
    meta = result.responses[site.url("/flood")].meta
    assert meta["rep_usage"] == {"train-ai": False, "ai-input": False}
    once = ('<meta name="robots"> noai', "X-Robots-Tag noai")
    assert meta["rep_usage_reasons"] == {"train-ai": once, "ai-input": once}


@pytest_twisted.ensureDeferred
async def test_no_purposes_no_middleware_nothing_fetched(site: ScriptedServer) -> None:
    """Without REP_PURPOSES the middleware is not enabled: no tdmrep.json, no meta key."""
    urls = issue_site(site)
    result = await run_crawl(list(urls.values()))
    assert site.hits("/.well-known/tdmrep.json") == 0
    assert all("rep_usage" not in r.meta for r in result.responses.values())
    assert not any(key.startswith("rep/usage") for key in result.stats)
    middlewares = result.crawler.settings.getdict("DOWNLOADER_MIDDLEWARES")
    assert "scrapy_rep.UsageMiddleware" not in middlewares


@pytest_twisted.ensureDeferred
async def test_search_alone_fetches_no_tdmrep_json(site: ScriptedServer) -> None:
    """TDMRep does not govern search: a crawl for search alone never asks for
    tdmrep.json, and tdm-reservation says nothing to it."""
    site.robots("User-agent: *\nContent-Signal: search=yes, ai-train=no\nAllow: /\n")
    site.script("/a", Reply(body=html(), headers={"tdm-reservation": "1"}))
    result = await run_crawl([site.url("/a")], {"REP_PURPOSES": ["search"]})
    assert site.hits("/.well-known/tdmrep.json") == 0
    assert usage_of(result, site.url("/a")) == {"search": True}


# -- TDMRep: tdmrep.json -----------------------------------------------------------------


def json_reply(body: bytes) -> Reply:
    return Reply(body=body, headers={"Content-Type": "application/json"})


TDMREP_JSON = b"""[
  {"location": "/articles/free/*", "tdm-reservation": 0},
  {"location": "/articles/*", "tdm-reservation": 1, "tdm-policy": "https://x.test/p.json"},
  {"location": "/articles/free/never-seen", "tdm-reservation": 1}
]"""


@pytest_twisted.ensureDeferred
async def test_tdmrep_json_first_matching_rule_in_file_order_fetched_once(
    site: ScriptedServer,
) -> None:
    """TDMRep §3.2: the first rule whose location matches wins (array order, not
    the longest); the file is fetched once per origin however many pages; a page
    header supersedes the file; a page without one keeps the file's value."""
    site.robots("User-agent: *\nAllow: /\n")
    site.script("/.well-known/tdmrep.json", json_reply(TDMREP_JSON))
    site.script("/articles/override", Reply(body=html(), headers={"tdm-reservation": "0"}))
    paths = ["/articles/free/never-seen", "/articles/a", "/articles/override", "/other"]
    result = await run_crawl(
        [site.url(p) for p in paths], {"REP_PURPOSES": ["train-ai", "ai-input"]}
    )
    assert site.hits("/.well-known/tdmrep.json") == 1
    assert usage_of(result, site.url(paths[0])) == {"train-ai": True, "ai-input": True}
    assert usage_of(result, site.url(paths[1])) == {"train-ai": False, "ai-input": False}
    assert usage_of(result, site.url(paths[2])) == {"train-ai": True, "ai-input": True}
    assert usage_of(result, site.url(paths[3])) == {"train-ai": None, "ai-input": None}
    reasons = result.responses[site.url(paths[1])].meta["rep_usage_reasons"]
    assert reasons["train-ai"] == ("tdmrep.json rule 2 (location /articles/*): tdm-reservation 1",)
    assert result.stats["rep/usage/tdmrep/outcome/parsed"] == 1


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        (json_reply(b"[{"), "invalid"),
        (json_reply(b"[" * 200_000), "invalid"),  # deeper than json can go
        (json_reply(b'{"location": "/", "tdm-reservation": 1}'), "invalid"),
        (json_reply(b"\xff\xfe\x00garbage"), "invalid"),
        (json_reply(b"[" + b'{"location": "/", "tdm-reservation": 1},' * 30_000), "too_large"),
        (Reply(status=404, body=b"[]"), "absent"),
        (Reply(body=b"<html>Not found</html>"), "absent"),  # a "soft 404"
        (Reply(status=503), "error"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_tdmrep_json_unusable_answers_never_raise_and_state_nothing(
    site: ScriptedServer, reply: Reply, outcome: str
) -> None:
    """Broken JSON, JSON of another shape, a body past REP_MAX_SIZE, a 404, a 503:
    the crawl goes on, the file states nothing, the outcome is counted."""
    site.robots("User-agent: *\nAllow: /\n")
    site.script("/.well-known/tdmrep.json", reply)
    result = await run_crawl([site.url("/a")], TRAIN)
    assert usage_of(result, site.url("/a")) == {"train-ai": None}
    assert result.stats[f"rep/usage/tdmrep/outcome/{outcome}"] == 1
    assert not result.failures


@pytest_twisted.ensureDeferred
async def test_hostile_headers_never_raise(site: ScriptedServer) -> None:
    """Any bytes in the usage headers: a statement that cannot be read says nothing."""
    site.robots("User-agent: *\nAllow: /\n")
    site.script(
        "/a",
        Reply(
            body=html(),
            headers=[  # two lines of 9,000: together past MAX_FIELD, so they say nothing
                ("Content-Usage", "train-ai=n, " + "x" * 9_000),
                ("Content-Usage", "x" * 9_000),
                (
                    "Content-Signal",
                    "ai-train=\udcff".encode("utf-8", "surrogateescape").decode("latin-1"),
                ),
                ("tdm-reservation", "2"),
                ("X-Robots-Tag", "examplebot: noai"),
            ],
        ),
    )
    site.script(
        "/b",
        Reply(body=html(), headers=[("Content-Usage", "train-ai=n, TRAIN-AI=y")]),
    )
    result = await run_crawl([site.url("/a"), site.url("/b")], TRAIN)
    assert usage_of(result, site.url("/a")) == {"train-ai": False}
    assert result.responses[site.url("/a")].meta["rep_usage_reasons"] == {
        "train-ai": ("X-Robots-Tag noai",)
    }
    assert usage_of(result, site.url("/b")) == {"train-ai": None}  # uppercase key: no statement


# -- bounded per-origin state ---------------------------------------------------------------

USAGE_ROBOTS = "User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /open/ train-ai=y\n"
ORIGINS = 200
BOUND = 20


@pytest.mark.slow  # hundreds of origins
@pytest_twisted.ensureDeferred
async def test_broad_crawl_keeps_usage_state_within_rep_cache_max_origins(
    site: ScriptedServer,
) -> None:
    """With REP_PURPOSES in a broad crawl: the tdmrep.json cache and the
    once-per-origin log memory stay within REP_CACHE_MAX_ORIGINS, and no request
    is left waiting or remembered."""
    site.robots(USAGE_ROBOTS)
    site.script(
        "/.well-known/tdmrep.json", json_reply(b'[{"location": "/open/x", "tdm-reservation": 1}]')
    )
    urls = [
        f"http://o{i}.test:{site.port}/{page}" for i in range(ORIGINS) for page in ("a", "open/x")
    ]
    held: dict[str, Any] = {}

    def measure(crawler: Crawler) -> None:
        def closed(spider: Any) -> None:
            downloader = crawler.engine.downloader  # type: ignore[union-attr]
            usage = next(
                m for m in downloader.middleware.middlewares if isinstance(m, UsageMiddleware)
            )
            held.update(
                tdmrep=len(usage._tdmrep._files),
                logged=len(usage._logged),
                fetches=len(usage._tdmrep._fetches),
                origin_keys=usage._keys._size,
                pending=len(usage._pending),
            )

        crawler.signals.connect(closed, signal=signals.spider_closed, weak=False)

    with loopback_names():
        result = await run_crawl(
            urls,
            {
                **TRAIN,
                "REP_CACHE_MAX_ORIGINS": BOUND,
                "REP_USAGE_ACTION": "drop",
                "CONCURRENT_REQUESTS": 64,
                "LOG_LEVEL": "INFO",
                **PATIENT,
            },
            before=measure,
        )
    assert len(result.failures) == len(urls)  # robots.txt or tdmrep.json denies each
    assert result.stats["rep/usage/dropped/request"] == ORIGINS
    assert result.stats["rep/usage/dropped/response"] == ORIGINS
    assert held["tdmrep"] <= BOUND
    assert held["logged"] <= BOUND
    assert held["origin_keys"] <= BOUND
    assert held["fetches"] == held["pending"] == 0


# -- page-level mechanisms, the crawler's own names, opt-outs ----------------------------------


@pytest_twisted.ensureDeferred
async def test_page_mechanisms_for_the_crawlers_own_token_and_images(site: ScriptedServer) -> None:
    """<meta name="examplebot"> and X-Robots-Tag "examplebot:" speak to our crawler
    alone; noimageai denies an image, not the page that shows it; Content-Signal
    headers are read leniently; ai-input is TDMRep's and noai's too."""
    site.robots("User-agent: *\nAllow: /\n")
    site.script("/ours", Reply(body=html('<meta name="ExampleBot" content="noindex, noai">')))
    site.script("/theirs", Reply(body=html('<meta name="otherbot" content="noai">')))
    site.script("/gallery", Reply(body=html('<meta name="robots" content="noimageai">')))
    site.script(
        "/img.png",
        Reply(body=b"\x89PNG", headers={"Content-Type": "image/png", "X-Robots-Tag": "noimageai"}),
    )
    site.script(
        "/scoped",
        Reply(body=html(), headers={"X-Robots-Tag": "otherbot: noai, examplebot: noimageai"}),
    )
    site.script(
        "/signal", Reply(body=html(), headers={"Content-Signal": "AI-Input=No, search=YES"})
    )
    purposes = {"REP_PURPOSES": ["ai-input", "search"]}
    paths = ["/ours", "/theirs", "/gallery", "/img.png", "/scoped", "/signal"]
    result = await run_crawl([site.url(p) for p in paths], purposes)
    found = {p: usage_of(result, site.url(p)) for p in paths}
    assert found == {
        "/ours": {"ai-input": False, "search": None},
        "/theirs": {"ai-input": None, "search": None},
        "/gallery": {"ai-input": None, "search": None},
        "/img.png": {"ai-input": False, "search": None},
        "/scoped": {"ai-input": None, "search": None},
        "/signal": {"ai-input": False, "search": True},
    }
    assert result.responses[site.url("/ours")].meta["rep_usage_reasons"]["ai-input"] == (
        '<meta name="examplebot"> noai',
    )
    assert result.responses[site.url("/gallery")].meta["rep_directives"].noimageai


@pytest_twisted.ensureDeferred
async def test_dry_run_counts_would_be_drops_and_drops_nothing(site: ScriptedServer) -> None:
    """REP_DRY_RUN with "drop": every page downloaded and delivered, the drops counted."""
    urls = issue_site(site)
    settings = {**TRAIN, "REP_USAGE_ACTION": "drop", "REP_DRY_RUN": True}
    result = await run_crawl(list(urls.values()), settings)
    assert site.hits("/closed") == 1
    assert site.hits("/private/x") == 1  # REP_DRY_RUN: robots.txt drops nothing either
    assert len(result.responses) == 6
    assert not result.failures
    assert result.stats["rep/dry_run/usage/dropped/request"] == 1
    assert result.stats["rep/dry_run/usage/dropped/response"] == 3  # /closed counted once
    assert "rep/usage/dropped/request" not in result.stats


@pytest_twisted.ensureDeferred
async def test_dont_obey_robotstxt_requests_are_left_alone(site: ScriptedServer) -> None:
    """Scrapy's opt-out skips usage preferences too: no drop, no meta key."""
    urls = issue_site(site)
    request = Request(urls["closed"], meta={"dont_obey_robotstxt": True}, dont_filter=True)
    result = await run_crawl([request], {**TRAIN, "REP_USAGE_ACTION": "drop"})
    assert site.hits("/closed") == 1
    assert "rep_usage" not in result.responses[urls["closed"]].meta


@pytest_twisted.ensureDeferred
async def test_a_redirect_is_judged_by_where_it_lands(site: ScriptedServer) -> None:
    """A redirect from /open/ to a closed page: the robots.txt lines of the target
    decide (its request is checked anew), under "drop" it is not downloaded."""
    site.robots(ROBOTS)
    site.script("/open/moved", Reply(status=301, headers={"Location": "/closed-target"}))
    result = await run_crawl([site.url("/open/moved")], {**TRAIN, "REP_USAGE_ACTION": "drop"})
    assert site.hits("/open/moved") == 1
    assert site.hits("/closed-target") == 0
    assert result.failed_with(site.url("/closed-target")) is UsageDenied  # the errback's request
