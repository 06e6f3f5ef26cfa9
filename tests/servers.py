"""Real local HTTP servers for component tests (import as ``from servers import ...``).

Every server listens in ONE child process per pytest process (``_server_child.py``,
started at first use, gone when pytest ends or dies), out of the crawler's
process: the reactor under test does not share its GIL with them. A
``ScriptedServer`` here is a handle on one listening socket there.

Each path can be scripted with a :class:`Reply` (or a list of them, served in
turn, the last one repeated), played in the child; a function of the hit
number is called back in this process (for a test needing its state: a
crawler's stats, an event). Unscripted paths answer 200 with a small HTML
page. Every hit is recorded (path, time, headers) so tests assert on what
reached the server.

    with ScriptedServer() as site:
        site.script("/robots.txt", Reply(body=b"User-agent: *\\nDisallow: /private\\n"))
        ...crawl site.url("/private/a")...
        assert site.hits("/private/a") == 0
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import count, pairwise
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from children import popen


class Gate:
    """An event a reply may wait for (``Reply.wait_for``, ``Raw`` parts), seen
    on both sides: ``set()`` here opens it in the server process, and replies
    played there with ``opens=`` open it (the ``after``-th of them) for both
    (``wait()``, ``is_set()`` here)."""

    _ids = count(1)

    def __init__(self, after: int = 1) -> None:
        self.id = next(Gate._ids)
        self.after = after
        self._event = threading.Event()
        _GATES[self.id] = self

    def set(self) -> None:
        self._event.set()
        _child_if_running(lambda child: child.call("gate", self.id, True, self.after))

    def clear(self) -> None:
        self._event.clear()
        _child_if_running(lambda child: child.call("gate", self.id, False, self.after))

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_gate_ref, (self.id, self._event.is_set(), self.after))


_GATES: dict[int, Gate] = {}


def _gate_ref(gate_id: int, is_set: bool, after: int) -> Any:
    """A gate as the receiving process knows it (in the child: its own event)."""
    if _IN_CHILD is not None:
        return _IN_CHILD(gate_id, is_set, after)
    return _GATES[gate_id]


_IN_CHILD: Callable[[int, bool, int], Any] | None = None
"""Set by the server process: how it turns a gate's id into its own event."""


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class Flood:
    """``block`` written again and again for ``seconds`` (or until the client hangs up)."""

    block: bytes
    seconds: float


@dataclass(frozen=True)
class Await:
    """Go on once ``gate`` is set (or after ``timeout`` seconds)."""

    gate: Gate
    timeout: float


@dataclass(frozen=True)
class Raw:
    """A whole answer, status line included, played part by part (a header
    flood, a lying Content-Length, headers now and the body later); the bytes
    each play got into the connection are kept (``ScriptedServer.written``)."""

    parts: tuple[bytes | Pause | Flood | Await, ...]

    def __init__(self, *parts: bytes | Pause | Flood | Await) -> None:
        object.__setattr__(self, "parts", parts)


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] | list[tuple[str, str]] = field(default_factory=dict)
    """Response headers; a list of pairs may repeat a name (two X-Robots-Tag lines)."""
    delay: float = 0.0
    """Seconds to wait before answering (timeouts, slow robots.txt)."""
    wait_for: Gate | None = None
    """Answer only once this gate is set (or after ``wait_timeout``)."""
    wait_timeout: float = 10.0
    chunk_size: int = 0
    """Send the body in chunks of this size (0: at once)."""
    raw: Raw | None = None
    """Play this instead: the other fields are then unused."""
    opens: Gate | None = None
    """Open this gate (its ``after``-th opening sets it) as the request
    arrives, before any wait."""
    if_none_match: tuple[str, Reply] | None = None
    """``(etag, reply)``: a request whose If-None-Match is ``etag`` gets
    ``reply`` instead (a 304 to a revalidation)."""
    hang_up_on: Gate | None = None
    """During ``delay`` (``float("inf")``: no end), close the connection
    unanswered if this gate gets set."""


class InTurn:
    """Replies handed out in arrival order across every path scripted with
    this one object, the last one repeated ("the 4th of these pages is
    slow"), played in the server process."""

    _ids = count(1)

    def __init__(self, *replies: Reply) -> None:
        self.id = next(InTurn._ids)
        self.replies = replies


