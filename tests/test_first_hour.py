"""A new user's first hour: a project made by ``scrapy startproject`` and set up
as docs/quickstart.md says, then the settings a user tries next, each run as the
user runs it (``scrapy`` in a process of its own: scrapy_forks.py, each run
forked from one process that imported Scrapy once; ``scrapy startproject`` is
the installed script itself) against real local servers. What it prints and
what reached the server."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from scrapy import __version__ as scrapy_version
from scrapy_forks import ScrapyForks, scrapy_forks
from servers import ScriptedServer

pytestmark = [pytest.mark.slow, pytest.mark.reactor_free]  # scrapy subprocesses

SCRAPY = str(Path(sys.executable).with_name("scrapy"))
SCRAPY_2_14 = scrapy_version.startswith("2.14.")

DOCS = Path(__file__).resolve().parent.parent / "docs"


def quick_start_block() -> list[str]:
    """docs/quickstart.md's settings.py lines, as the page shows them."""
    text = (DOCS / "quickstart.md").read_text()
    section = text[text.index("## Quick start") :]
    found = re.search(r"```python\n# settings.py\n(.*?)```", section, re.S)
    assert found, "docs/quickstart.md has no settings.py block"
    return found.group(1).splitlines()


@pytest.fixture(scope="module")
def forks() -> Iterator[ScrapyForks]:
    yield from scrapy_forks()


