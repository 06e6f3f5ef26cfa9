"""A TCP proxy in front of a real redis-server that cuts one script reply.

Import as ``from redis_proxy import ...``. It listens on 127.0.0.1 (a free
port) and forwards each client connection to Redis, reading the commands
and the replies (RESP) as they pass, so that it knows which reply answers
which command. Once ``arm()``-ed, the next reply of the script ``sha`` that
``carries`` says is worth cutting is not forwarded: both sides of that
connection are closed instead, as when Redis dies (or the network fails)
after it ran the script and before its reply reached the client. For
``down`` seconds after that, new connections are closed at once (Redis
restarting). ``fail(down)`` does the same to every connection at once,
whatever passes.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

Reply = Any
"""A parsed RESP value: bytes, int, None, an exception text, or a list."""


class Incomplete(Exception):
    """The buffer holds only part of a value."""


def parse(buffer: bytes, at: int = 0) -> tuple[Reply, int]:
    """One RESP2/RESP3 value from ``buffer[at:]`` and where it ends."""
    end = buffer.find(b"\r\n", at)
    if end < 0:
        raise Incomplete
    kind, line, at = buffer[at : at + 1], buffer[at + 1 : end], end + 2
    if kind in (b"+", b"-", b":", b",", b"(", b"#", b"_"):
        return (int(line) if kind == b":" else line), at
    if kind in (b"$", b"=", b"!"):
        size = int(line)
        if size < 0:
            return None, at
        if len(buffer) < at + size + 2:
            raise Incomplete
        return buffer[at : at + size], at + size + 2
    if kind in (b"*", b"~", b">", b"%", b"|"):
        count = int(line)
        if count < 0:
            return None, at
        items = []
        for _ in range(count * (2 if kind in (b"%", b"|") else 1)):
            item, at = parse(buffer, at)
            items.append(item)
        return items, at
    raise ValueError(f"not RESP: {buffer[at - len(line) - 3 : at]!r}")


def split(buffer: bytearray) -> list[tuple[Reply, bytes]]:
    """The complete values at the start of ``buffer`` (removed from it), each
    with its raw bytes."""
    values = []
    at = 0
    while at < len(buffer):
        try:
            value, end = parse(bytes(buffer), at)
        except Incomplete:
            break
        values.append((value, bytes(buffer[at:end])))
        at = end
    del buffer[:at]
    return values


class CuttingProxy:
    def __init__(self, upstream_port: int, sha: str, carries: Callable[[Reply], bool]) -> None:
        self.upstream_port = upstream_port
        self.sha = sha.encode()
        self.carries = carries
        self.down = 0.0
        self.cuts: list[Reply] = []  # the replies cut
        self.calls = 0  # script calls forwarded
        self.commands: Counter[str] = Counter()  # commands forwarded, by name
        self._armed = threading.Event()
        self._down_until = 0.0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, down: float = 0.0) -> None:
        """Cut the next script reply that ``carries`` accepts, then refuse
        connections for ``down`` seconds."""
        self.down = down
        self._armed.set()

    def fail(self, down: float) -> None:
        """Close every connection now and refuse new ones for ``down`` seconds:
        Redis killed and restarted with its data (an append-only file)."""
        self._down_until = time.monotonic() + down
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        """End the outage of :meth:`fail` now: new connections reach Redis."""
        self._down_until = 0.0

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                _close(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if time.monotonic() < self._down_until:
                _close(client)  # Redis is "restarting"
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets += [client, server]
            scripts: deque[bool] = deque()  # per command sent: is it the script?
            for pump in (self._commands, self._replies):
                threading.Thread(target=pump, args=(client, server, scripts), daemon=True).start()

    def _commands(self, client: socket.socket, server: socket.socket, scripts: deque[bool]) -> None:
        buffer = bytearray()
        try:
            while chunk := client.recv(65536):
                buffer += chunk
                for command, raw in split(buffer):
                    is_script = (
                        isinstance(command, list)
                        and len(command) > 1
                        and command[0].upper() == b"EVALSHA"
                        and command[1] == self.sha
                    )
                    scripts.append(is_script)
                    if isinstance(command, list) and command:
                        self.commands[bytes(command[0]).decode().upper()] += 1
                    if is_script:
                        self.calls += 1
                    server.sendall(raw)
        except OSError:
            pass
        _close(client)
        _close(server)

    def _replies(self, client: socket.socket, server: socket.socket, scripts: deque[bool]) -> None:
        buffer = bytearray()
        try:
            while chunk := server.recv(65536):
                buffer += chunk
                for reply, raw in split(buffer):
                    is_script = scripts.popleft() if scripts else False
                    if is_script and self._armed.is_set() and self.carries(reply):
                        self._armed.clear()
                        self.cuts.append(reply)
                        self._down_until = time.monotonic() + self.down
                        raise ConnectionAbortedError  # cut: the reply never reaches the client
                    client.sendall(raw)
        except OSError:
            pass
        _close(client)
        _close(server)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
