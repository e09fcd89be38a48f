"""Which errors are the store refusing work for a while, not a bug in a statement.

A full disk ("database or disk is full" on SQLite, `DiskFull` on PostgreSQL), a database
that went read-only, a lost or reset connection: SQLAlchemy raises these as
`OperationalError` or `InterfaceError` (or a `DBAPIError` whose connection was
invalidated). The store's files in the data dir (job logs) refuse writes on a full,
over-quota or read-only disk with `OSError` (ENOSPC, EDQUOT, EROFS). The same write
succeeds once the cause is gone, so the engine's workers retry them within seconds
instead of after their error delay (`reconciler.engine.worker`, given `refused_by_store`
by `reconciler.engine.controller.make_workers`).
"""

from __future__ import annotations

import errno

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

_DISK_REFUSALS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def refused_by_store(exc: BaseException) -> bool:
    """Whether `exc` is the database refusing a statement for a passing reason."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    if isinstance(exc, OSError):
        return exc.errno in _DISK_REFUSALS
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)
