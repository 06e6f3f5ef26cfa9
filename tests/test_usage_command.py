"""``scrapy robots --purpose``: what robots.txt's usage lines say per purpose, run
as a user runs it (a subprocess of the installed ``scrapy``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scrapy_forks import Robots
from servers import ScriptedServer
from test_command import verdict_line

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free]  # scrapy robots subprocesses

ROBOTS = """\
User-agent: *
Disallow: /private/
Content-Usage: train-ai=n
Content-Usage: /open/ train-ai=y
Content-Signal: search=yes, ai-train=yes
"""


def usage_lines(stdout: str, url: str) -> list[str]:
    """The lines under ``url``'s verdict that say what a purpose is, spaces squeezed."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if url in line.split())
    found = []
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 12):
            break
        found.append(" ".join(line.split()))
    return found


def test_purpose_shows_the_deciding_lines_and_says_pages_are_read_when_fetched(
    site: ScriptedServer, tmp_path: Path, scrapy_robots: Robots
) -> None:
    site.robots(ROBOTS)
    urls = [site.url("/closed"), site.url("/open/a"), site.url("/private/x")]
    result = scrapy_robots("--purpose", "train-ai", "--purpose", "search", *urls, cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 1, result.stderr  # /private/x is forbidden; usage changes nothing
    assert "usage     train-ai, search: from robots.txt only; a page's headers and meta" in out
    assert usage_lines(out, site.url("/closed")) == [
        "train-ai denied (line 3: Content-Usage: train-ai=n)",
        "search allowed (line 5: Content-Signal: search=yes, ai-train=yes)",
    ]
    assert usage_lines(out, site.url("/open/a")) == [
        "train-ai allowed (line 4: Content-Usage: /open/ train-ai=y; "
        "line 5: Content-Signal: search=yes, ai-train=yes)",
        "search allowed (line 5: Content-Signal: search=yes, ai-train=yes)",
    ]
    assert usage_lines(out, site.url("/private/x")) == [
        "train-ai unknown (not fetched: no preferences)",
        "search unknown (not fetched: no preferences)",
    ]
    assert site.pages() == []  # robots.txt only: no page, no tdmrep.json


def test_rep_purposes_of_the_settings_apply_and_json_carries_usage(
    tmp_path: Path, scrapy_robots: Robots
) -> None:
    robots = tmp_path / "robots.txt"
    robots.write_text(ROBOTS)
    result = scrapy_robots(
        "--file", str(robots), "-s", "REP_PURPOSES=ai-input", "--json", "/closed", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["purposes"] == ["ai-input"]
    assert "only known when it is fetched" in data["usage_note"]
    [url] = data["robots"][0]["urls"]
    assert url["usage"] == {
        "ai-input": {"allowed": None, "lines": [], "reason": "no usage line speaks of it"}
    }


def test_without_purposes_the_output_is_as_before(tmp_path: Path, scrapy_robots: Robots) -> None:
    robots = tmp_path / "robots.txt"
    robots.write_text(ROBOTS)
    result = scrapy_robots("--file", str(robots), "/closed", cwd=tmp_path)
    assert result.returncode == 0
    assert "usage" not in result.stdout
    assert verdict_line(result.stdout, "/closed") == "ALLOWED /closed no rule matched"
    assert usage_lines(result.stdout, "/closed") == []


def test_unknown_purpose_is_a_usage_error_with_a_hint(
    tmp_path: Path, scrapy_robots: Robots
) -> None:
    result = scrapy_robots("--file", "robots.txt", "--purpose", "ai-train", "/a", cwd=tmp_path)
    assert result.returncode == 2
    assert "--purpose: unknown purpose 'ai-train' (did you mean 'train-ai'?)" in result.stderr
