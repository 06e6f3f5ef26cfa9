"""Keep one failing test one failure, and end a killed run cleanly (a pytest plugin,
registered by conftest.py).

Every test runs inside the one Twisted reactor pytest-twisted starts, in a
greenlet. Two things used to turn one bad moment into hundreds of failures:

- **SIGTERM stopped the reactor, not pytest.** Twisted installs its own SIGTERM
  handler when the reactor starts, and it only stops the reactor. pytest went
  on: the test under way failed with pytest-twisted's "illegal switch in
  blockon" and every later test with "twisted reactor has stopped" (a time limit
  on ``make test`` read as 549 or 1,042 failures). Here the reactor runs without
  signal handlers, and SIGTERM ends the run: the test under way fails, saying
  so, the run stops after it (fixtures torn down, summary printed), and if it
  cannot within ``GRACE`` seconds the process dumps every thread's traceback,
  kills its children and exits.
- **A crawl that never ends had no limit**: its test held the lane until the
  job's own time limit killed it (see above). Each test that runs in the
  reactor now has a time limit (``--test-time-limit``, or
  ``@pytest.mark.time_limit(seconds)``); past it the test fails, naming it.

After each test, a crawler it left running is stopped (and the test fails,
naming it), and calls it left pending in the reactor are cancelled and listed
at the end of the run, so that they cannot fire into a later test.

``--progress-log PATH`` appends a line as each test starts and ends: the
test under way when a run was killed with SIGKILL is its last ``start``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import children
import pytest
from scrapy.crawler import Crawler

DEFAULT_TIME_LIMIT = 300.0
"""Seconds a test may run in the reactor. The slowest test takes about a tenth
of it on a loaded machine; a test past it is hung, not slow."""

STOP_LIMIT = 30.0
"""Seconds a crawler left running gets to stop before it is abandoned."""

GRACE = 20.0
"""Seconds a SIGTERM'd run gets to end before it exits at once."""

SIGTERM_PATIENCE = 5.0
"""Seconds the test under way, then each crawler it left, get to stop after SIGTERM."""

SIGTERM_WHY = "was running when pytest got SIGTERM"


# -- crawlers made during a test -------------------------------------------------------------------

_made: list[Crawler] = []
_crawler_init = Crawler.__init__


@functools.wraps(_crawler_init)
def _recording_init(self: Crawler, *args: Any, **kwargs: Any) -> None:
    _crawler_init(self, *args, **kwargs)
    _made.append(self)


Crawler.__init__ = _recording_init  # type: ignore[method-assign]


def _still_running(crawler: Crawler) -> bool:
    engine = crawler.__dict__.get("_engine", crawler.__dict__.get("engine"))
    return bool(crawler.crawling or (engine is not None and engine.running))


# -- the run's state -----------------------------------------------------------------------------


class _State:
    item: pytest.Item | None = None
    started = 0.0
    stop: Callable[[str, float], None] | None = None  # stops the test under way in the reactor
    terminated = False
    leftovers: ClassVar[list[tuple[str, list[str]]]] = []
    progress: Any = None  # the --progress-log file
    stderr = 2


def _reactor() -> Any:
    from twisted.internet import reactor

    return reactor


def _note(line: str) -> None:
    if _State.progress is not None:
        _State.progress.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        _State.progress.flush()


def _say(text: str) -> None:
    """Write to the terminal's stderr from a signal handler (no buffered stream;
    past pytest's capture, which a hard exit would lose)."""
    with contextlib.suppress(OSError):
        os.write(_State.stderr, text.encode(errors="replace"))


def _dump_tracebacks() -> None:
    with contextlib.suppress(Exception):
        faulthandler.dump_traceback(file=_State.stderr, all_threads=True)


def _terminal_stderr(config: pytest.Config) -> int:
    """The stderr pytest's fd capture saved (pytest's own attribute), else fd 2."""
    capture = getattr(config.pluginmanager.getplugin("capturemanager"), "_global_capturing", None)
    saved = getattr(getattr(capture, "err", None), "targetfd_save", None)
    return saved if isinstance(saved, int) else 2


# -- options -------------------------------------------------------------------------------------


