"""ORM rows → the frozen domain values the store hands out (`reconciler.domain`).

Every store operation that returns an inventory or history row converts it here before its
session closes, so no ORM row leaves `reconciler.adapters`.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.adapters.db.models import Event, Fleet, Gateway, Instance, Reconcile, Volume
from reconciler.domain.history import EventRecord, ReconcileRecord
from reconciler.domain.inventory import CapacityKind, CapacityRecord, InstanceRecord

CAPACITY_MODELS: Mapping[CapacityKind, type[Fleet] | type[Volume] | type[Gateway]] = {
    "fleet": Fleet,
    "volume": Volume,
    "gateway": Gateway,
}


def instance_record(row: Instance) -> InstanceRecord:
    return InstanceRecord(
        id=row.id,
        fleet_id=row.fleet_id,
        project_id=row.project_id,
        name=row.name,
        status=row.status,
        created_at=row.created_at,
        instance_num=row.instance_num,
        hostname=row.hostname,
        ssh_port=row.ssh_port,
        ssh_user=row.ssh_user,
        agent_port=row.agent_port,
        backend=row.backend,
        region=row.region,
        instance_type=row.instance_type,
        price=row.price,
        resources=row.resources,
        host_info=row.host_info,
        busy_blocks=row.busy_blocks,
        total_blocks=row.total_blocks,
        termination_reason=row.termination_reason,
        status_message=row.status_message,
        last_job_processed_at=row.last_job_processed_at,
        unreachable_since=row.unreachable_since,
    )


def capacity_record(
    kind: CapacityKind,
    row: Fleet | Volume | Gateway,
    *,
    project: str = "",
    path: str | None = None,
) -> CapacityRecord:
    return CapacityRecord(
        kind=kind,
        id=row.id,
        project_id=row.project_id,
        name=row.name,
        spec=dict(row.spec) if isinstance(row.spec, Mapping) else {},
        status=row.status,
        created_at=row.created_at,
        resource_id=row.resource_id,
        status_message=row.status_message,
        outputs=None if isinstance(row, Fleet) else row.outputs,
        deleted=row.deleted,
        project=project,
        path=path,
    )


def reconcile_record(row: Reconcile, project: str) -> ReconcileRecord:
    return ReconcileRecord(
        id=row.id,
        project_id=row.project_id,
        project=project,
        trigger=row.trigger,
        status=row.status,
        created_at=row.created_at,
        delivery_id=row.delivery_id,
        attempted_revision=row.attempted_revision,
        applied_revision=row.applied_revision,
        stage=row.stage,
        plan=row.plan,
        outcome=row.outcome,
        error=row.error,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )


def event_record(row: Event) -> EventRecord:
    return EventRecord(
        id=row.id,
        project_id=row.project_id,
        target_type=row.target_type,
        target_id=row.target_id,
        target_name=row.target_name,
        message=row.message,
        created_at=row.created_at,
    )
