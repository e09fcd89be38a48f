"""Fixtures of the notification tests: a migrated database per backend (SQLite and
PostgreSQL, as in tests/store), emptied before each test, and a fake clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from reconciler.adapters.db import create_db_engine, upgrade_database
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.store.conftest import FakeClock, empty_all_tables


def migrated_url(url: str) -> str:
    engine = create_db_engine(url)
    upgrade_database(engine)
    engine.dispose()
    return url


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def notify_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return migrated_url(f"sqlite:///{tmp_path_factory.mktemp('notify') / 'dockyard.db'}")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return migrated_url(server.create_database())


@pytest.fixture
def engine(notify_db_url: str) -> Iterator[Engine]:
    engine = create_db_engine(notify_db_url)
    empty_all_tables(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
