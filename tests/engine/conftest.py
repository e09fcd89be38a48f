"""Engine test fixtures: `db_url` gives a fresh database per test, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'dockyard.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()
