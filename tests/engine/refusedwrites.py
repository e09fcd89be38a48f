"""A database that refuses writes for a while, as a full disk makes it: a fault injector at
the DB-API edge, for the store-failure tests (tests/engine/test_store_refusals.py).

SQLAlchemy's `do_execute`/`do_executemany` dialect hooks run where the driver would run
the statement: while refusing, a writing statement (INSERT, UPDATE, DELETE) raises the
driver's own disk-full error instead (`sqlite3.OperationalError` "database or disk is full",
psycopg's `DiskFull`), which SQLAlchemy wraps as it wraps the real one. Reads go through.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg.errors
from sqlalchemy import Engine, event

_WRITES = ("INSERT", "UPDATE", "DELETE")


class RefusedWrites:
    """Refuse the next `refuse(n)` writes on `engine`'s database, or all until `free()`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._postgres = engine.dialect.name == "postgresql"
        self._left = 0
        self.refused = 0
        """Writes refused so far."""
        event.listen(engine, "do_execute", self._execute)
        event.listen(engine, "do_executemany", self._execute)

    def refuse(self, count: int) -> None:
        self._left = count

    def fill(self) -> None:
        """Refuse every write from now on (the disk is full)."""
        self._left = 1 << 62

    def free(self) -> None:
        self._left = 0

    def close(self) -> None:
        event.remove(self._engine, "do_execute", self._execute)
        event.remove(self._engine, "do_executemany", self._execute)

    def _execute(self, cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
        if self._left <= 0 or not statement.lstrip().upper().startswith(_WRITES):
            return False  # not handled here: the driver runs it
        self._left -= 1
        self.refused += 1
        if self._postgres:
            raise psycopg.errors.DiskFull("could not extend file: No space left on device")
        raise sqlite3.OperationalError("database or disk is full")
