"""The instances worker's read and write of a leased instance.

`load_instance` reads the leased `instances` row with its fleet in one statement (a frozen
`LeasedInstance`; None when the lease is lost); `write_instance` is the fenced write of its
status, message, host facts or address (nothing written when the lease was lost). Called by
`reconciler.engine.workers.instances`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from reconciler.adapters.db.leasing import Leases
from reconciler.adapters.db.models import Fleet, Instance
from reconciler.adapters.db.records import capacity_record, instance_record
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.inventory import LeasedInstance


class InstanceRowsStore(StoreBase):
    leases: Leases  # set by `Store`

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
        it held (`Leases.fenced_update`: the lease columns may not be set)."""
        return self.leases.fenced_update(Instance, instance_id, token, values)
