"""Fixtures of the web tests: a real server (SQLite, uvicorn on loopback) with a fake runtime."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    with running_server(tmp_path, lambda settings, store: FakeController(store)) as running:
        yield running


@pytest.fixture
def pg_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Running]:
    """The same server on a fresh PostgreSQL database (skips where PostgreSQL is absent)."""
    server: PostgresServer = request.getfixturevalue("postgres_server")
    url = server.create_database()
    with running_server(tmp_path, lambda settings, store: FakeController(store), db=url) as running:
        yield running