Script = Reply | InTurn | Sequence[Reply] | Callable[[int], Reply]


SENT_HEADER = "X-Test-Sent"
"""Set by the test crawls' download handler (sent_stamp.py): when the crawler sent it."""


@dataclass(frozen=True)
class Hit:
    path: str
    time: float
    """When the crawler sent the request (``SENT_HEADER``), else when it arrived."""
    headers: dict[str, str]
    host: str = ""
    """The Host header's name (no port)."""
    arrived: float = 0.0
    """When it arrived at the server (``time.time()``)."""
    status: int = 0
    """The status answered (0: not decided yet, or a raw answer)."""


PAGE = b"<html><body><p>ok</p></body></html>"


# -- the server process ------------------------------------------------------------------------


class _Child:
    """The server process and its two channels: calls from here (one at a
    time), and calls from there (a test-process script, a gate opened there),
    each answered by a thread of its own."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        back_ours, back_theirs = socket.socketpair()
        self.pid = os.getpid()
        self.process = popen(  # killed by Linux if pytest dies (children.py)
            [sys.executable, str(Path(__file__).with_name("_server_child.py"))],
            pass_fds=(theirs.fileno(), back_theirs.fileno()),
            env={**os.environ, "SERVER_FDS": f"{theirs.fileno()},{back_theirs.fileno()}"},
        )
        theirs.close()
        back_theirs.close()
        self._conn = Connection(ours.detach())
        self._back = Connection(back_ours.detach())
        self._lock = threading.Lock()
        self._back_lock = threading.Lock()
        self.callbacks: dict[int, Callable[[str, str, int], Reply]] = {}
        self.forgotten: list[int] = []
        threading.Thread(target=self._serve_back, daemon=True, name="servers-back").start()

    def call(self, op: str, *args: Any) -> Any:
        with self._lock:
            while self.forgotten:  # handles gone: their records go too
                self._conn.send(("forget", self.forgotten.pop()))
                self._conn.recv()
            self._conn.send((op, *args))
            ok, value = self._conn.recv()
        if not ok:
            raise RuntimeError(f"server process: {value}")
        return value

    def _serve_back(self) -> None:
        while True:
            try:
                message = self._back.recv()
            except (EOFError, OSError):
                return
            if message[0] == "gate":
                gate = _GATES.get(message[1])
                if gate is not None:
                    gate._event.set()
                continue
            threading.Thread(target=self._answer, args=message[1:], daemon=True).start()

    def _answer(self, call_id: int, callback_id: int, host: str, path: str, number: int) -> None:
        try:
            reply: Reply | None = self.callbacks[callback_id](host, path, number)
        except BaseException:  # the request is closed unanswered, as a crashed handler did
            import traceback

            traceback.print_exc()
            reply = None
        with self._back_lock:
            self._back.send((call_id, reply))

    def stop(self) -> None:
        if os.getpid() != self.pid:  # a forked copy of the test process: not its child
            return
        self._conn.close()
        self._back.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_CHILD: _Child | None = None
_CHILD_LOCK = threading.Lock()
_CALLBACK_IDS = count(1)


def _child() -> _Child:
    global _CHILD
    with _CHILD_LOCK:
        if _CHILD is None or _CHILD.pid != os.getpid():  # a forked test process: its own
            _CHILD = _Child()
            atexit.register(_CHILD.stop)
        return _CHILD


def _child_if_running(action: Callable[[_Child], Any]) -> None:
    child = _CHILD
    if child is not None and child.pid == os.getpid():
        action(child)


def _callback(function: Callable[[str, str, int], Reply]) -> tuple[str, int]:
    child = _child()
    callback_id = next(_CALLBACK_IDS)
    child.callbacks[callback_id] = function
    return ("call", callback_id)


def _data(script: Reply | InTurn | Sequence[Reply]) -> Reply | InTurn | list[Reply]:
    return script if isinstance(script, Reply | InTurn) else list(script)


# -- servers -----------------------------------------------------------------------------------


class ScriptedServer:
    """An HTTP server on ``host`` (port 0) with per-path scripted replies and hit counts."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._child = _child()
        self.host = host
        self._id, self.port = self._child.call("open", host)
        self._callbacks: list[int] = []
        self._closed = False
        weakref.finalize(self, self._child.forgotten.append, self._id)

    # -- scripting -------------------------------------------------------------

    def script(self, path: str, reply: Script) -> None:
        """Answer ``path`` so (a function of the hit number: called back here)."""
        spec: Any
        if callable(reply) and not isinstance(reply, Reply | InTurn):
            function = reply
            spec = self._keep(_callback(lambda host, path, number: function(number)))
        else:
            spec = _data(reply)
        self._child.call("script", self._id, path, spec)

    def script_by_host(self, path: str, function: Callable[[str, int], Reply]) -> None:
        """Answer ``path`` with ``function(host, hit number)``, called back here
        (one server answering for many host names)."""
        spec = self._keep(_callback(lambda host, path, number: function(host, number)))
        self._child.call("script", self._id, path, spec)

    def answer_unscripted(self, reply: Reply | Callable[[str, str, int], Reply]) -> None:
        """Answer every unscripted path so (a function of host, path and hit
        number: called back here), instead of the small HTML page."""
        spec = reply if isinstance(reply, Reply) else self._keep(_callback(reply))
        self._child.call("script", self._id, None, spec)

    def _keep(self, spec: tuple[str, int]) -> tuple[str, int]:
        self._callbacks.append(spec[1])
        return spec

    def robots(self, body: bytes | str, **kwargs: Any) -> None:
        """Script /robots.txt as a 200 with this body."""
        if isinstance(body, str):
            body = body.encode()
        self.script(
            "/robots.txt", Reply(body=body, headers={"Content-Type": "text/plain"}, **kwargs)
        )

    # -- what reached the server ---------------------------------------------

    def hits(self, path: str | None = None) -> int:
        """Hits on ``path`` (query ignored), or on all paths."""
        return int(self._child.call("hits", self._id, path))

    def paths(self) -> list[str]:
        """Every path requested (with query), in arrival order."""
        return [hit.path for hit in self.log()]

    def log(self) -> list[Hit]:
        return list(self._child.call("log", self._id))

    def page_hits(self, prefix: str = "/") -> list[Hit]:
        """Hits on paths starting with ``prefix``, robots.txt excepted, in order."""
        return [h for h in self.log() if h.path.startswith(prefix) and h.path != "/robots.txt"]

    def pages(self) -> list[str]:
        """Paths requested, robots.txt excepted, in arrival order."""
        return [hit.path for hit in self.page_hits()]

    def written(self, path: str) -> list[int]:
        """Bytes each finished ``Raw`` answer on ``path`` got into the connection."""
        return list(self._child.call("written", self._id, path))

    def in_flight_peaks(self) -> tuple[dict[str, int], int]:
        """The most page requests each host had in flight at once, and the most
        robots.txt requests in flight at once (all hosts together); a request
        counts out once its answer is decided, before it is written."""
        peaks, robots = self._child.call("peaks", self._id)
        return dict(peaks), int(robots)

    # -- addresses -------------------------------------------------------------

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str = "/") -> str:
        return self.origin + path

    def close(self) -> None:
        """Stop listening (what reached it can still be read)."""
        if self._closed:
            return
        self._closed = True
        self._child.call("close", self._id)
        for callback_id in self._callbacks:
            self._child.callbacks.pop(callback_id, None)

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gaps(hits: Iterable[Hit | float]) -> list[float]:
    """Seconds between consecutive arrivals (hits or times), in time order, to the ms."""
    times = sorted(h.time if isinstance(h, Hit) else h for h in hits)
    return [round(b - a, 3) for a, b in pairwise(times)]


_OWN_ADDRESSES = count()


def own_address() -> str:
    """A loopback address few other tests use (127.0.0.20 to 127.0.0.249), for a site
    whose stop or pause, kept by host, must touch no other test's site."""
    return f"127.0.0.{next(_OWN_ADDRESSES) % 230 + 20}"


def refused_port() -> int:
    """A local port nothing listens on (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
