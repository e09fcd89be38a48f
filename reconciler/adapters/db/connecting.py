"""Opening the database: the URL rules and the per-dialect engine setup.

`resolve_db_url` picks the URL (an explicit `--db` wins, else the SQLite file
`<data-dir>/dockyard.db`); `create_db_engine` builds an engine with the settings Dockyard
relies on: on SQLite WAL mode (its log cut back to `SQLITE_WAL_LIMIT` whenever a checkpoint
found it longer, so a busy moment does not leave a big file for good), foreign keys on, a
busy timeout and real transactions (explicit `BEGIN`, `BEGIN IMMEDIATE` for writers, see
`writer_engine`); on PostgreSQL the psycopg 3 driver and a pre-pinged pool. Called by the
`Store`, `dockyard db upgrade` and the server's composition root.
"""

from __future__ import annotations

import os
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


def _create_sqlite_engine(url: URL, *, echo: bool) -> Engine:
    connect_args = {"check_same_thread": False}
    if not url.database or url.database == ":memory:":
        # one shared connection, or every thread would see its own empty database
        engine = create_engine(url, echo=echo, connect_args=connect_args, poolclass=StaticPool)
    else:
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, echo=echo, connect_args=connect_args)

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
        connection.exec_driver_sql(begin)

    return engine


def writer_engine(engine: Engine) -> Engine:
    """The same engine, but transactions take SQLite's write lock at `BEGIN`.

    A read-then-write transaction in WAL mode that began deferred fails with "database is
    locked" when another connection wrote in between; `BEGIN IMMEDIATE` waits (busy timeout)
    instead. On PostgreSQL this is the engine itself.
    """
    if engine.dialect.name != "sqlite":
        return engine
    return engine.execution_options(**{_SQLITE_BEGIN_OPTION: "BEGIN IMMEDIATE"})


def data_dir_from_env() -> Path | None:
    """`DOCKYARD_DATA_DIR` if set (the CLI's default for `--data-dir`)."""
    value = os.environ.get("DOCKYARD_DATA_DIR")
    return Path(value) if value else None
