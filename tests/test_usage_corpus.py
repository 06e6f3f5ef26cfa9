"""Usage lines and the real robots.txt files of the corpus (tests/_corpus.py).

None of the 2,166 files (crawled in 2019) carries a Content-Usage or
Content-Signal line. So each file is also read with such lines written under
every user-agent line, where a group of only user-agent and usage lines is the
case AIPREF and Google's parser read differently: the Allow/Disallow verdicts
must be the file's own, and the usage lines must be read.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
from _corpus import CorpusFile, manifest, require_corpus, site_urls, site_urls_path

from scrapy_rep import RobotsTxt

# every file of the corpus: CPU-heavy
pytestmark = [pytest.mark.corpus, pytest.mark.reactor_free, pytest.mark.scrapy_free]

AGENTS = ("examplebot", "Googlebot", "bingbot")
PROBE_URLS = ("/", "/index.html?q=1&page=2", "/wp-admin/admin-ajax.php", "/search?q=x")
SITE_URLS_PER_FILE = 10
_USER_AGENT_LINE = re.compile(rb"(?im)^((?:\xef\xbb\xbf)?[ \t]*user[- ]?agent[^\n]*\n)")
_USAGE_KEY = re.compile(rb"(?im)^[ \t]*content[- ]?(?:usage|signal)")
INSERTED = b"Content-Usage: train-ai=n\nContent-Signal: search=yes, ai-input=no\n"


@pytest.fixture(scope="module")
def corpus() -> list[CorpusFile]:
    return manifest(require_corpus())


@pytest.fixture(scope="module")
def urls_by_site() -> dict[str, list[str]]:
    urls: dict[str, list[str]] = defaultdict(list)
    for site, url in site_urls(site_urls_path()):
        if len(urls[site]) < SITE_URLS_PER_FILE:
            urls[site].append(url)
    return urls


def verdicts(robots: RobotsTxt, urls: tuple[str, ...]) -> list[tuple[object, ...]]:
    """Each decision without its line number (inserted lines shift them)."""
    return [
        (decision.allowed, decision.rule, decision.agents)
        for url in urls
        for agent in AGENTS
        for decision in [robots.decide(url, user_agent=agent)]
    ]


def test_corpus_carries_no_usage_lines_and_states_no_preferences(
    corpus: list[CorpusFile], urls_by_site: dict[str, list[str]]
) -> None:
    """The measurement: 0 of 2,166 files has a usage line; usage() answers {} for all."""
    carrying = [entry.filename for entry in corpus if _USAGE_KEY.search(entry.path.read_bytes())]
    assert carrying == []
    for entry in corpus:
        robots = RobotsTxt.parse(entry.path.read_bytes())
        for url in (*PROBE_URLS, *urls_by_site.get(entry.site, ())):
            assert robots.usage(url, user_agent="examplebot") == {}, entry.filename


def test_corpus_usage_lines_under_every_user_agent_line_change_no_fetch_verdict(
    corpus: list[CorpusFile], urls_by_site: dict[str, list[str]]
) -> None:
    """Every file, with a Content-Usage and a Content-Signal line under each of its
    user-agent lines, decides every URL for every agent as the file itself does
    (verdict, rule and group), and its usage lines are read for allowed URLs."""
    different = []
    read = 0
    for entry in corpus:
        # (line ends folded to LF: other tests check that they change no verdict)
        data = entry.path.read_bytes().replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        with_usage = _USER_AGENT_LINE.sub(lambda m: m.group(1) + INSERTED, data)
        if with_usage == data:
            continue  # no user-agent line
        urls = (*PROBE_URLS, *urls_by_site.get(entry.site, ()))
        original, changed = RobotsTxt.parse(data), RobotsTxt.parse(with_usage)
        if verdicts(original, urls) != verdicts(changed, urls):
            different.append(entry.filename)
            continue
        for url in urls:
            for agent in AGENTS:
                found = changed.usage(url, user_agent=agent)
                if (
                    changed.allowed(url, user_agent=agent)
                    and changed.decide(url, user_agent=agent).agents
                ):
                    assert found == {"train-ai": False, "search": True, "ai-input": False}, (
                        entry.filename,
                        url,
                        agent,
                    )
                    read += 1
                else:
                    assert found == {}, (entry.filename, url, agent)
    assert not different, f"{len(different)} file(s) decide otherwise, first: {different[:10]}"
    assert read > 10_000
