"""Fixtures of the store tests: every test runs on SQLite and on PostgreSQL.

`db_url` is a migrated database per backend for the session; `store` empties it before each
test and hands a `Store` with a `FakeClock`, so timestamps are exact and tests never sleep.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from reconciler.adapters.db import Store, create_db_engine, upgrade_database
from reconciler.adapters.db.models import Base
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401

START = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime = START) -> None:
        self.ts = start.timestamp()

    def now_ts(self) -> float:
        return self.ts

    def advance(self, seconds: float) -> None:
        self.ts += seconds


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated database URL, once per backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'dockyard.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        url = server.create_database()
    engine = create_db_engine(url)
    upgrade_database(engine)
    engine.dispose()
    return url


@pytest.fixture(scope="session")
def db_engine(db_url: str) -> Iterator[Engine]:
    engine = create_db_engine(db_url)
    yield engine
    engine.dispose()


def empty_all_tables(engine: Engine) -> None:
    tables = [table.name for table in Base.metadata.sorted_tables]
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(text(f"TRUNCATE {', '.join(tables)} CASCADE"))
        else:
            for name in reversed(tables):
                connection.execute(text(f"DELETE FROM {name}"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(db_engine: Engine, clock: FakeClock) -> Store:
    empty_all_tables(db_engine)
    return Store(db_engine, clock=clock)


@pytest.fixture
def sqlite_file(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'dockyard.db'}"
