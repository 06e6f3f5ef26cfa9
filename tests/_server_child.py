"""The process every test HTTP server of a pytest process listens in (servers.py).

Started by servers.py with two socket ends: calls from the test process
(``(op, *args)``, answered ``(ok, value)`` in order), and the way back (a
script to call there, a gate opened here). It ends when the test process's
end of the first one closes (pytest ended), or when pytest dies
(``children.popen``: Linux's death signal).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

import servers
from servers import PAGE, SENT_HEADER, Await, Flood, Hit, InTurn, Pause, Reply


class _Gate:
    """A gate's side here: opened by the test process, or by a reply (``opens``)."""

    def __init__(self, gate_id: int, is_set: bool, after: int) -> None:
        self.id = gate_id
        self.event = threading.Event()
        self.left = after  # openings by replies until it is set
        if is_set:
            self.event.set()

    def open_once(self) -> None:
        with _gates_lock:
            self.left -= 1
            now = self.left == 0
        if now:
            self.event.set()
            _back.opened(self.id)

    def wait(self, timeout: float | None) -> bool:
        return self.event.wait(timeout)

    def is_set(self) -> bool:
        return self.event.is_set()


_gates: dict[int, _Gate] = {}
_gates_lock = threading.Lock()


def _gate(gate_id: int, is_set: bool, after: int = 1) -> _Gate:
    with _gates_lock:
        gate = _gates.get(gate_id)
        if gate is None:
            gate = _gates[gate_id] = _Gate(gate_id, is_set, after)
        return gate


_turns: dict[int, int] = {}
_turns_lock = threading.Lock()


def _in_turn(script: InTurn) -> Reply:
    with _turns_lock:
        number = _turns[script.id] = _turns.get(script.id, 0) + 1
    return script.replies[min(number, len(script.replies)) - 1]


servers._IN_CHILD = _gate


