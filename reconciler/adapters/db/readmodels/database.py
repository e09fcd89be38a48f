"""How request handlers reach the database without blocking the event loop.

The store is synchronous SQLAlchemy; `Database.read(fn, *args)` and `.write(fn, *args)` run
`fn(session, *args)` in a worker thread with a fresh session (writes in a `BEGIN IMMEDIATE`
transaction on SQLite, committed when `fn` returns): one unit of work per call. The
functions are the read models of this package; they return wire models, never ORM rows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Concatenate, ParamSpec, TypeVar

import anyio.to_thread
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from reconciler.adapters.db.connecting import writer_engine

P = ParamSpec("P")
T = TypeVar("T")


class Database:
    """Session factory for the web layer (one engine, shared with the runtime)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer = writer_engine(engine)

    def read_now(self, fn: Callable[Concatenate[Session, P], T], *a: P.args, **k: P.kwargs) -> T:
        with Session(self.engine, expire_on_commit=False) as session:
            return fn(session, *a, **k)

    def write_now(self, fn: Callable[Concatenate[Session, P], T], *a: P.args, **k: P.kwargs) -> T:
        with Session(self._writer, expire_on_commit=False) as session, session.begin():
            return fn(session, *a, **k)

    async def read(self, fn: Callable[Concatenate[Session, P], T], *a: P.args, **k: P.kwargs) -> T:
        return await anyio.to_thread.run_sync(partial(self.read_now, fn, *a, **k))

    async def write(self, fn: Callable[Concatenate[Session, P], T], *a: P.args, **k: P.kwargs) -> T:
        return await anyio.to_thread.run_sync(partial(self.write_now, fn, *a, **k))
