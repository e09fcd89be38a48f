"""Database URLs and the SQLite engine setup (WAL, foreign keys, busy timeout)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from reconciler.adapters.db.connecting import (
    create_db_engine,
    normalize_db_url,
    redact_url,
    resolve_db_url,
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
