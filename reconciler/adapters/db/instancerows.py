"""The instances worker's read and write of a leased instance.

`load_instance` reads the leased `instances` row with its fleet in one statement (a frozen
`LeasedInstance`; None when the lease is lost); `write_instance` is the fenced write of its
status, message, host facts or address (nothing written when the lease was lost). Called by
`reconciler.engine.workers.instances`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table, select, update

from reconciler.adapters.db.models import Fleet, Instance
from reconciler.adapters.db.records import capacity_record, instance_record
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.inventory import LeasedInstance

_LEASE_COLUMNS = frozenset({"lock_token", "lock_expires_at", "lock_owner"})


class InstanceRowsStore(StoreBase):
    def load_instance(self, instance_id: str, token: str) -> LeasedInstance | None:
        """The instance if this lease still holds it, with its fleet (None when it has
        none or the fleet row is gone); None otherwise."""
        with self.reading() as session:
            found = session.execute(
                select(Instance, Fleet)
                .outerjoin(Fleet, Fleet.id == Instance.fleet_id)
                .where(Instance.id == instance_id, Instance.lock_token == token)
            ).first()
            if found is None:
                return None
            row, fleet = found
            return LeasedInstance(
                instance_record(row), None if fleet is None else capacity_record("fleet", fleet)
            )

    def write_instance(self, instance_id: str, token: str, values: Mapping[str, Any]) -> bool:
        """`UPDATE instances SET values WHERE id=instance_id AND lock_token=token`; whether
        it held."""
        touched = _LEASE_COLUMNS.intersection(values)
        if touched:
            raise ValueError(f"write_instance may not set {sorted(touched)}")
        table = Instance.__table__
        assert isinstance(table, Table)
        with self.writing() as session:
            result = session.execute(
                update(table)
                .where(table.c.id == instance_id, table.c.lock_token == token)
                .values(**values)
            )
        return bool(getattr(result, "rowcount", 0))
