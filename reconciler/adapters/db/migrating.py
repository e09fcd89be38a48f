"""Schema migrations: alembic driven through its API, with the scripts shipped in the package.

No `alembic.ini` is needed at runtime: `alembic_config` points alembic at
`reconciler/adapters/db/migrations` and hands it an open connection. `upgrade_database` is
what `dockyard db upgrade` and the server start call; it holds the database's migration lock
so several server replicas starting at once migrate one after the other.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, text

from reconciler.adapters.db.connecting import writer_engine
from reconciler.errors import UsageError

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_PG_MIGRATION_LOCK_KEY = 0x646F636B  # "dock": one cluster-wide advisory lock for migrations


def alembic_config(connection: Connection | None = None) -> Config:
    """An alembic config for the packaged scripts, bound to `connection` when given."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest migration revision shipped with this version of Dockyard."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships migrations
        raise RuntimeError("no migrations found in the package")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None for an empty database."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def refuse_unknown_revision(engine: Engine) -> None:
    """A database a newer Dockyard migrated is not touched: say so instead of alembic's
    "Can't locate revision"."""
    current = current_revision(engine)
    if current is None:
        return
    try:
        ScriptDirectory.from_config(alembic_config()).get_revision(current)
    except CommandError:
        raise UsageError(
            f"the database is at schema revision {current}, which this Dockyard does not know "
            f"(it ships up to {head_revision()}): a newer Dockyard migrated it. Run that "
            "version (or newer); see docs/operations.md, Upgrades"
        ) from None


def upgrade_database(engine: Engine, revision: str = "head") -> str:
    """Apply every pending migration up to `revision` in one transaction; returns the revision.

    The transaction first takes the database's migration lock — `BEGIN IMMEDIATE` on SQLite,
    a transaction-scoped advisory lock on PostgreSQL — so concurrent upgrades (server
    replicas starting together) run one after the other and the later ones find nothing to
    do. Holding the lock before alembic starts also keeps alembic's process-wide context
    from being shared by two upgrades in one process.
    """
    refuse_unknown_revision(engine)
    with writer_engine(engine).connect() as connection, connection.begin():
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK_KEY}
            )
        command.upgrade(alembic_config(connection), revision)
    reached = current_revision(engine)
    if reached is None:  # pragma: no cover - alembic always stamps
        raise RuntimeError("the database has no revision after upgrade")
    return reached
