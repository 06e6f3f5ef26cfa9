"""Shared fixtures: real local HTTP servers (see servers.py) and crawl helpers (crawls.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from servers import ScriptedServer


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
