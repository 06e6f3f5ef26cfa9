"""End to end: ``scrapy crawl links`` in example_project/, as a user runs it, against
the demo site (its own process on 127.0.0.1), checked on what reached the site."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parent.parent / "example_project"


def _load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_demo", PROJECT / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


demo = _load_demo()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return demo.run_demo(tmp_path_factory.mktemp("demo"))


def served(run: Any, name: str) -> list[str]:
    """Paths the site served to one origin, robots.txt included, in order."""
    return [hit["path"] for hit in run.hits_of(name)]


def path_of(run: Any, url: str) -> str:
    return str(url).removeprefix(run.origins[run.name_of(url)])


def test_the_crawl_finishes_and_identifies_itself(run: Any) -> None:
    assert run.returncode == 0, run.failure()
    assert run.report["reason"] == "finished"
    assert {hit["user_agent"] for hit in run.hits} == {
        "ExampleBot/1.0 (+http://127.0.0.1/bot.html)"
    }


def test_disallowed_pages_are_never_downloaded_and_say_which_line(run: Any) -> None:
    forbidden = {
        (path_of(run, item["url"]), item["line"], item["rule"]) for item in demo.forbidden(run)
    }
    assert forbidden == {
        ("/cart", 7, "Disallow: /cart"),
        ("/private/orders", 8, "Disallow: /private/"),
        ("/products?sort=price", 10, "Disallow: /*?sort="),
        ("/drafts/1", 2, "Disallow: /drafts/"),  # rules of the redirect target
    }
    assert sorted(served(run, "shop")) == sorted(
        ["/robots.txt", "/", "/products/1", "/products/2", "/private/press"]
    )
    assert served(run, "moved") == ["/robots.txt", "/", "/articles/1"]
    assert served(run, "static") == ["/robots/moved.txt"]
    assert run.report["stats"]["rep/forbidden"] == 4


def test_crawl_delay_spaces_the_requests_to_its_site(run: Any) -> None:
    assert sorted(served(run, "blog")) == sorted(
        ["/robots.txt", "/", "/posts/1", "/posts/2", "/posts/3"]
    )
    gaps = demo.request_gaps(run, "blog")
    assert len(gaps) == 3
    assert min(gaps) >= 0.9, gaps  # Crawl-delay: 1, server-side clock


def test_unreachable_robots_txt_keeps_the_crawler_off_the_site(run: Any) -> None:
    assert set(served(run, "down")) == {"/robots.txt"}  # 503: no page requested
    [dropped] = demo.unreachable(run)
    assert dropped["url"] == run.origins["down"] + "/"
    assert "503" in dropped["reason"]


def test_robots_txt_is_fetched_once_per_site_and_its_sitemaps_reported(run: Any) -> None:
    for name in ("shop", "blog", "moved", "maps"):
        assert served(run, name).count("/robots.txt") == 1, name
    maps = run.origins["maps"]
    assert run.report["robots"][maps]["sitemaps"] == [f"{maps}/sitemap.xml"]
    assert "line 7: Disallow: /cart" in demo.format_report(run)
