"""Fleets (with their instances), volumes and gateways of one project, as wire models; and
`wake_ssh_fleets`, which makes SSH fleets due for their hosts' key files."""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Fleet, Gateway, Instance, Volume
from reconciler.api import models as wire
from reconciler.core.dstack_wire import (
    capacity_extras,
    dstack_backend,
    dstack_capacity_status,
    fleet_spec,
    instance_type,
)
from reconciler.errors import NotFoundError

Kind = Literal["fleet", "volume", "gateway"]


def instance_wire(row: Instance, project: str, fleet_name: str | None) -> wire.Instance:
    """An instance as dstack's `Instance` (backend, instance type) plus our own fields."""
    return wire.Instance(
        id=row.id,
        project_name=project,
        name=row.name,
        fleet_id=row.fleet_id,
        fleet_name=fleet_name,
        instance_num=row.instance_num,
        status=row.status,
        created=row.created_at,
        hostname=row.hostname,
        backend=dstack_backend(row.backend),
        dockyard_backend=row.backend,
        region=row.region,
        instance_type=instance_type(row.instance_type, row.resources),
        price=row.price,
        resources=row.resources,
        busy_blocks=row.busy_blocks,
        total_blocks=row.total_blocks,
        unreachable=row.unreachable_since is not None,
    )


def _fleet(session: Session, project: str, row: Fleet) -> wire.Fleet:
    instances = session.scalars(
        select(Instance)
        .where(Instance.fleet_id == row.id, Instance.status != "terminated")
        .order_by(Instance.instance_num)
    )
    return wire.Fleet(
        id=row.id,
        name=row.name,
        project_name=project,
        spec=fleet_spec(row.spec),
        status=row.status,
        status_message=row.status_message,
        created_at=row.created_at,
        instances=[instance_wire(i, project, row.name) for i in instances],
    )


def _volume(project: str, row: Volume | Gateway) -> wire.Volume:
    """A volume or gateway, with dstack's `Volume` / `Gateway` fields beside ours."""
    spec: Any = row.spec
    configuration = spec if isinstance(spec, dict) else {}
    outputs = row.outputs if isinstance(row.outputs, dict) else None
    kind: Kind = "gateway" if isinstance(row, Gateway) else "volume"
    return wire.Volume(
        id=row.id,
        name=row.name,
        project_name=project,
        configuration=configuration,
        status=dstack_capacity_status(kind, row.status),
        dockyard_status=row.status,
        status_message=row.status_message or row.status,
        outputs=outputs,
        created_at=row.created_at,
        **capacity_extras(configuration, outputs, row.created_at),
    )


def list_fleets(session: Session, project_id: str, project: str) -> list[wire.Fleet]:
    rows = session.scalars(
        select(Fleet)
        .where(Fleet.project_id == project_id, Fleet.deleted.is_(False))
        .order_by(Fleet.name)
    )
    return [_fleet(session, project, row) for row in rows]


def get_fleet(session: Session, project_id: str, project: str, name: str) -> wire.Fleet:
    row = session.scalar(
        select(Fleet).where(
            Fleet.project_id == project_id, Fleet.name == name, Fleet.deleted.is_(False)
        )
    )
    if row is None:
        raise NotFoundError(f"fleet {name} not found")
    return _fleet(session, project, row)


def list_volumes(session: Session, project_id: str, project: str, kind: Kind) -> list[wire.Volume]:
    model: type[Volume] | type[Gateway] = Gateway if kind == "gateway" else Volume
    rows = session.scalars(
        select(model)
        .where(model.project_id == project_id, model.deleted.is_(False))
        .order_by(model.name)
    )
    return [_volume(project, row) for row in rows]  # type: ignore[arg-type]


def get_volume(
    session: Session, project_id: str, project: str, kind: Kind, name: str
) -> wire.Volume:
    model: type[Volume] | type[Gateway] = Gateway if kind == "gateway" else Volume
    row = session.scalar(
        select(model).where(
            model.project_id == project_id, model.name == name, model.deleted.is_(False)
        )
    )
    if row is None:
        raise NotFoundError(f"{kind} {name} not found")
    return _volume(project, row)  # type: ignore[arg-type]


def check_exists(session: Session, project_id: str, kind: Kind, name: str) -> None:
    if kind == "fleet":
        get_fleet(session, project_id, "", name)
    else:
        get_volume(session, project_id, "", kind, name)


def wake_ssh_fleets(session: Session) -> int:
    """Make every active fleet with a live SSH host due now, so the fleets worker writes
    its hosts' agent key files again soon after who may reach their jobs changed (members,
    projects, users: `web.dstack_attach.sync_user_keys`); how many fleets."""
    hosts = select(Instance.fleet_id).where(
        Instance.backend == "ssh", Instance.status != "terminated"
    )
    result = session.execute(
        update(Fleet)
        .where(Fleet.deleted.is_(False), Fleet.status == "active", Fleet.id.in_(hosts))
        .values(due_at=None)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)
