"""Child processes of the suite that die with it, even when pytest is killed
with SIGKILL (import as ``from children import ...``).

A redis-server never ends by itself: started plainly, it outlives a killed run
(eight did, by an hour). ``popen`` asks Linux to kill the child when the
thread that started it dies (``PR_SET_PDEATHSIG``; one thread that lives as
long as pytest starts them all), and keeps a list of live children, which
``kill_all`` ends (pytest's SIGTERM handler, see suite_guard.py).
Elsewhere than Linux, only the list and ``kill_all`` remain.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import queue
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_PR_SET_PDEATHSIG = 1

_LIVE: weakref.WeakSet[subprocess.Popen[Any]] = weakref.WeakSet()


def _death_signal_setter() -> Callable[[], None] | None:
    """A ``preexec_fn`` setting PR_SET_PDEATHSIG, resolved here (in the parent):
    the child, forked from a process with threads, only makes one C call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    parent = os.getpid()
    kill = int(signal.SIGKILL)
    getppid, exit_now = os.getppid, os._exit

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if getppid() != parent:  # the parent died before the call above
            exit_now(1)

    return set_death_signal


_SET_DEATH_SIGNAL = _death_signal_setter()


class _Spawner:
    """One thread, alive as long as the process, starts every child: Linux sends
    the death signal when the *thread* that started a child ends, and tests start
    children from short-lived threads too (a redis-server restarted by a timer)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, start: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="suite-children", daemon=True
                )
                self._thread.start()
        done: Future[Any] = Future()
        self._jobs.put((start, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            start, done = self._jobs.get()
            try:
                done.set_result(start())
            except BaseException as exc:
                done.set_exception(exc)


_SPAWNER = _Spawner()


def popen(args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` for a child that must not outlive the suite."""
    if _SET_DEATH_SIGNAL is None:
        process: subprocess.Popen[Any] = subprocess.Popen(args, **kwargs)
    else:
        kwargs.setdefault("preexec_fn", _SET_DEATH_SIGNAL)
        process = _SPAWNER.run(lambda: subprocess.Popen(args, **kwargs))
    _LIVE.add(process)
    return process


def run(args: list[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` through :func:`popen` (killed on timeout, as run does)."""
    with popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:
            process.kill()
            process.wait()
            raise
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def kill_all() -> list[int]:
    """SIGKILL every child started by :func:`popen` that still runs: their pids."""
    killed = []
    for process in list(_LIVE):
        if process.poll() is None:
            with contextlib.suppress(OSError):
                process.kill()
                killed.append(process.pid)
    return killed
