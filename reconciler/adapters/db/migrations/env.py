"""Alembic environment: runs migrations on the connection `migrating.py` hands in.

Only the online mode with a given connection is supported; Dockyard never runs alembic from
an ini file. `render_as_batch` lets SQLite alter tables by copying them.
"""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection

from reconciler.adapters.db.models import Base, JSONText, UTCDateTime


def _render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Write our column types as plain SQLAlchemy types, so scripts never import models."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if type_ == "type" and isinstance(obj, JSONText):
        return "sa.Text()"
    return False


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError("Dockyard migrations run through reconciler.adapters.db.migrating")
    _run(connection)


_main()
