"""A server on SQLite for months: one big write leaves no big write-ahead log behind."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import text

from reconciler.adapters.db.connecting import SQLITE_WAL_LIMIT, create_db_engine


def test_the_wal_is_cut_back_after_a_big_transaction(tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'dockyard.db'}")
    wal = tmp_path / "dockyard.db-wal"
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE blobs (data BLOB)"))
    with engine.begin() as connection:  # ~12 MB in one transaction: the log must hold it all
        for _ in range(3000):
            connection.execute(text("INSERT INTO blobs VALUES (:d)"), {"d": os.urandom(4000)})
    assert wal.stat().st_size > 2 * SQLITE_WAL_LIMIT
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM blobs"))
    for _ in range(5):  # the checkpoint after the big commit, then writes that restart the log
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO blobs VALUES (x'00')"))
    assert wal.stat().st_size <= SQLITE_WAL_LIMIT
    engine.dispose()
