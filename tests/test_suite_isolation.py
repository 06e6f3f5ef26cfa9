"""A broken crawl test fails alone, and a killed run ends cleanly (suite_guard.py).

Each case runs pytest in a subprocess, with this suite's conftest.py, on a small
generated test file: ordinary crawl tests around one that hangs (a page that
never answers, a DOWNLOAD_TIMEOUT longer than the test's time limit) or that
leaves its crawler running. The runs used to end as one hung lane, then, once a
time limit sent SIGTERM, as one "illegal switch in blockon" and hundreds of
"twisted reactor has stopped".
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import children
import pytest

pytestmark = pytest.mark.slow  # pytest in subprocesses, a crawl held for seconds

TESTS = Path(__file__).parent

HEADER = """
import threading

import pytest
import pytest_twisted
from crawls import run_crawl
from scrapy import signals
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.test import get_crawler
from servers import Reply, Gate

from crawls import BASE_SETTINGS, ListSpider, CrawlResult

NEVER = Gate()  # never set: the page answers after 60 s


async def ordinary(site):
    result = await run_crawl([site.url("/a"), site.url("/b")])
    assert sorted(result.responses) == [site.url("/a"), site.url("/b")]
    assert site.hits("/robots.txt") == 1

"""

ORDINARY = """
@pytest_twisted.ensureDeferred
async def test_ordinary_{n}(site):
    await ordinary(site)

"""

HANGS = """
def never_idle(crawler):
    \"\"\"A crawl that never ends: kept open when idle, as a lost request would.\"\"\"
    def idle():
        raise DontCloseSpider
    crawler.signals.connect(idle, signal=signals.spider_idle, weak=False)


@pytest.mark.time_limit({limit})
@pytest_twisted.ensureDeferred
async def test_hangs({fixtures}site):
    await run_crawl([site.url("/a")], before=never_idle)

"""

SLOW_SETUP = """
@pytest.fixture
def slow_setup():
    \"\"\"Takes seconds to set up, and says when it began (in the run's directory).\"\"\"
    import pathlib, time
    pathlib.Path("setting-up").touch()
    time.sleep(3)


"""

LEAVES_A_CRAWLER = """
@pytest_twisted.ensureDeferred
async def test_leaves_a_crawler_running(site, site2):
    site2.script("/never", Reply(wait_for=NEVER, wait_timeout=60))
    crawler = get_crawler(ListSpider, {**BASE_SETTINGS, "DOWNLOAD_TIMEOUT": 600})
    urls = [site2.url("/never")]
    deferred_from_coro(crawler.crawl_async(urls=urls, result=CrawlResult(crawler)))
    await ordinary(site)

"""

HOLDS_A_REDIS = """
def test_holds_a_redis(own_redis, site, tmp_path_factory):
    import os, time
    import servers
    with open(os.environ["REDIS_PID_FILE"], "w") as out:
        out.write(f"{own_redis.process.pid} {servers._child().process.pid}")
    time.sleep(600)

"""


def suite_file(tmp_path: Path, *parts: str) -> Path:
    """A test directory with this suite's conftest.py and ``parts`` as one test file."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    path = tmp_path / "test_generated.py"
    path.write_text(HEADER + "".join(parts))
    return path


def pytest_args(tmp_path: Path, reactor: str, *more: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--reactor={reactor}",
        f"--rootdir={tmp_path}",
        "-c",
        str(tmp_path / "pytest.ini"),
        *more,
        "test_generated.py",
    ]


def environment(**extra: str) -> dict[str, str]:
    paths = [str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]
    pythonpath = os.pathsep.join(p for p in paths if p)
    return {**os.environ, "PYTHONPATH": pythonpath, "COLUMNS": "250", **extra}


def outcome(output: str) -> str:
    """pytest's last line, without its duration: "1 failed, 4 passed"."""
    last = output.strip().splitlines()[-1]
    return re.sub(r"\s+in [\d.]+s.*$", "", last.strip("= "))


