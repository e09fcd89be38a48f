"""Schema migrations: alembic driven through its API, with the scripts shipped in the package.

No `alembic.ini` is needed at runtime: `alembic_config` points alembic at
`reconciler/adapters/db/migrations` and hands it an open connection. `upgrade_database` is
what `dockyard db upgrade` and the server start call; it holds the database's migration lock
so several server replicas starting at once migrate one after the other.

A database already at the shipped head is the common start: `head_revision` reads the
scripts' `revision`/`down_revision` lines and `current_revision` the `alembic_version` row,
so that start never imports alembic (~0.1 s of a restart's CPU: bench/restart_progress.py);
alembic is imported only when there is something to migrate or to explain.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

from reconciler.adapters.db.connecting import writer_engine
from reconciler.errors import UsageError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_PG_MIGRATION_LOCK_KEY = 0x646F636B  # "dock": one cluster-wide advisory lock for migrations
_VERSION_TABLE = "alembic_version"  # alembic's default, which alembic_config keeps
_REVISION_LINE = re.compile(r'^(down_revision|revision)\b[^=]*=\s*(None|"[^"]*"|\'[^\']*\')', re.M)


def alembic_config(connection: Connection | None = None) -> Config:
    """An alembic config for the packaged scripts, bound to `connection` when given."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def script_revisions(versions: Path = MIGRATIONS_DIR / "versions") -> dict[str, str | None]:
    """Each shipped script's revision and the revision it follows, read from its text."""
    found: dict[str, str | None] = {}
    for script in sorted(versions.glob("*.py")):
        lines = dict(
            (key, None if value == "None" else value[1:-1])
            for key, value in _REVISION_LINE.findall(script.read_text(encoding="utf-8"))
        )
        revision = lines.get("revision")
        if revision is not None:
            found[revision] = lines.get("down_revision")
    return found


def head_revision() -> str:
    """The newest migration revision shipped with this version of Dockyard: the one no
    other script follows (the scripts form one line; tests/store/test_migrations.py checks
    this reads what alembic reads)."""
    revisions = script_revisions()
    heads = set(revisions) - set(revisions.values())
    if len(heads) != 1:  # pragma: no cover - the package ships one line of migrations
        raise RuntimeError(f"the packaged migrations have {len(heads)} heads: {sorted(heads)}")
    return heads.pop()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None for an empty database."""
    with engine.connect() as connection:
        if not inspect(connection).has_table(_VERSION_TABLE):
            return None
        rows = connection.execute(text(f"SELECT version_num FROM {_VERSION_TABLE}")).all()
    if len(rows) > 1:  # pragma: no cover - alembic keeps one row on one line of scripts
        raise RuntimeError(f"the database has {len(rows)} schema revisions: {rows}")
    return str(rows[0][0]) if rows else None


def refuse_unknown_revision(engine: Engine) -> None:
    """A database a newer Dockyard migrated is not touched: say so instead of alembic's
    "Can't locate revision"."""
    current = current_revision(engine)
    if current is None or current in script_revisions():
        return
    raise UsageError(
        f"the database is at schema revision {current}, which this Dockyard does not know "
        f"(it ships up to {head_revision()}): a newer Dockyard migrated it. Run that "
        "version (or newer); see docs/operations.md, Upgrades"
    )


def upgrade_database(engine: Engine, revision: str = "head") -> str:
    """Apply every pending migration up to `revision` in one transaction; returns the revision.

    The transaction first takes the database's migration lock — `BEGIN IMMEDIATE` on SQLite,
    a transaction-scoped advisory lock on PostgreSQL — so concurrent upgrades (server
    replicas starting together) run one after the other and the later ones find nothing to
    do. Holding the lock before alembic starts also keeps alembic's process-wide context
    from being shared by two upgrades in one process.
    """
    if revision == "head" and current_revision(engine) == head_revision():
        return head_revision()  # nothing to do: no lock, no alembic (a restart's usual case)
    refuse_unknown_revision(engine)
    from alembic import command

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
