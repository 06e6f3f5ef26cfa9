"""A new user's first hour: a project made by ``scrapy startproject`` and set up
as docs/quickstart.md says, then the settings a user tries next, each run as the
user runs it (the installed ``scrapy`` in a subprocess) against real local
servers. What it prints and what reached the server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from servers import ScriptedServer

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free]  # scrapy subprocesses

SCRAPY = str(Path(sys.executable).with_name("scrapy"))

# docs/quickstart.md's settings block, the template's ADDONS = {} line changed
QUICK_START = {
    "ADDONS = {}": 'ADDONS = {"scrapy_rep.Addon": 100}',
}
QUICK_START_LINES = textwrap.dedent(
    """\
    ROBOTSTXT_OBEY = True
    ROBOTSTXT_USER_AGENT = "YourCrawlerName"
    USER_AGENT = "YourCrawlerName/1.0 (+https://your.site/crawler)"
    """
)


def scrapy(*args: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}
    return subprocess.run(
        [SCRAPY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def quick_start_project(tmp_path: Path, extra: str = "") -> Path:
    """``scrapy startproject shop``, its settings.py changed as the Quick start
    says (plus ``extra`` lines at the end); the project directory."""
    made = scrapy("startproject", "shop", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "shop"
    settings = project / "shop" / "settings.py"
    text = settings.read_text()
    for line, changed in QUICK_START.items():
        assert text.count(f"\n{line}\n") == 1, f"the template has no {line!r} line"
        text = text.replace(f"\n{line}\n", f"\n{changed}\n")
    text = re.sub(r"^ROBOTSTXT_OBEY = .*$", "", text, flags=re.MULTILINE)
    settings.write_text(text + "\n" + QUICK_START_LINES + textwrap.dedent(extra))
    return project


def add_spider(project: Path, urls: list[str]) -> None:
    (project / "shop" / "spiders" / "pages.py").write_text(
        textwrap.dedent(
            f"""\
            import scrapy


            class PagesSpider(scrapy.Spider):
                name = "pages"
                start_urls = {urls!r}

                def parse(self, response):
                    yield {{"url": response.url}}
            """
        )
    )


def test_scrapy_robots_in_a_quick_start_project_prints_no_note(
    site: ScriptedServer, tmp_path: Path
) -> None:
    """The add-on enables the bounded decompression: no note says it is not."""
    site.robots("User-agent: *\nDisallow: /private/\n")
    project = quick_start_project(tmp_path)
    result = scrapy("robots", site.url("/private/x"), site.url("/"), cwd=project)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("agent 'YourCrawlerName' (from ROBOTSTXT_USER_AGENT)\n")
    assert "note:" not in result.stdout, result.stdout
    assert "WARNING" not in result.stderr, result.stderr

    # the note is still there when the project really lacks the middleware
    settings = project / "shop" / "settings.py"
    settings.write_text(
        settings.read_text()
        + 'DOWNLOADER_MIDDLEWARES = {"scrapy_rep.BoundedDecompressionMiddleware": None}\n'
    )
    result = scrapy("robots", site.url("/"), cwd=project)
    assert result.returncode == 0, result.stderr
    assert "note: scrapy_rep.BoundedDecompressionMiddleware is not enabled" in result.stdout
