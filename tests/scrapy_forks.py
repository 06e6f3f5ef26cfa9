"""The ``scrapy`` command in fresh processes, without paying Scrapy's imports
each time (import as ``from scrapy_forks import ScrapyForks``).

Each process that imports Scrapy spends most of a CPU second on it before it
does anything, and the CLI tests start dozens. :class:`ScrapyForks` starts one
Python process that imports what every ``scrapy`` run imports before its
command runs (``scrapy.cmdline`` and Scrapy's own commands) and the modules of
Scrapy's default components (a crawl's next imports), then forks a child
per command. The child does what the installed ``scrapy`` script does:
``sys.exit(scrapy.cmdline.execute())`` with the command's ``sys.argv``, in the
command's directory and environment, its own stdin (/dev/null), stdout and
stderr. Nothing ran before the fork but those imports (no settings read, no
project found, scrapy-rep not imported, no reactor installed): each run finds
its project, settings, commands and reactor as ``scrapy`` does, and ends with
its own exit status. :meth:`ScrapyForks.popen` runs a Python script the same
way (redis_workers.py: the Redis tests' workers, with more modules imported
first). Coverage follows the children (a forked process saves
its own data).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import children

SCRAPY = str(Path(sys.executable).with_name("scrapy"))

Robots = Callable[..., "subprocess.CompletedProcess[str]"]
"""The ``scrapy_robots`` fixture (conftest.py): ``scrapy robots *args`` run in ``cwd``."""

_SERVER = r"""
import ctypes, ctypes.util, json, os, select, signal, sys

parent = os.getppid()
prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
# sys.path as the installed script has it: its own directory first, not ""
sys.path[0] = os.path.dirname(sys.argv[1])
import runpy
import scrapy.cmdline
from scrapy.utils import misc

setup = json.loads(sys.argv[2])  # what the scripts run here import (ScrapyForks(preload=...))
sys.path[1:1] = setup["path"]
for name in setup["preload"]:
    __import__(name)

# every `scrapy` run imports all of Scrapy's commands first, whatever its own
list(getattr(misc, "walk_modules_iter", misc.walk_modules)("scrapy.commands"))
assert "twisted.internet.reactor" not in sys.modules  # each child installs its own
if not setup["path"]:  # serving `scrapy` runs: each imports scrapy-rep as its settings say
    assert "scrapy_rep" not in sys.modules
jobs = {}  # pid -> job number
server = os.getpid()
while True:
    ready, _, _ = select.select([0], [], [], 0.05)
    while jobs:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if not pid:
            break
        os.write(1, f"exit {jobs.pop(pid)} {os.waitstatus_to_exitcode(status)}\n".encode())
    if not ready:
        continue
    line = sys.stdin.buffer.readline()
    if not line:
        break
    job = json.loads(line)
    pid = os.fork()
    if pid:
        jobs[pid] = job["number"]
        os.write(1, f"started {job['number']} {pid}\n".encode())
        continue
    # the child: dies with the server, as the server dies with pytest
    prctl(1, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != server:  # the server died before the call above
        os._exit(1)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, job["stdout"], os.O_WRONLY | os.O_TRUNC),
                            (2, job["stderr"], os.O_WRONLY | os.O_TRUNC)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    # fresh streams on the new descriptors, as a new interpreter has
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    if job["script"]:
        # as `python SCRIPT ARGS` runs it: its directory first on the path, run as __main__
        sys.path[0] = os.path.dirname(job["script"])
        sys.argv = [job["script"], *job["args"]]
        runpy.run_path(job["script"], run_name="__main__")
        sys.exit(0)
    sys.argv = [sys.argv[1], *job["args"]]
    sys.exit(scrapy.cmdline.execute())
