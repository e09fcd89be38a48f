"""The session plumbing every part of the `Store` shares: read and write transactions, now.

`StoreBase` owns the engine, the clock and three session factories: reads begin a plain
transaction, writes begin with SQLite's write lock (`writer_engine`) so read-then-write
methods never fail with "database is locked" under concurrency, and reads that need no
snapshot across their statements begin none (`unpinned_engine`). Sessions do not expire on
commit, so the rows a method returns stay readable after the session is closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import Engine, Table, update
from sqlalchemy.orm import Session, sessionmaker

from reconciler.adapters.db.connecting import unpinned_engine, writer_engine
from reconciler.adapters.db.lanes import P, T, lane_for
from reconciler.adapters.db.models import Base
from reconciler.ports import Clock

RowT = TypeVar("RowT", bound=Base)


class SystemClock:
    """The real clock (`time.time`)."""

    def now_ts(self) -> float:
        return time.time()


class StoreBase:
    """Engine, clock and transactions; the parts of the `Store` build on this."""

    def __init__(self, engine: Engine, *, clock: Clock | None = None) -> None:
        self.engine = engine
        self.clock: Clock = clock or SystemClock()
        self._readers = sessionmaker(engine, expire_on_commit=False)
        self._writers = sessionmaker(writer_engine(engine), expire_on_commit=False)
        self._unpinned = sessionmaker(unpinned_engine(engine), expire_on_commit=False)
        self.lane = lane_for(engine.dialect.name)

    async def in_lane(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn` (units of work of this store, or a step made of them) in the store's
        lane (`lanes.py`): the workers' hot path, off the event loop, in few threads."""
        return await self.lane.run(fn, *args, **kwargs)

    def now(self) -> datetime:
        """The clock's now as an aware UTC datetime."""
        return datetime.fromtimestamp(self.clock.now_ts(), UTC)

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for reads; rolled back at the end."""
        with self._readers() as session:
            yield session

    @contextmanager
    def reading_unpinned(self) -> Iterator[Session]:
        """A session for a read whose statements need no snapshot in common (one
        statement, or statements each whole alone): on SQLite no `BEGIN` and no rollback
        around them (`unpinned_engine`), each sees what was committed when it ran. The
        workers' hot reads of one statement (a claimed batch, placement candidates)."""
        with self._unpinned() as session:
            yield session

    @contextmanager
    def writing(self) -> Iterator[Session]:
        """A session in a write transaction, committed when the block ends without error."""
        with self._writers() as session, session.begin():
            yield session

    # -- generic CRUD, for tables without a dedicated method -------------------------------

    def add(self, row: RowT) -> RowT:
        """Insert `row` (a model instance built by the caller) and return it."""
        with self.writing() as session:
            session.add(row)
        return row

    def add_all(self, rows: Sequence[RowT]) -> list[RowT]:
        """Insert several rows in one transaction and return them."""
        with self.writing() as session:
            session.add_all(rows)
        return list(rows)

    def get(self, model: type[RowT], row_id: str) -> RowT | None:
        """The row of `model` with this id, or None."""
        with self.reading() as session:
            return session.get(model, row_id)

    def update(self, model: type[RowT], row_id: str, **values: object) -> bool:
        """Set columns of one row (unfenced: API writes, not workers); False if no such row."""
        table = model.__table__
        assert isinstance(table, Table)
        with self.writing() as session:
            result = session.execute(update(table).where(table.c.id == row_id).values(**values))
        return bool(getattr(result, "rowcount", 0))