@pytest.fixture(scope="module")
def broken_tests_run(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> str:
    """One pytest run of ordinary crawl tests around a test that hangs and one
    that leaves a crawler running, each followed by ordinary ones: its output,
    each test's result on a line of its own (-rA)."""
    tmp_path = tmp_path_factory.mktemp("broken")
    reactor = pytestconfig.getoption("reactor")
    suite_file(
        tmp_path,
        ORDINARY.format(n=1),
        HANGS.format(limit=1, fixtures=""),
        ORDINARY.format(n=2),
        ORDINARY.format(n=3),
        LEAVES_A_CRAWLER,
        ORDINARY.format(n=4),
    )
    run = children.run(
        pytest_args(tmp_path, reactor, "-rA"),
        env=environment(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    output: str = run.stdout
    return output


def results(output: str) -> list[tuple[str, str]]:
    """Each test's results in -rA's short summary, sorted: [("test_hangs",
    "FAILED"), ...] (a test whose teardown failed has an ERROR too)."""
    found = re.findall(r"^(PASSED|FAILED|ERROR) test_generated\.py::(\w+)", output, re.MULTILINE)
    return sorted((name, result) for result, name in found)


def test_a_hung_crawl_fails_alone(broken_tests_run: str) -> None:
    output = broken_tests_run
    others = [r for r in results(output) if r[0] != "test_leaves_a_crawler_running"]
    assert others == [
        ("test_hangs", "FAILED"),
        ("test_ordinary_1", "PASSED"),
        ("test_ordinary_2", "PASSED"),  # the tests after it pass
        ("test_ordinary_3", "PASSED"),
        ("test_ordinary_4", "PASSED"),
    ], output[-3000:]
    hung = r"FAILED test_generated.py::test_hangs - .*time limit of 1 s"
    assert re.search(hung, output), output[-3000:]
    assert "illegal switch" not in output
    assert "reactor has stopped" not in output


def test_a_crawler_left_running_is_stopped_and_named(broken_tests_run: str) -> None:
    output = broken_tests_run
    around = [
        r
        for r in results(output)
        if r[0] in ("test_ordinary_3", "test_leaves_a_crawler_running", "test_ordinary_4")
    ]
    assert around == [
        ("test_leaves_a_crawler_running", "FAILED"),
        ("test_ordinary_3", "PASSED"),
        ("test_ordinary_4", "PASSED"),  # the test after it
    ], output[-3000:]
    assert re.search(
        r"test_leaves_a_crawler_running left 1 crawler\(s\) running \('rep-test'\)", output
    ), output[-3000:]


def wait_for_line(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path} after {timeout} s")


def wait_for_file(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} not made after {timeout} s"
        time.sleep(0.05)


@pytest.mark.parametrize("during", ["the crawl", "set-up"])
def test_sigterm_names_the_running_test_and_stops_the_run(
    tmp_path: Path, pytestconfig: pytest.Config, during: str
) -> None:
    """A time limit on the job: the test under way fails, saying so, and the run
    stops, whether the signal comes during its crawl or while it is set up."""
    reactor = pytestconfig.getoption("reactor")
    progress = tmp_path / "progress.log"
    hangs = (
        HANGS.format(limit=600, fixtures="")
        if during == "the crawl"
        else SLOW_SETUP + HANGS.format(limit=600, fixtures="slow_setup, ")
    )
    suite_file(tmp_path, ORDINARY.format(n=1), hangs, ORDINARY.format(n=2))
    with children.popen(
        pytest_args(tmp_path, reactor, f"--progress-log={progress}"),
        env=environment(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as run:
        wait_for_line(progress, "start test_generated.py::test_hangs", timeout=60)
        if during == "the crawl":
            time.sleep(1)  # the crawl is under way
        else:  # the fixture is sleeping
            wait_for_file(tmp_path / "setting-up", timeout=60)
        started = time.monotonic()
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=60)
    assert time.monotonic() - started < 30
    assert "got SIGTERM while running test_generated.py::test_hangs" in output
    assert outcome(output) == "1 failed, 1 passed", output[-3000:]
    assert "FAILED test_generated.py::test_hangs" in output
    assert "Interrupted: SIGTERM" in output
    assert "test_ordinary_2" not in output
    assert run.returncode != 0
    assert "SIGTERM while running test_generated.py::test_hangs" in progress.read_text()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead, though not yet reaped
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_run_leaves_no_redis_server_or_test_server_behind(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    """Even SIGKILL, which no handler sees: the redis-server and the test
    servers' process (servers.py) die with pytest."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    reactor = pytestconfig.getoption("reactor")
    pid_file = tmp_path / "redis.pid"
    suite_file(tmp_path, HOLDS_A_REDIS)
    with children.popen(
        pytest_args(tmp_path, reactor),
        env=environment(REDIS_PID_FILE=str(pid_file)),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as run:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = [int(pid) for pid in pid_file.read_text().split()]
        assert len(pids) == 2
        assert all(alive(pid) for pid in pids)
        run.kill()
        run.wait(10)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if alive(pid)]


def test_a_redis_server_started_by_a_thread_outlives_the_thread() -> None:
    """The death signal follows the thread that started a child: a redis-server
    restarted by a timer (an outage's end) must not die with the timer."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    from redis_server import RedisServer

    server = RedisServer(shutil.which("redis-server") or "")
    starter = threading.Thread(target=server.start)
    starter.start()
    starter.join()
    try:
        time.sleep(0.5)
        assert server.client().ping()
    finally:
        server.close()