"""


class Run:
    """One command under way."""

    def __init__(self, number: int, pid: int, args: list[str], out: Path, err: Path) -> None:
        self.number, self.pid, self.args = number, pid, args
        self.out, self.err = out, err


class Process:
    """A script run as much of ``subprocess.Popen`` as the worker tests use."""

    def __init__(self, forks: ScrapyForks, run: Run) -> None:
        self._forks, self._run = forks, run
        self.pid = run.pid
        self.returncode: int | None = None

    def communicate(self, timeout: float) -> tuple[str, str]:
        ended = self._forks.wait(self._run, timeout)
        self.returncode = ended.returncode
        return ended.stdout, ended.stderr


class ScrapyForks:
    def __init__(self, preload: Sequence[str] = (), path: Sequence[str] = ()) -> None:
        """``preload``: modules the server imports too, found on ``path`` as
        well, for the scripts it runs (:meth:`popen`): never a reactor."""
        self._dir = tempfile.TemporaryDirectory(prefix="scrapy-forks-")
        setup = json.dumps({"preload": list(preload), "path": list(path)})
        self._server = children.popen(
            [sys.executable, "-c", _SERVER, SCRAPY, setup],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._numbers = 0
        self._exits: dict[int, int] = {}
        self._buffer = b""

    def popen(self, script: Path, *args: str) -> Process:
        """``python script *args`` started in this process's directory and
        environment (stdout and stderr kept, as with ``stdout=PIPE``)."""
        run = self.start(*args, cwd=Path.cwd(), env=dict(os.environ), script=script)
        return Process(self, run)

    def start(
        self, *args: str, cwd: Path, env: dict[str, str] | None = None, script: Path | None = None
    ) -> Run:
        """``scrapy *args`` started in ``cwd`` (with ``env``, else this process's
        environment without its SCRAPY_ variables); ``python script *args``
        if ``script`` is given."""
        if env is None:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}
        self._numbers += 1
        number = self._numbers
        out = Path(self._dir.name) / f"{number}.out"
        err = Path(self._dir.name) / f"{number}.err"
        out.touch()
        err.touch()
        job = {
            "number": number,
            "script": str(script) if script else None,
            "args": list(args),
            "cwd": str(cwd),
            "env": env,
            "stdout": str(out),
            "stderr": str(err),
        }
        assert self._server.stdin is not None
        self._server.stdin.write(json.dumps(job).encode() + b"\n")
        self._server.stdin.flush()
        pid, deadline = 0, time.monotonic() + 60
        while not pid:
            if time.monotonic() > deadline:
                raise RuntimeError("the scrapy fork server started nothing in 60 s")
            for word, job_number, value in self._lines(deadline):
                if word == "started" and job_number == number:
                    pid = value
        return Run(number, pid, list(args), out, err)

    def wait(self, run: Run, timeout: float) -> subprocess.CompletedProcess[str]:
        """The ended run, as ``subprocess.run(..., text=True)`` gives it; killed,
        and TimeoutExpired raised, after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while run.number not in self._exits:
            if time.monotonic() > deadline:
                with contextlib.suppress(OSError):
                    os.kill(run.pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired([SCRAPY, *run.args], timeout)
            for _ in self._lines(deadline):
                pass
        return subprocess.CompletedProcess(
            [SCRAPY, *run.args],
            self._exits.pop(run.number),
            run.out.read_text(),
            run.err.read_text(),
        )

    def run(
        self, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return self.wait(self.start(*args, cwd=cwd, env=env), timeout)

    def _lines(self, deadline: float) -> list[tuple[str, int, int]]:
        """The server's lines read until one came or ``deadline`` passed; exits kept."""
        assert self._server.stdout is not None
        fd = self._server.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"the scrapy fork server ended ({self._server.wait()})")
            self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        parsed = []
        for line in lines:
            word, number, value = line.decode().split()
            parsed.append((word, int(number), int(value)))
            if word == "exit":
                self._exits[int(number)] = int(value)
        return parsed

    def close(self) -> None:
        assert self._server.stdin is not None
        self._server.stdin.close()
        try:
            self._server.wait(10)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        assert self._server.stdout is not None
        self._server.stdout.close()
        self._dir.cleanup()


def scrapy_components() -> list[str]:
    """The modules of Scrapy's default components (middlewares, extensions,
    download handlers, scheduler, ...): what a crawl imports as it starts,
    after its reactor is installed, though none of them installs one."""
    from scrapy.settings import default_settings as d

    components = [
        *d.DOWNLOADER_MIDDLEWARES_BASE,
        *d.SPIDER_MIDDLEWARES_BASE,
        *d.EXTENSIONS_BASE,
        *(path for path in d.DOWNLOAD_HANDLERS_BASE.values() if path),
        d.SCHEDULER,
        d.DUPEFILTER_CLASS,
        d.STATS_CLASS,
        d.LOG_FORMATTER,
        d.SCHEDULER_PRIORITY_QUEUE,
        d.SCHEDULER_MEMORY_QUEUE,
        d.SCHEDULER_DISK_QUEUE,
        d.DOWNLOADER,
        d.ROBOTSTXT_PARSER,
    ]
    return [*sorted({path.rsplit(".", 1)[0] for path in components}), "scrapy.resolver"]


def scrapy_forks() -> Iterator[ScrapyForks]:
    """A module-scoped fixture body: ``yield from scrapy_forks()``. The server
    imports Scrapy's default components too (never scrapy-rep)."""
    forks = ScrapyForks(preload=scrapy_components())
    try:
        yield forks
    finally:
        forks.close()
