"""What a page's ``<meta>`` tags may cost a crawl: bounded (docs/page-directives.md).

A 6.6 MB page whose head holds 100,000 robots meta tags, the first one saying
``nofollow, noindex, noai``, is crawled in a process of its own
(tests/_page_crawl.py), with scrapy-rep and with Scrapy alone: the longest
time the reactor is blocked and the crawl's peak memory stay close to
Scrapy's own, and the directives before the cap are still obeyed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from crawls import run_crawl, run_reporting
from scrapy import Request
from servers import Reply, ScriptedServer

from scrapy_rep import _page_directives
from scrapy_rep._page_directives import robots_meta_tags

PAGE_CRAWL = Path(__file__).with_name("_page_crawl.py")
FILLER = b'<meta name="robots" content="index, follow, noai, max-snippet:9">\n'  # 66 bytes
TAGS = 100_000


def flooded_page(
    first: bytes = b'<meta name="robots" content="nofollow, noindex, noai">\n',
) -> bytes:
    """6.6 MB: a head with ``first`` and 100,000 more robots meta tags, then a body."""
    return (
        b"<!DOCTYPE html><html><head><title>flood</title>\n"
        + first
        + FILLER * TAGS
        + b'</head><body><a href="/next">next</a></body></html>'
    )


def page_crawl(site: ScriptedServer, *, scrapy_rep: bool = True, **settings: Any) -> dict[str, Any]:
    job = {
        "page": site.url("/flood"),
        "follow": [site.url("/next/1"), site.url("/next/2")],
        "scrapy_rep": scrapy_rep,
        "settings": settings,
    }
    report, _ = run_reporting(str(PAGE_CRAWL), json.dumps(job), timeout=180)
    return report


@pytest.mark.slow
@pytest.mark.reactor_free  # both crawls run in a process of their own, on its default reactor
@pytest.mark.parametrize("purposes", [[], ["train-ai"]], ids=["meta", "meta+usage"])
def test_a_page_with_100000_robots_meta_tags_costs_about_what_it_costs_scrapy(
    site: ScriptedServer, purposes: list[str]
) -> None:
    """Before: the reactor blocked 6.9 s (6.7 s with REP_PURPOSES, and 100,001
    usage reasons), 254 MB; Scrapy alone 0.2 s, 90 MB. Now 0.08 s, 99 MB, one reason."""
    site.robots(b"User-agent: *\nAllow: /\n")
    site.script("/flood", Reply(body=flooded_page()))
    alone = page_crawl(site, scrapy_rep=False)
    report = page_crawl(site, REP_PURPOSES=purposes)
    print(f"Scrapy alone: {alone}\nscrapy-rep: {report}")
    assert alone["size"] == report["size"] > 6_600_000
    assert report["blocked_s"] < alone["blocked_s"] + 1.0, (report, alone)
    assert report["peak_mb"] < alone["peak_mb"] + 30, (report, alone)
    # the first tag, before the cap, is obeyed
    assert report["noindex"] is True
    assert report["nofollow"] is True
    assert "followed" not in report
    stats = report["stats"]
    assert stats["rep/meta/nofollow_dropped"] == 2
    assert stats["rep/meta/capped"] == 1
    if purposes:
        assert report["usage"] == {"train-ai": False}
        assert report["usage_reasons"] == 1  # 100 identical tags read: one reason


def test_tags_past_the_cap_are_not_read() -> None:
    """At most MAX_TAGS tags are returned, the first ones, and the cap is told."""
    html = flooded_page().decode()
    tags = robots_meta_tags(html, names={"robots"})
    assert len(tags) == _page_directives.MAX_TAGS
    assert tags[0] == ("robots", "nofollow, noindex, noai")
    assert tags.capped


def test_a_tag_past_the_head_limit_is_not_read() -> None:
    """A head longer than MAX_HEAD_CHARS is read up to there only."""
    padding = "<!-- " + "x" * _page_directives.MAX_HEAD_CHARS + " -->"
    late = f'<html><head>{padding}<meta name="robots" content="noindex"></head></html>'
    assert robots_meta_tags(late, names={"robots"}) == []
    assert robots_meta_tags(late, names={"robots"}).capped
    early = f'<html><head><meta name="robots" content="noindex">{padding}</head></html>'
    assert robots_meta_tags(early, names={"robots"}) == [("robots", "noindex")]


def test_a_head_is_parsed_up_to_its_1000th_meta_tag() -> None:
    """1,000 other meta tags first: a robots tag after them is not read."""
    others = '<meta name="description" content="x">' * _page_directives.MAX_META_TAGS
    late = f'<html><head>{others}<meta name="robots" content="noindex"></head></html>'
    tags = robots_meta_tags(late, names={"robots"})
    assert tags == []
    assert tags.capped
    early = f'<html><head><meta name="robots" content="noindex">{others}</head></html>'
    assert robots_meta_tags(early, names={"robots"}) == [("robots", "noindex")]


@pytest_twisted.ensureDeferred
async def test_x_robots_tag_values_past_the_cap_are_not_read(site: ScriptedServer) -> None:
    """150 X-Robots-Tag lines, the first saying nofollow: obeyed, and counted
    as read in part; the 101st (noindex) is not read."""
    values = [("X-Robots-Tag", "nofollow")] + [("X-Robots-Tag", "all")] * 99
    values += [("X-Robots-Tag", "noindex")] * 50
    site.robots(b"User-agent: *\nAllow: /\n")
    site.script("/a", Reply(body=b"<html><body>a</body></html>", headers=values))
    result = await run_crawl([site.url("/a")], follow=lambda response: [Request(site.url("/b"))])
    assert site.hits("/b") == 0
    assert result.stats["rep/meta/nofollow_dropped"] == 1
    assert result.stats["rep/meta/capped"] == 1
    assert result.responses[site.url("/a")].meta["rep_noindex"] is False
