"""The database administration operations `dockyard db` runs: upgrade, current revision.

Called by `reconciler.cli.db` (the only CLI command that opens the server's database).
Each opens its own engine on the URL, does one thing and disposes of it; a database that
cannot be reached is a `TransientError` naming the (redacted) URL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from reconciler.adapters.db.connecting import create_db_engine, redact_url
from reconciler.adapters.db.migrating import current_revision, head_revision, upgrade_database
from reconciler.errors import TransientError

T = TypeVar("T")


@contextmanager
def _engine(url: str) -> Iterator[Engine]:
    engine = create_db_engine(url)
    try:
        yield engine
    except OperationalError as exc:
        raise TransientError(f"cannot reach the database {redact_url(url)}") from exc
    finally:
        engine.dispose()


def _with_engine(url: str, call: Callable[[Engine], T]) -> T:
    with _engine(url) as engine:
        return call(engine)


def upgrade_database_at(url: str) -> tuple[str | None, str]:
    """Apply pending migrations; (revision before, or None when empty; revision after)."""

    def upgrade(engine: Engine) -> tuple[str | None, str]:
        before = current_revision(engine)
        return before, upgrade_database(engine)

    return _with_engine(url, upgrade)


def database_revision_at(url: str) -> tuple[str | None, str]:
    """(the database's revision, or None when empty; the newest one this version ships)."""
    return _with_engine(url, current_revision), head_revision()
