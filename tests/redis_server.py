"""A real redis-server for tests, on 127.0.0.1 and a free port.

Import as ``from redis_server import ...``. ``make test`` installs Debian's
redis-server when it is missing. Without it, tests that need Redis are skipped
with a message, except in CI (``CI=true``), where they fail: a green CI run
must have run them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any

import children
import pytest

MISSING = (
    "redis-server is not installed: `make test` installs it (Debian: apt-get install -y "
    "redis-server), or put one on PATH"
)


def shared(redis: RedisServer, prefix: str, **extra: Any) -> dict[str, Any]:
    """Settings of a crawl sharing its state through ``redis`` under ``prefix``."""
    return {"REP_REDIS_URL": redis.url, "REP_REDIS_PREFIX": prefix, **extra}


def require_redis_server() -> str:
    """The path of redis-server; skips the test (fails it in CI) when missing."""
    path = shutil.which("redis-server")
    if path is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(MISSING + " (CI=true: Redis tests must run)")
        pytest.skip(MISSING)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process without persistence; ``stop`` and ``start``
    again on the same port (a Redis outage and its end)."""

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="rep-redis-")
        self.process: subprocess.Popen[bytes] | None = None
        self.options: list[str] = []  # more redis-server options, from the next start

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = children.popen(  # dies with the suite, even on SIGKILL
            [
                self.executable,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                "--protected-mode",
                "no",
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            try:
                if self.client().ping():
                    return
            except OSError:
                pass
            except Exception as exc:
                if "Connection" not in type(exc).__name__:
                    raise
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer within 10 s")

    def stop(self) -> None:
        """Kill the server at once (SIGKILL): an outage, not a clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