class _Back:
    """Calls to the test process: a script's reply (the caller waits), a gate opened."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.ids = count(1)
        self.waiting: dict[int, tuple[threading.Event, list[Any]]] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def reply(self, callback_id: int, host: str, path: str, number: int) -> Reply | None:
        call_id = next(self.ids)
        done, answer = self.waiting[call_id] = (threading.Event(), [])
        with self.lock:
            self.conn.send(("call", call_id, callback_id, host, path, number))
        done.wait()
        return answer[0]  # type: ignore[no-any-return]

    def opened(self, gate_id: int) -> None:
        with self.lock:
            self.conn.send(("gate", gate_id))

    def _read(self) -> None:
        while True:
            try:
                call_id, reply = self.conn.recv()
            except (EOFError, OSError):
                os._exit(0)
            done, answer = self.waiting.pop(call_id)
            answer.append(reply)
            done.set()


class _Record:
    __slots__ = ("arrived", "headers", "host", "path", "status", "time")

    def __init__(self, path: str, headers: dict[str, str], host: str) -> None:
        self.arrived = time.time()
        sent = headers.get(SENT_HEADER)  # when the crawler sent it (sent_stamp.py)
        self.time = float(sent) if sent else self.arrived
        self.path = path
        self.headers = headers
        self.host = host
        self.status = 0

    def hit(self) -> Hit:
        return Hit(self.path, self.time, self.headers, self.host, self.arrived, self.status)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # many origins connect at once in broad-crawl tests

    def __init__(self, host: str) -> None:
        super().__init__((host, 0), _Handler)
        self.lock = threading.Lock()
        self.scripts: dict[str | None, Any] = {}
        self.records: list[_Record] = []
        self.counts: dict[str, int] = {}
        self.written: dict[str, list[int]] = {}
        self.in_flight: dict[str, int] = {}
        self.peaks: dict[str, int] = {}
        self.robots_in_flight = 0
        self.robots_peak = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        # No polling loop (many servers, two cores): close() ends accept().
        while True:
            try:
                request, address = self.get_request()
            except OSError:
                return
            self.process_request(request, address)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.server_close()

    def arrived(
        self, raw_path: str, path: str, headers: dict[str, str], host: str
    ) -> tuple[_Record, int]:
        record = _Record(raw_path, headers, host)
        with self.lock:
            self.records.append(record)
            number = self.counts[path] = self.counts.get(path, 0) + 1
            if path == "/robots.txt":
                self.robots_in_flight += 1
                self.robots_peak = max(self.robots_peak, self.robots_in_flight)
            else:
                now = self.in_flight[host] = self.in_flight.get(host, 0) + 1
                self.peaks[host] = max(self.peaks.get(host, 0), now)
        return record, number

    def left(self, path: str, host: str) -> None:
        with self.lock:
            if path == "/robots.txt":
                self.robots_in_flight -= 1
            else:
                self.in_flight[host] -= 1

    def reply_for(self, host: str, path: str, number: int) -> Reply | None:
        with self.lock:
            script = self.scripts.get(path)
            if script is None:
                script = self.scripts.get(None)
        if script is None:
            return Reply(body=PAGE)
        if isinstance(script, Reply):
            return script
        if isinstance(script, InTurn):
            return _in_turn(script)
        if isinstance(script, tuple):  # ("call", id): the test process answers
            return _back.reply(script[1], host, path, number)
        return script[min(number, len(script)) - 1]  # type: ignore[no-any-return]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        server = self.server
        path = urlsplit(self.path).path
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        record, number = server.arrived(self.path, path, dict(self.headers.items()), host)
        counted = True
        try:
            reply = server.reply_for(host, path, number)
            if reply is None:  # the test process's script failed
                self.close_connection = True
                return
            if reply.if_none_match is not None:
                etag, instead = reply.if_none_match
                if self.headers.get("If-None-Match") == etag:
                    reply = instead
            record.status = 0 if reply.raw is not None else reply.status
            if reply.opens is not None:
                reply.opens.open_once()  # type: ignore[attr-defined]
            if reply.wait_for is not None:
                reply.wait_for.wait(reply.wait_timeout)
            if reply.delay:
                if reply.hang_up_on is not None:
                    delay = None if reply.delay == float("inf") else reply.delay
                    if reply.hang_up_on.wait(delay):
                        self.close_connection = True
                        return
                else:
                    time.sleep(reply.delay)
            # Counted out before the answer is written: once the client has it,
            # it may send the next request before this thread runs again.
            counted = False
            server.left(path, host)
            if reply.raw is not None:
                self.close_connection = True
                self._play(reply, path)
                return
            self._answer(reply)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (size cap, timeout)
        finally:
            if counted:
                server.left(path, host)

    def _answer(self, reply: Reply) -> None:
        self.send_response(reply.status)
        headers = reply.headers
        pairs = list(headers.items() if isinstance(headers, dict) else headers)
        if not any(name.lower() == "content-type" for name, _ in pairs):
            content_type = "text/html" if reply.status == 200 else "text/plain"
            pairs.insert(0, ("Content-Type", content_type))
        for name, value in pairs:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if not reply.chunk_size:
            self.wfile.write(reply.body)
            return
        for start in range(0, len(reply.body), reply.chunk_size):
            self.wfile.write(reply.body[start : start + reply.chunk_size])
            self.wfile.flush()

    def _play(self, reply: Reply, path: str) -> None:
        assert reply.raw is not None
        written = 0
        try:
            for part in reply.raw.parts:
                if isinstance(part, bytes):
                    self.wfile.write(part)
                    self.wfile.flush()
                    written += len(part)
                elif isinstance(part, Pause):
                    time.sleep(part.seconds)
                elif isinstance(part, Await):
                    part.gate.wait(part.timeout)
                elif isinstance(part, Flood):
                    deadline = time.monotonic() + part.seconds
                    while time.monotonic() < deadline:
                        self.wfile.write(part.block)
                        written += len(part.block)
                    self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should
        finally:
            with self.server.lock:
                self.server.written.setdefault(path, []).append(written)

    def log_message(self, format: str, *args: Any) -> None:
        pass


_servers: dict[int, _Server] = {}
_server_ids = count(1)


def _call(op: str, *args: Any) -> Any:
    if op == "open":
        server = _Server(args[0])
        server_id = next(_server_ids)
        _servers[server_id] = server
        return server_id, server.server_address[1]
    if op == "forget":
        if (gone := _servers.pop(args[0], None)) is not None:
            gone.close()
        return None
    if op == "gate":
        gate = _gate(*args)
        (gate.event.set if args[1] else gate.event.clear)()
        return None
    server = _servers[args[0]]
    if op == "script":
        with server.lock:
            server.scripts[args[1]] = args[2]
        return None
    if op == "close":
        server.close()
        return None

    with server.lock:
        if op == "hits":
            return len(server.records) if args[1] is None else server.counts.get(args[1], 0)
        if op == "log":
            return [record.hit() for record in server.records]
        if op == "written":
            return list(server.written.get(args[1], []))
        if op == "peaks":
            return dict(server.peaks), server.robots_peak
    raise ValueError(f"unknown call {op!r}")


def main() -> None:
    calls_fd, back_fd = (int(fd) for fd in os.environ["SERVER_FDS"].split(","))
    calls = Connection(calls_fd)
    global _back
    _back = _Back(Connection(back_fd))
    while True:
        try:
            op, *args = calls.recv()
        except (EOFError, OSError):
            os._exit(0)
        try:
            result = (True, _call(op, *args))
        except Exception as exc:
            result = (False, f"{type(exc).__name__}: {exc}")
        calls.send(result)


_back: _Back

if __name__ == "__main__":
    main()
