"""benchmarks/google_upstream.py: Google's own robots.cc beside the fast-robotstxt fork.

Google's source is not part of scrapy-rep: without it the script says where to get it.
With ``$REP_GOOGLE_ROBOTSTXT_DIR`` naming a clone (and g++ with abseil installed), the
documented differences between the two Google programs are checked on small cases.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scrapy_rep import RobotsTxt

# a subprocess, or a C++ build
pytestmark = [pytest.mark.slow, pytest.mark.reactor_free, pytest.mark.scrapy_free]

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPT = BENCHMARKS / "google_upstream.py"


def test_without_googles_source_the_script_says_where_to_get_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REP_GOOGLE_ROBOTSTXT_DIR"}
    missing = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60
    )
    assert missing.returncode == 2
    assert "clone of https://github.com/google/robotstxt" in missing.stderr
    elsewhere = subprocess.run(
        [sys.executable, str(SCRIPT), "--source", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert elsewhere.returncode == 2
    assert f"not found in {tmp_path} (no robots.cc, robots.h)" in elsewhere.stderr


# (robots.txt, URL, what scrapy-rep and the fork say, what upstream says)
DIFFERENCES = [
    # a rule's raw '|' and the %7C a Scrapy request holds: upstream compares bytes
    ("User-agent: *\nDisallow: /b/*?*|\n", "https://example.com/b/x?a%7Cb", False, True),
    # a rule's raw non-ASCII is escaped by upstream, a URL's is not
    ("User-agent: *\nDisallow: /поиск\n", "https://example.com/поиск", False, True),
]


def fork_allows(body: str, url: str) -> bool:
    agreement = pytest.importorskip("test_google_agreement")
    return bool(agreement.GoogleMatcher().allowed(body.encode(), url))


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> object:
    source = os.environ.get("REP_GOOGLE_ROBOTSTXT_DIR")
    if not source:
        pytest.skip("REP_GOOGLE_ROBOTSTXT_DIR does not name a clone of google/robotstxt")
    if not (os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")):
        pytest.skip("no C++ compiler")
    sys.path.insert(0, str(BENCHMARKS))
    import google_upstream

    executable = google_upstream.build(Path(source), tmp_path_factory.mktemp("upstream"))
    matcher = google_upstream.UpstreamMatcher(executable)
    yield matcher
    matcher.close()


@pytest.mark.parametrize(("body", "url", "ours", "theirs"), DIFFERENCES)
def test_where_upstream_compares_bytes_we_normalise_both_sides(
    upstream: object, body: str, url: str, ours: bool, theirs: bool
) -> None:
    """Disallow: /b/*?*| against /b/x?a%7Cb: upstream allows (byte comparison),
    scrapy-rep does not (RFC 9309 §2.2.2: both sides percent-encoded alike)."""
    assert RobotsTxt.parse(body).allowed(url, user_agent="examplebot") is ours
    assert fork_allows(body, url) is ours
    assert upstream.allowed(body.encode(), url, "examplebot") is theirs  # type: ignore[attr-defined]


def test_where_the_fork_rewrites_the_url_we_read_it_as_upstream(upstream: object) -> None:
    """Disallow: /x? against the URL /x?: the fork's parser drops the empty '?' and
    allows; upstream and scrapy-rep match the path as written and do not."""
    body = "User-agent: *\nDisallow: /x?\n"
    assert not RobotsTxt.parse(body).allowed("https://example.com/x?", user_agent="examplebot")
    assert fork_allows(body, "https://example.com/x?")
    assert not upstream.allowed(body.encode(), "https://example.com/x?", "examplebot")  # type: ignore[attr-defined]
