"""Taking back the leases of server processes that died: one unit of work at start-up.

Called by `reconciler.engine.controller` when a server starts: every lease whose owner
(`<host>:<digest>:<pid>/<kind>`) starts with this host and data dir's prefix and that the
caller's `is_dead(owner)` says is gone is dropped, on every leased table, in one
transaction. Whether a pid lives is the caller's question (the process table is not the
store's business).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select, update

from reconciler.adapters.db.leasing import leased_table
from reconciler.adapters.db.models import Fleet, Gateway, Instance, Job, Reconcile, Run, Volume
from reconciler.adapters.db.sessions import StoreBase

_LEASED = (Run, Job, Fleet, Instance, Volume, Gateway, Reconcile)


class DeadLeasesStore(StoreBase):
    """The `Store` part that takes back dead processes' leases."""

    def take_back_dead_leases(self, prefix: str, is_dead: Callable[[str], bool]) -> int:
        """Drop the leases of owners under `prefix` that `is_dead`; how many rows."""
        released = 0
        with self.writing() as session:
            for model in _LEASED:
                table = leased_table(model)
                owners = session.execute(
                    select(table.c.lock_owner)
                    .where(table.c.lock_owner.like(f"{prefix}%"))
                    .distinct()
                ).scalars()
                dead = [owner for owner in owners if owner and is_dead(owner)]
                if not dead:
                    continue
                result = session.execute(
                    update(table)
                    .where(table.c.lock_owner.in_(dead))
                    .values(lock_token=None, lock_expires_at=None, lock_owner=None)
                )
                released += int(getattr(result, "rowcount", 0) or 0)
        return released
