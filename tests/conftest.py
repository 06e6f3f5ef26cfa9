"""Shared fixtures: real local HTTP servers (see servers.py), crawl helpers (crawls.py)
and a real redis-server (redis_server.py)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import suite_guard
from redis_server import RedisServer, require_redis_server
from scrapy_forks import Robots, ScrapyForks, scrapy_forks
from servers import ScriptedServer, own_address

from scrapy_rep import _clock, _download


def pytest_addoption(parser: pytest.Parser) -> None:
    suite_guard.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """suite_guard.py: a time limit per test, a clean end on SIGTERM (a plugin of
    its own: its hooks wrap each test's run)."""
    if not config.pluginmanager.has_plugin("rep-suite-guard"):
        config.pluginmanager.register(suite_guard, "rep-suite-guard")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules with tests marked slow first, each module's tests together
    and in their order: a run's processes take the next test as they finish
    one (``--dist load``), and the long ones started last held a run up alone
    at its end. Tests marked asyncio_only are skipped on Twisted's own reactor
    (make pytest-twisted)."""
    from scrapy.utils.reactor import is_asyncio_reactor_installed

    slow = {item.module for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module not in slow)  # stable: each module stays whole
    if is_asyncio_reactor_installed():
        return
    skip = pytest.mark.skip(
        reason="shared state on Redis needs the asyncio reactor (docs: cluster page); "
        "the suite's asyncio runs test it"
    )
    for item in items:
        if item.get_closest_marker("asyncio_only"):
            item.add_marker(skip)


@pytest.fixture
def fetch_starts(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When each robots.txt or tdmrep.json fetch's REP_FETCH_TIMEOUT began
    (scrapy-rep's clock, as a server's log has it), noted as the fetch starts:
    it comes before the fetch's first request reaches the server, by however
    long this machine takes, so a step of the clock counted from the server's
    log could pass the deadline."""
    starts: list[float] = []

    class Noted(_download.Budget):
        def __init__(self, seconds: float, retries: int) -> None:
            super().__init__(seconds, retries)
            starts.append(_clock.now())

    monkeypatch.setattr(_download, "Budget", Noted)
    return starts


@pytest.fixture(autouse=True)
def _real_time() -> None:
    """Every test starts on real time: a crawl's last clock step (a spider's idle
    handler, a looping call) may come after its test's ``rep_clock`` was reset."""
    _clock.reset()


@pytest.fixture
def rep_clock() -> Iterator[ModuleType]:
    """scrapy-rep's clock (``scrapy_rep._clock``), for the test to move forward by
    hand with ``advance(seconds)``: a 600 s backoff or a 30 s deadline then passes
    at once in a real crawl. Back to real time after the test."""
    yield _clock
    _clock.reset()


@pytest.fixture
def site() -> Iterator[ScriptedServer]:
    """A scripted HTTP server on 127.0.0.1, port 0."""
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def site2() -> Iterator[ScriptedServer]:
    """A second server: another origin (another port)."""
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def own_site() -> Iterator[ScriptedServer]:
    """A server on a loopback address of its own (``servers.own_address``), with a
    robots.txt that allows all."""
    with ScriptedServer(own_address()) as server:
        server.robots("User-agent: *\nAllow: /\n")
        yield server


@pytest.fixture
def make_site() -> Iterator[Callable[[], ScriptedServer]]:
    """A factory of servers, all closed after the test."""
    servers: list[ScriptedServer] = []

    def make() -> ScriptedServer:
        server = ScriptedServer()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


# -- Redis (tests/redis_server.py) ----------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on 127.0.0.1 (a free port) for the whole session, stopped after.

    Skipped without redis-server, failed instead when CI=true."""
    server = RedisServer(require_redis_server())
    server.start()
    yield server
    server.close()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, which it may stop (an outage) and start again."""
    server = RedisServer(require_redis_server())
    server.start()
    yield server
    server.close()


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix of this test's own, so tests sharing a Redis never see each other's keys."""
    return f"rep-test-{uuid.uuid4().hex[:10]}:"


@pytest.fixture(scope="module")
def forks() -> Iterator[ScrapyForks]:
    """A process that imported Scrapy once, forking each ``scrapy`` run of the
    module (scrapy_forks.py)."""
    yield from scrapy_forks()


@pytest.fixture
def scrapy_robots(forks: ScrapyForks) -> Robots:
    """``scrapy robots *args`` run in ``cwd``: its exit status and output."""

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return forks.run("robots", *args, cwd=cwd, timeout=60)

    return run
