"""Database URLs and the SQLite engine setup (WAL, foreign keys, busy timeout, write turns)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.exc import OperationalError

from reconciler.adapters.db.connecting import (
    create_db_engine,
    normalize_db_url,
    redact_url,
    resolve_db_url,
    writer_engine,
)
from reconciler.errors import UsageError


def test_default_is_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    url = resolve_db_url(None, tmp_path / "data")
    assert url == f"sqlite:///{(tmp_path / 'data' / 'dockyard.db').resolve()}"
    assert (tmp_path / "data").is_dir()
    assert resolve_db_url("sqlite:////x/y.db", tmp_path) == "sqlite:////x/y.db"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
        ("postgres://u:p@h:5433/db", "postgresql+psycopg://u:p@h:5433/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
    ],
)
def test_postgres_urls_use_psycopg3(given: str, expected: str) -> None:
    assert normalize_db_url(given) == expected


def test_bad_urls_are_usage_errors_without_the_password() -> None:
    with pytest.raises(UsageError, match="unsupported database 'mysql'"):
        normalize_db_url("mysql://u:hunter2@h/db")
    with pytest.raises(UsageError, match="not a database URL"):
        normalize_db_url("not a url")
    assert "hunter2" not in redact_url("postgresql://u:hunter2@h/db")


def test_sqlite_pragmas(tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 30000
    engine.dispose()


def test_in_memory_sqlite_is_one_database_for_all_threads() -> None:
    import threading

    from reconciler.adapters.db import Store

    store = Store.from_url("sqlite://", migrate=True)
    thread = threading.Thread(target=store.get_or_create_project, args=("main",))
    thread.start()
    thread.join(timeout=30)
    assert [p.name for p in store.list_projects()] == ["main"]
    store.close()


def _no_busy_wait(engine: Engine) -> None:
    """SQLite gives up at once when the write lock is taken (no busy handler)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout=0")


def test_writers_of_one_process_take_sqlites_write_lock_in_turn(tmp_path: Path) -> None:
    # Without the turn, two threads' `BEGIN IMMEDIATE` at once fail with "database is
    # locked" here (no busy handler); with it, a writer waits for the one before it.
    engine = create_db_engine(f"sqlite:///{tmp_path / 'turns.db'}")
    _no_busy_wait(engine)
    writer = writer_engine(engine)
    with writer.begin() as connection:
        connection.execute(text("CREATE TABLE counter (n INTEGER)"))
        connection.execute(text("INSERT INTO counter VALUES (0)"))
    errors: list[BaseException] = []

    def increment(times: int) -> None:
        try:
            for _ in range(times):
                with writer.begin() as connection:
                    n = connection.execute(text("SELECT n FROM counter")).scalar_one()
                    connection.execute(text("UPDATE counter SET n = :n"), {"n": n + 1})
        except BaseException as exc:  # collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=increment, args=(40,)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    with engine.connect() as connection:
        assert connection.execute(text("SELECT n FROM counter")).scalar_one() == 240
    engine.dispose()


def test_a_failed_write_gives_its_turn_back(tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'turns.db'}")
    _no_busy_wait(engine)
    writer = writer_engine(engine)
    with pytest.raises(OperationalError), writer.begin() as connection:
        connection.execute(text("SELECT * FROM no_such_table"))
    done = threading.Event()

    def write() -> None:
        with writer.begin() as connection:
            connection.execute(text("CREATE TABLE t (n INTEGER)"))
        done.set()

    other = threading.Thread(target=write, daemon=True)
    other.start()
    assert done.wait(timeout=20), "the next writer waited for a turn nobody held"
    engine.dispose()