Scrapy = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def scrapy(forks: ScrapyForks) -> Scrapy:
    """``scrapy *args`` run in ``cwd``: its exit status and output."""

    def run(*args: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return forks.run(*args, cwd=cwd, timeout=timeout)

    return run


@pytest.fixture(scope="module")
def started_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the installed ``scrapy startproject shop`` makes, once for the module."""
    where = tmp_path_factory.mktemp("startproject")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}
    made = subprocess.run(
        [SCRAPY, "startproject", "shop"],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert made.returncode == 0, made.stderr
    return where / "shop"


@pytest.fixture
def quick_start_project(started_project: Path, tmp_path: Path) -> Callable[..., Path]:
    return lambda extra="": quick_start_copy(started_project, tmp_path, extra)


def quick_start_copy(started: Path, tmp_path: Path, extra: str = "") -> Path:
    """A copy of ``started`` (made by ``scrapy startproject shop``), its settings.py
    changed as the Quick start says (plus ``extra`` lines at the end); the project
    directory."""
    project = tmp_path / "shop"
    shutil.copytree(started, project)
    settings = project / "shop" / "settings.py"
    text = settings.read_text()
    block = quick_start_block()
    (addons,) = [line for line in block if line.startswith("ADDONS = ")]
    # "Change that line": the template's ADDONS = {} becomes the page's
    assert text.count("\nADDONS = {}\n") == 1, "the template has no ADDONS = {} line"
    text = text.replace("\nADDONS = {}\n", f"\n{addons}\n")
    text = re.sub(r"^ROBOTSTXT_OBEY = .*$", "", text, flags=re.MULTILINE)  # the page sets it
    rest = "\n".join(line for line in block if line != addons)
    write_module(settings, f"{text}\n{rest}\n{textwrap.dedent(extra)}")
    return project


def write_module(path: Path, text: str) -> None:
    """``path.write_text(text)``, and its stale bytecode gone: a module rewritten
    within the second to the same size (a spider's URLs with new ports) would
    run as before, from the .pyc of the last run (checked on both)."""
    path.write_text(text)
    shutil.rmtree(path.parent / "__pycache__", ignore_errors=True)


def add_spider(project: Path, urls: list[str]) -> None:
    write_module(
        project / "shop" / "spiders" / "pages.py",
        textwrap.dedent(
            f"""\
            import scrapy


            class PagesSpider(scrapy.Spider):
                name = "pages"

                async def start(self):
                    for url in {urls!r}:
                        yield scrapy.Request(url)  # filtered by the dupefilter

                def parse(self, response):
                    yield {{"url": response.url}}
            """
        ),
    )


def test_scrapy_robots_in_a_quick_start_project_prints_no_note(
    site: ScriptedServer, quick_start_project: Callable[..., Path], scrapy: Scrapy
) -> None:
    """The add-on enables the bounded decompression: no note says it is not."""
    site.robots("User-agent: *\nDisallow: /private/\n")
    project = quick_start_project()
    result = scrapy("robots", site.url("/private/x"), site.url("/"), cwd=project)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("agent 'YourCrawlerName' (from ROBOTSTXT_USER_AGENT)\n")
    assert "note:" not in result.stdout, result.stdout
    assert "WARNING" not in result.stderr, result.stderr

    # the note is still there when the project really lacks the middleware
    settings = project / "shop" / "settings.py"
    write_module(
        settings,
        settings.read_text()
        + 'DOWNLOADER_MIDDLEWARES = {"scrapy_rep.BoundedDecompressionMiddleware": None}\n',
    )
    result = scrapy("robots", site.url("/"), cwd=project)
    assert result.returncode == 0, result.stderr
    assert "note: scrapy_rep.BoundedDecompressionMiddleware is not enabled" in result.stdout


# -- docs/cluster.md's recipe, as written ------------------------------------------------

CLUSTER_DOC = Path(__file__).resolve().parent.parent / "docs" / "cluster.md"
PYPROJECT = CLUSTER_DOC.parent.parent / "pyproject.toml"


def cluster_recipe() -> tuple[str, str]:
    """The page's install command and its first settings.py block."""
    text = CLUSTER_DOC.read_text()
    install = re.search(r"```sh\n(pip install [^\n]*)\n```", text)
    settings = re.search(
        r"```python\n(# settings.py: the same on every worker\n.*?)```", text, re.S
    )
    assert install, "docs/cluster.md has no install line"
    assert settings, "docs/cluster.md has no settings block"
    return install.group(1), settings.group(1)


def test_the_cluster_install_line_brings_what_the_settings_name() -> None:
    tomllib = pytest.importorskip("tomllib")
    install, settings = cluster_recipe()
    extra = re.search(r"scrapy-rep\[([\w-]+)\]", install)
    assert extra, install
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    brought = {re.split(r"[<>=!~ ;\[]", req, maxsplit=1)[0] for req in extras[extra.group(1)]}
    named = {path.split(".")[0] for path in re.findall(r'"(\w+)\.[\w.]+"', settings)}
    assert named == {"scrapy_rep", "scrapy_redis", "twisted"}, named
    assert {"redis", "scrapy-redis"} <= brought, (install, brought)


def queue_block() -> str:
    """docs/cluster.md's settings line for scrapy-rep's Redis queue."""
    found = re.search(
        r"```python\n(# settings.py, besides the scrapy-redis.*?)```", CLUSTER_DOC.read_text(), re.S
    )
    assert found, "docs/cluster.md has no RedisPoliteQueue settings block"
    return found.group(1)


@pytest.mark.parametrize(
    "polite_queue", [False, True], ids=["scrapy-redis-queue", "RedisPoliteQueue"]
)
def test_two_workers_crawl_with_the_cluster_settings_as_written(
    site: ScriptedServer,
    own_redis: Any,
    quick_start_project: Callable[..., Path],
    forks: ScrapyForks,
    polite_queue: bool,
) -> None:
    """docs/cluster.md's settings block (and its RedisPoliteQueue line), only the
    Redis address changed, in a startproject project: two `scrapy crawl` workers
    share one queue, one dupefilter and robots.txt."""
    site.robots("User-agent: *\nDisallow: /private/\n")
    _, block = cluster_recipe()
    if polite_queue:
        block += queue_block()
    block = block.replace("redis://redis.internal:6379/0", own_redis.url)
    project = quick_start_project()
    settings = project / "shop" / "settings.py"
    kept = [
        line
        for line in settings.read_text().splitlines()
        if not line.startswith(("ADDONS", "ROBOTSTXT_", "USER_AGENT", "TWISTED_REACTOR"))
    ]
    write_module(settings, "\n".join(kept) + "\n" + block)
    urls = [site.url(f"/page/{n}") for n in range(8)] + [site.url("/private/x")]
    add_spider(project, urls)
    workers = [
        forks.start("crawl", "pages", "-s", "LOG_LEVEL=INFO", "-s", "DOWNLOAD_DELAY=0", cwd=project)
        for _ in range(2)
    ]
    logs = []
    for worker in workers:
        ended = forks.wait(worker, timeout=90)
        assert ended.returncode == 0, ended.stderr
        logs.append(ended.stderr)
    for log in logs:
        assert "ModuleNotFoundError" not in log
        assert (
            "Sharing robots.txt, Crawl-delay and slow-down pauses with other workers "
            f"through Redis at {own_redis.url}" in log
        ), log
    # one queue and one dupefilter: each page once; robots.txt once for the cluster
    assert sorted(site.pages()) == sorted(f"/page/{n}" for n in range(8))
    assert site.hits("/robots.txt") == 1


# -- CONCURRENT_REQUESTS_PER_IP ------------------------------------------------------------


Crawl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def crawl(scrapy: Scrapy) -> Crawl:
    """``scrapy crawl pages`` in ``project``."""

    def run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
        # Without the template's DOWNLOAD_DELAY = 1: what these crawls check (messages,
        # what reached the sites) does not depend on it, and it made each one wait.
        return scrapy(
            "crawl", "pages", "-s", "LOG_LEVEL=INFO", "-s", "DOWNLOAD_DELAY=0", *args, cwd=project
        )

    return run


def errors(log: str) -> list[str]:
    return [line.split(" ERROR: ", 1)[1] for line in log.splitlines() if " ERROR: " in line]


def test_per_ip_concurrency_stops_at_start_with_one_line_whose_fixes_work(
    site: ScriptedServer, quick_start_project: Callable[..., Path], crawl: Crawl
) -> None:
    site.robots("User-agent: *\nDisallow: /private/\n")
    project = quick_start_project("CONCURRENT_REQUESTS_PER_IP = 2\n")
    add_spider(project, [site.url("/a"), site.url("/b")])
    settings = project / "shop" / "settings.py"
    quick_start = settings.read_text()

    for extra in ("", "REP_FRONTIER = False\n"):  # the fix once offered refuses it too
        write_module(settings, quick_start + extra)
        refused = crawl(project)
        # Scrapy 2.14 logs a crawl that could not start and exits 0 all the same
        assert refused.returncode == (0 if SCRAPY_2_14 else 1), refused.stderr
        first = errors(refused.stderr)[0]
        assert first.startswith("Cannot start: CONCURRENT_REQUESTS_PER_IP: 2 cannot be used"), first
        assert "Scraper close failure" not in refused.stderr  # stopped before the queue
        assert site.pages() == []

    # the fixes the line names, as written there
    fix = re.search(r"(SCHEDULER_PRIORITY_QUEUE = '[\w.]+') and (REP_FRONTIER = False)", first)
    assert fix, first
    write_module(settings, quick_start + f"{fix.group(1)}\n{fix.group(2)}\n")
    kept = crawl(project)
    assert kept.returncode == 0, kept.stderr
    assert errors(kept.stderr) == []
    assert sorted(site.pages()) == ["/a", "/b"]

    assert "Set CONCURRENT_REQUESTS_PER_IP = 0 and limit each site with" in first
    write_module(settings, quick_start + "CONCURRENT_REQUESTS_PER_IP = 0\n")
    per_domain = crawl(project)
    assert per_domain.returncode == 0, per_domain.stderr
    assert errors(per_domain.stderr) == []
    assert sorted(site.pages()) == ["/a", "/a", "/b", "/b"]


# -- setting names in lower case --------------------------------------------------------------


def warnings_of(log: str) -> list[str]:
    return [line.split(" WARNING: ", 1)[1] for line in log.splitlines() if " WARNING: " in line]


def test_lower_case_setting_names_in_settings_py_are_warned_about(
    site: ScriptedServer, quick_start_project: Callable[..., Path], crawl: Crawl, scrapy: Scrapy
) -> None:
    """Scrapy reads only upper-case names from settings.py: ``rep_max_waiting = 10``
    changes nothing, and one WARNING says so, naming the setting meant."""
    site.robots("User-agent: *\nDisallow:\n")
    extra = "rep_max_waiting = 10\nRobotstxt_Obey = False\nmy_helper = 3\n"
    project = quick_start_project(extra)
    add_spider(project, [site.url("/a")])
    result = crawl(project)
    assert result.returncode == 0, result.stderr
    module_note = "(in shop.settings: Scrapy reads only upper-case names from a settings module)"
    assert warnings_of(result.stderr) == [
        f"Unknown setting Robotstxt_Obey is ignored; did you mean ROBOTSTXT_OBEY? {module_note}",
        f"Unknown setting rep_max_waiting is ignored; did you mean REP_MAX_WAITING? {module_note}",
    ]
    assert site.pages() == ["/a"]

    # scrapy robots reads the same settings, and warns the same
    checked = scrapy("robots", site.url("/a"), cwd=project)
    assert checked.returncode == 0, checked.stderr
    assert len(warnings_of(checked.stderr)) == 2, checked.stderr
    assert "did you mean REP_MAX_WAITING?" in checked.stderr


# -- Scrapy's RobotsTxtMiddleware enabled by hand next to the add-on ---------------------------

SCRAPY_MIDDLEWARE = "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"


def test_scrapys_middleware_next_to_the_addon_warns_of_what_then_happens(
    make_site: Callable[[], ScriptedServer], quick_start_project: Callable[..., Path], crawl: Crawl
) -> None:
    """A WARNING, not an ERROR in a crawl that then runs: it says robots.txt is
    downloaded twice, and the sites' logs show exactly that; its fix, once."""
    extra = f"DOWNLOADER_MIDDLEWARES = {{{SCRAPY_MIDDLEWARE!r}: 100}}\n"
    project = quick_start_project(extra)
    settings = project / "shop" / "settings.py"
    for fixed in (False, True):
        sites = [make_site(), make_site()]
        for server in sites:
            server.robots("User-agent: *\nDisallow: /private/\n")
        add_spider(project, [s.url(p) for s in sites for p in ("/a", "/b", "/private/c")])
        if fixed:  # as the WARNING says
            write_module(settings, settings.read_text().replace(extra, ""))
        result = crawl(project)
        assert result.returncode == 0, result.stderr
        assert errors(result.stderr) == []
        said = [w for w in warnings_of(result.stderr) if "Scrapy's own" in w]
        for server in sites:
            assert sorted(server.pages()) == ["/a", "/b"]  # both forbid /private/
        if fixed:
            assert said == []
            assert [server.hits("/robots.txt") for server in sites] == [1, 1]
            continue
        (warning,) = said
        assert warning.startswith(
            "Scrapy's own RobotsTxtMiddleware is enabled next to scrapy_rep.RobotsTxtMiddleware, "
            "and both run: each site's robots.txt is downloaded twice, once by each, and a "
            "request is sent only if both allow it"
        )
        assert f"remove {SCRAPY_MIDDLEWARE!r} from DOWNLOADER_MIDDLEWARES" in warning
        assert [server.hits("/robots.txt") for server in sites] == [2, 2]  # as it says


# -- a crawler name with a space -------------------------------------------------------------------


def test_a_name_with_spaces_gets_one_warning_with_the_fix_that_works(
    site: ScriptedServer, quick_start_project: Callable[..., Path], crawl: Crawl
) -> None:
    site.robots("User-agent: *\nDisallow: /private/\n")
    project = quick_start_project()
    add_spider(project, [site.url("/a")])
    settings = project / "shop" / "settings.py"
    quick_start = settings.read_text()
    write_module(
        settings,
        quick_start.replace(
            'ROBOTSTXT_USER_AGENT = "YourCrawlerName"', 'ROBOTSTXT_USER_AGENT = "My Crawler 2"'
        ),
    )
    result = crawl(project)
    assert result.returncode == 0, result.stderr
    (warning,) = warnings_of(result.stderr)  # no second one advising USER_AGENT = 'My/1.0'
    assert warning.startswith("ROBOTSTXT_USER_AGENT 'My Crawler 2' is obeyed as 'My': ")
    fix = re.search(
        r"Set ROBOTSTXT_USER_AGENT to a name of letters, '_' and '-' only \(e.g. '(\w+)'\), "
        r"and USER_AGENT name the same crawler \('([^']+)'\)$",
        warning,
    )
    assert fix, warning
    assert fix.groups() == ("MyCrawler", "MyCrawler/1.0 (+https://your.site/bot)")

    # the fix as the WARNING writes it: no warning left
    write_module(
        settings,
        quick_start + f"ROBOTSTXT_USER_AGENT = {fix.group(1)!r}\nUSER_AGENT = {fix.group(2)!r}\n",
    )
    fixed = crawl(project)
    assert fixed.returncode == 0, fixed.stderr
    assert warnings_of(fixed.stderr) == []
    assert site.pages() == ["/a", "/a"]


def test_scrapy_robots_agent_is_not_taken_for_the_projects_settings(
    site: ScriptedServer, quick_start_project: Callable[..., Path], scrapy: Scrapy
) -> None:
    """--agent checks as another crawler: no WARNING calls it ROBOTSTXT_USER_AGENT
    or asks to rename USER_AGENT; a cut-short --agent is one note."""
    site.robots("User-agent: OtherBot\nDisallow: /x\n\nUser-agent: My\nDisallow: /my\n")
    project = quick_start_project()
    other = scrapy("robots", "--agent", "OtherBot", site.url("/x"), cwd=project)
    assert other.returncode == 1, other.stderr
    assert warnings_of(other.stderr) == []
    assert other.stdout.startswith("agent 'OtherBot' (from --agent)\n\n")
    assert "FORBIDDEN" in other.stdout

    spaced = scrapy("robots", "--agent", "My Crawler 2", site.url("/my"), cwd=project)
    assert spaced.returncode == 1, spaced.stderr
    assert warnings_of(spaced.stderr) == []
    assert spaced.stdout.startswith(
        "agent 'My' (from --agent)\n"
        "note: --agent 'My Crawler 2' is checked as 'My': a robots.txt product token holds "
        "only letters, '_' and '-', so it ends before ' Crawler 2'\n"
    )
    # the project's own settings are still checked as a crawl checks them
    settings = project / "shop" / "settings.py"
    write_module(settings, settings.read_text() + 'USER_AGENT = "Mozilla/5.0"\n')
    browser = scrapy("robots", "--agent", "OtherBot", site.url("/x"), cwd=project)
    (warning,) = warnings_of(browser.stderr)
    assert warning.startswith("USER_AGENT 'Mozilla/5.0' does not name 'YourCrawlerName'")