def add_options(parser: pytest.Parser) -> None:
    """The options, added by conftest.py's pytest_addoption (this plugin is registered later)."""
    group = parser.getgroup("scrapy-rep suite")
    group.addoption(
        "--test-time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT,
        help="seconds a test may run in the reactor before it fails (default: %(default)s)",
    )
    group.addoption(
        "--progress-log",
        default=None,
        help="append a line to this file as each test starts and ends",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "time_limit(seconds): this test's own time limit in the reactor"
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """After every plugin's pytest_configure: pytest-twisted's made the reactor's greenlet."""
    config = session.config
    _run_reactor_without_signal_handlers()
    _State.stderr = _terminal_stderr(config)
    signal.signal(signal.SIGTERM, _on_sigterm)
    path = config.getoption("progress_log")
    if path:
        _State.progress = open(path, "a", buffering=1)  # noqa: SIM115 (kept open for the run)
        _note(f"run pid {os.getpid()}: {' '.join(sys.argv)}")


def pytest_unconfigure(config: pytest.Config) -> None:
    children.kill_all()
    if _State.progress is not None:
        _note("run ended")
        _State.progress.close()
        _State.progress = None


def _run_reactor_without_signal_handlers() -> None:
    """Twisted's SIGTERM handler would stop the reactor and leave pytest running."""
    import greenlet
    import pytest_twisted

    instances = pytest_twisted._instances
    reactor_greenlet = instances.gr_twisted
    if reactor_greenlet is None or reactor_greenlet or reactor_greenlet.dead:
        return  # no reactor greenlet, or it started already
    instances.gr_twisted = greenlet.greenlet(
        functools.partial(instances.reactor.run, installSignalHandlers=False)
    )


# -- SIGTERM ---------------------------------------------------------------------------------------


def _on_sigterm(signum: int, frame: Any) -> None:
    item = _State.item
    running = (
        f"{item.nodeid} (for {time.monotonic() - _State.started:.1f} s)" if item else "no test"
    )
    if _State.terminated:  # a second SIGTERM: no more waiting
        _say(f"\npytest (pid {os.getpid()}): SIGTERM again, exiting now\n")
        _exit_now()
    _State.terminated = True
    _say(f"\npytest (pid {os.getpid()}) got SIGTERM while running {running}\n")
    _note(f"SIGTERM while running {running}")
    _dump_tracebacks()
    stop = _State.stop
    if stop is not None:
        _reactor().callFromThread(stop, SIGTERM_WHY, SIGTERM_PATIENCE)
    watchdog = threading.Timer(GRACE, _exit_after_grace)
    watchdog.daemon = True
    watchdog.start()


def _exit_after_grace() -> None:
    _say(f"\npytest did not stop within {GRACE:.0f} s of SIGTERM: exiting\n")
    _dump_tracebacks()
    _exit_now()


def _exit_now() -> None:
    children.kill_all()
    for pid in _descendants():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    os._exit(128 + signal.SIGTERM)


def _descendants() -> list[int]:
    """Every process below this one (Linux: /proc), whoever started it."""
    parents: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with (
                    contextlib.suppress(OSError, ValueError, IndexError),
                    open(f"/proc/{entry}/stat") as stat,
                ):
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
    found, frontier = [], [os.getpid()]
    while frontier:
        parent = frontier.pop()
        below = [pid for pid, ppid in parents.items() if ppid == parent]
        found.extend(below)
        frontier.extend(below)
    return found


# -- each test -----------------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _State.item, _State.started = item, time.monotonic()
    cpu_before = _cpu_seconds()
    _note(f"start {item.nodeid}")
    try:
        return (yield)
    finally:
        took, cpu = time.monotonic() - _State.started, _cpu_seconds() - cpu_before
        _note(f"end   {item.nodeid} ({took:.1f} s, cpu {cpu:.1f} s)")
        _State.item = None
        if _State.terminated:
            item.session.shouldstop = "SIGTERM: stopped after the test under way"
            for pid in _descendants():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def _cpu_seconds() -> float:
    """CPU time of this process and of the children it has reaped (crawl
    subprocesses, workers): a test's CPU beside its wall time says whether it
    waits or works."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _time_limit(item: pytest.Item) -> float:
    marker = item.get_closest_marker("time_limit")
    if marker is not None:
        return float(marker.args[0])
    return float(item.config.getoption("test_time_limit"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    function = getattr(item, "obj", None)
    if (
        not isinstance(item, pytest.Function)
        or function is None
        or hasattr(function, "hypothesis")  # pytest-twisted wraps these its own way
    ):
        return (yield)
    item.obj = _guarded(item, function)
    try:
        return (yield)
    finally:
        item.obj = function


def _guarded(item: pytest.Item, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` as pytest-twisted will run it, in the reactor: with a time
    limit, then stopping what it left running."""
    import pytest_twisted
    from twisted.internet import defer

    limit = _time_limit(item)
    asynchronous = pytest_twisted._get_mark(function) == "async_test"

    async def guarded(**kwargs: Any) -> Any:
        reactor = _reactor()
        before = set(reactor.getDelayedCalls())
        del _made[:]
        passed = False
        try:
            if asynchronous:
                result = await _limited(defer.ensureDeferred(function(**kwargs)), before)
            else:
                result = await defer.maybeDeferred(function, **kwargs)
            passed = True
            return result
        finally:
            await _clean_up(item, before, blame=passed)

    async def _limited(test: Any, before: set[Any]) -> Any:
        """The test, cancelled at its time limit. A cancelled crawl may still end
        normally (Scrapy's engine closes a cancelled crawl), and so may the test:
        what decides is whether the limit was reached. A crawl closing waits for
        its downloads in flight; past ``patience`` the test is given up on (its
        crawler is then stopped or abandoned by ``_clean_up``)."""
        reactor = _reactor()
        stopped: list[str] = []
        ended: defer.Deferred[Any] = defer.Deferred()
        test.addBoth(lambda outcome: None if ended.called else ended.callback(outcome))

        def stop(why: str, patience: float) -> None:
            if stopped:
                return
            stopped.append(why)
            _time_out_downloads(before)
            test.cancel()
            if not ended.called:
                reactor.callLater(patience, lambda: None if ended.called else ended.callback(None))

        timer = reactor.callLater(
            limit,
            stop,
            f"ran past its time limit of {limit:g} s (--test-time-limit, @pytest.mark.time_limit)",
            STOP_LIMIT,
        )
        _State.stop = stop
        if _State.terminated:  # SIGTERM came while the test was being set up
            stop(SIGTERM_WHY, SIGTERM_PATIENCE)
        try:
            outcome = await ended
        except BaseException:
            if not stopped:
                raise
        finally:
            _State.stop = None
            if timer.active():
                timer.cancel()
        if stopped:
            pytest.fail(f"{item.nodeid} {stopped[0]}", pytrace=False)
        return outcome

    pytest_twisted._set_mark(guarded, "async_test")
    return guarded


async def _clean_up(item: pytest.Item, before: set[Any], blame: bool) -> None:
    """Stop the crawlers this test left running, cancel the calls it left pending;
    with ``blame``, a crawler left running fails the test."""
    from twisted.internet import defer, task

    reactor = _reactor()
    running = [crawler for crawler in _made if _still_running(crawler)]
    del _made[:]
    if running:
        _time_out_downloads(before)
    for crawler in running:
        stopping = defer.ensureDeferred(crawler.stop_async())
        stopping.addTimeout(SIGTERM_PATIENCE if _State.terminated else STOP_LIMIT, reactor)
        with contextlib.suppress(Exception):
            await stopping
    left = [call for call in reactor.getDelayedCalls() if call not in before and call.active()]
    if left:
        await task.deferLater(reactor, 0)  # calls already due run now
        left = [call for call in left if call.active()]
        if left:
            _State.leftovers.append((item.nodeid, [_describe(call) for call in left]))
        for call in left:
            call.cancel()
    if running and blame:
        spiders = ", ".join(repr(getattr(crawler.spidercls, "name", "?")) for crawler in running)
        pytest.fail(
            f"{item.nodeid} left {len(running)} crawler(s) running ({spiders}): "
            "stopped after the test",
            pytrace=False,
        )


def _time_out_downloads(before: set[Any]) -> None:
    """Let the downloads this test started time out now: a crawl being stopped
    waits for its downloads in flight, and a page that never answers would hold
    it for its whole DOWNLOAD_TIMEOUT. (Scrapy's download timeout is a delayed
    call to the download's ``Deferred.cancel``.)"""
    from twisted.internet.defer import Deferred

    for call in _reactor().getDelayedCalls():
        func = getattr(call, "func", None)
        if (
            call not in before
            and call.active()
            and getattr(func, "__func__", None) is Deferred.cancel
        ):
            call.reset(0)


def _describe(call: Any) -> str:
    func = getattr(call, "func", None)
    name = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{name} due in {call.getTime() - _reactor().seconds():.1f} s"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _State.leftovers:
        return
    terminalreporter.section("calls left pending in the reactor (cancelled after the test)")
    for nodeid, calls in _State.leftovers:
        terminalreporter.write_line(f"{nodeid}: {', '.join(calls)}")
