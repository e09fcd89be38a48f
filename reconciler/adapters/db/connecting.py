"""Opening the database: the URL rules and the per-dialect engine setup.

`resolve_db_url` picks the URL (an explicit `--db` wins, else the SQLite file
`<data-dir>/dockyard.db`); `create_db_engine` builds an engine with the settings Dockyard
relies on: on SQLite WAL mode (its log cut back to `SQLITE_WAL_LIMIT` whenever a checkpoint
found it longer, so a busy moment does not leave a big file for good), foreign keys on, a
busy timeout and real transactions (explicit `BEGIN`, `BEGIN IMMEDIATE` for writers, see
`writer_engine`; none for the reads that need no snapshot, `unpinned_engine`); on
PostgreSQL the psycopg 3 driver and a pre-pinged pool. Called by the `Store`, `dockyard db
upgrade` and the server's composition root.

SQLite writers of one process take the write lock in turn (`WriteTurn`): a thread waits on
a Python lock, woken the moment the writer before it ends, instead of in SQLite's busy
handler, which sleeps 1, 2, 5 … 100 ms between tries (under load a writer slept up to
0.9 s while the lock was free: bench/reconcile.py). Other processes on the same file are
still waited for by the busy timeout.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from reconciler.errors import UsageError

DEFAULT_DATA_DIR = Path("~/.dockyard/data")
DB_FILE_NAME = "dockyard.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_WAL_LIMIT = 4 * 2**20  # bytes: about the 1,000 pages after which SQLite checkpoints
_SQLITE_BEGIN_OPTION = "dockyard_sqlite_begin"


def default_data_dir() -> Path:
    """The data dir when none is given: `~/.dockyard/data`, expanded."""
    return DEFAULT_DATA_DIR.expanduser()


def resolve_db_url(db: str | None, data_dir: Path | None) -> str:
    """The database URL to use: `db` if given, else the SQLite file in the data dir.

    `postgresql://` and `postgres://` are read as `postgresql+psycopg://` (the driver Dockyard
    ships). The data dir is created when the SQLite default is used.
    """
    if db:
        return normalize_db_url(db)
    directory = (data_dir or default_data_dir()).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory.resolve() / DB_FILE_NAME}"


def normalize_db_url(db: str) -> str:
    """Check a user-given URL and map plain PostgreSQL URLs to the psycopg 3 driver."""
    if db.startswith("postgres://"):
        db = "postgresql://" + db.removeprefix("postgres://")
    try:
        url = make_url(db)
    except ArgumentError as exc:
        raise UsageError(f"not a database URL: {redact_url(db)}") from exc
    if url.get_backend_name() not in ("sqlite", "postgresql"):
        raise UsageError(
            f"unsupported database {url.get_backend_name()!r}: use sqlite:///PATH "
            "or postgresql+psycopg://USER:PASSWORD@HOST/DB"
        )
    if url.drivername == "postgresql" or url.get_driver_name() == "psycopg2":
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def redact_url(db: str | URL) -> str:
    """The URL with its password masked, for messages and logs."""
    try:
        return make_url(db).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def create_db_engine(db_url: str, *, pool_size: int = 20, echo: bool = False) -> Engine:
    """An engine for `db_url` set up as described in the module docstring."""
    url = make_url(normalize_db_url(db_url))
    if url.get_backend_name() == "sqlite":
        return _create_sqlite_engine(url, echo=echo)
    return create_engine(
        url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, echo=echo
    )


class WriteTurn:
    """SQLite's write lock taken in turn by the threads of this process (module docstring).

    `take` before `BEGIN IMMEDIATE` (a connection that has the turn keeps it), `give_back`
    once that connection is returned to the pool, invalidated or closed. A turn not had
    within the busy timeout is gone without: SQLite's busy handler decides then.
    """

    def __init__(self, wait: float = SQLITE_BUSY_TIMEOUT_MS / 1000) -> None:
        self._lock = threading.Lock()
        self._holder: object | None = None
        self._wait = wait

    def take(self, dbapi_connection: object) -> None:
        if self._holder is dbapi_connection:
            return
        if self._lock.acquire(timeout=self._wait):
            self._holder = dbapi_connection

    def give_back(self, dbapi_connection: object | None) -> None:
        if dbapi_connection is not None and self._holder is dbapi_connection:
            self._holder = None
            self._lock.release()


def _create_sqlite_engine(url: URL, *, echo: bool) -> Engine:
    connect_args = {"check_same_thread": False}
    turn: WriteTurn | None = None
    if not url.database or url.database == ":memory:":
        # one shared connection, or every thread would see its own empty database
        engine = create_engine(url, echo=echo, connect_args=connect_args, poolclass=StaticPool)
    else:
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, echo=echo, connect_args=connect_args)
        turn = WriteTurn()  # not with one shared connection: its readers end no turn

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        # Take transaction control from pysqlite so BEGIN is emitted by us (below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA journal_size_limit={SQLITE_WAL_LIMIT}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        begin = connection.get_execution_options().get(_SQLITE_BEGIN_OPTION, "BEGIN")
        if not begin:  # `unpinned_engine`: each statement its own transaction
            return
        if turn is None or begin == "BEGIN":
            connection.exec_driver_sql(begin)
            return
        dbapi_connection = connection.connection.dbapi_connection
        turn.take(dbapi_connection)
        try:
            connection.exec_driver_sql(begin)
        except BaseException:
            turn.give_back(dbapi_connection)
            raise

    if turn is not None:
        _give_back_turns(engine, turn)
    return engine


def _give_back_turns(engine: Engine, turn: WriteTurn) -> None:
    """A writer's turn ends once its connection is back in the pool (after the commit or
    rollback; the Store's sessions and `engine.begin()` return it at once) or is dropped."""

    def returned(dbapi_connection: Any, *args: Any) -> None:
        turn.give_back(dbapi_connection)

    for name in ("reset", "checkin", "invalidate", "close"):
        event.listen(engine.pool, name, returned)


def unpinned_engine(engine: Engine) -> Engine:
    """The same engine, but on SQLite its transactions emit no `BEGIN`: each statement is
    a transaction of its own (SQLite's autocommit), so a read of one statement costs one
    statement, not three (`BEGIN`, the read, the rollback). For reads whose statements
    need no snapshot in common (`StoreBase.reading_unpinned`); never for writes. On
    PostgreSQL the engine itself (a read there sends no `BEGIN` of its own anyway)."""
    if engine.dialect.name != "sqlite":
        return engine
    return engine.execution_options(**{_SQLITE_BEGIN_OPTION: ""})


def writer_engine(engine: Engine) -> Engine:
    """The same engine, but transactions take SQLite's write lock at `BEGIN`.

    A read-then-write transaction in WAL mode that began deferred fails with "database is
    locked" when another connection wrote in between; `BEGIN IMMEDIATE` waits (busy timeout)
    instead. On PostgreSQL this is the engine itself.
    """
    if engine.dialect.name != "sqlite":
        return engine
    return engine.execution_options(**{_SQLITE_BEGIN_OPTION: "BEGIN IMMEDIATE"})
