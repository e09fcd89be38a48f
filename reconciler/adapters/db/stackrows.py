"""The stack workers' reads and writes of a fleet, volume or gateway row.

`load_capacity` reads the leased row with its project's name and its resource's config
path in one statement (a frozen `CapacityRecord`, None when the lease is lost);
`write_capacity` is the fenced write of its status, message or outputs (nothing written
when the lease was lost). Called by `engine.workers.stacking.StackRows` (the volumes,
gateways and fleets workers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from reconciler.adapters.db.leasing import Leases
from reconciler.adapters.db.models import Fleet, Gateway, Project, Resource, Volume
from reconciler.adapters.db.records import CAPACITY_MODELS, capacity_record
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.inventory import CapacityKind, CapacityRecord


class StackRowsStore(StoreBase):
    leases: Leases  # set by `Store`

    def load_capacity(self, kind: CapacityKind, row_id: str, token: str) -> CapacityRecord | None:
        """The row if this lease still holds it, with its project's name (its id when the
        project is gone) and its resource's path; None otherwise."""
        model = CAPACITY_MODELS[kind]
        with self.reading() as session:
            found = session.execute(
                select(model, Project.name, Resource.path)
                .outerjoin(Project, Project.id == model.project_id)
                .outerjoin(Resource, Resource.id == model.resource_id)
                .where(model.id == row_id, model.lock_token == token)
            ).first()
            if found is None:
                return None
            row, project, path = found
            assert isinstance(row, Fleet | Volume | Gateway)
            return capacity_record(kind, row, project=project or row.project_id, path=path)

    def write_capacity(
        self, kind: CapacityKind, row_id: str, token: str, values: Mapping[str, Any]
    ) -> bool:
        """`UPDATE … SET values WHERE id=row_id AND lock_token=token`; whether it held
        (`Leases.fenced_update`: the lease columns may not be set)."""
        return self.leases.fenced_update(CAPACITY_MODELS[kind], row_id, token, values)
