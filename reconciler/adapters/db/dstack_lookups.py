"""Lookups that dstack's client needs and our own API does not: names by id, instances.

dstack's CLI and Python API address runs and fleets by `id` as well as by name, and list a
project's instances on their own. Each function takes an open `Session` (the web layer's
`Database.read`) and returns names or rows; called by `reconciler.web.routes_dstack`.
`leave_fleet_instances` is the one write (dstack's `fleet delete -i`, `Database.write`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from reconciler.adapters.db.inventory import live_resource
from reconciler.adapters.db.models import Event, Fleet, Instance, Member, Project
from reconciler.adapters.db.readmodels.capacity import instance_wire
from reconciler.adapters.db.records import event_record
from reconciler.api import models as wire
from reconciler.domain.history import EventRecord


def fleet_name_by_id(session: Session, project_id: str, fleet_id: str) -> str | None:
    """The name of the project's fleet `fleet_id`, or None."""
    return session.scalar(
        select(Fleet.name).where(Fleet.project_id == project_id, Fleet.id == fleet_id).limit(1)
    )


def instances_of_projects(
    session: Session, project_names: list[str] | None, limit: int
) -> list[wire.Instance]:
    """The live instances of these projects (all when None) as dstack's `Instance`, newest
    first."""
    query = (
        select(Instance, Project.name, Fleet.name)
        .join(Project, Project.id == Instance.project_id)
        .outerjoin(Fleet, Fleet.id == Instance.fleet_id)
        .where(Instance.status != "terminated")
    )
    if project_names is not None:
        query = query.where(Project.name.in_(project_names))
    query = query.order_by(Instance.created_at.desc()).limit(limit)
    return [instance_wire(row[0], row[1], row[2]) for row in session.execute(query).all()]


def project_names_of_member(session: Session, user_id: str) -> list[str]:
    """The names of the projects `user_id` is a member of."""
    return list(
        session.scalars(
            select(Project.name)
            .join(Member, Member.project_id == Project.id)
            .where(Member.user_id == user_id)
            .order_by(Project.name)
        )
    )


def events_of_projects(
    session: Session,
    project_ids: list[str],
    *,
    target_ids: list[str] | None,
    after: datetime | None,
    ascending: bool,
    limit: int,
) -> list[tuple[EventRecord, str]]:
    """(event, project name) of these projects, by time (dstack's `prev_recorded_at` paging)."""
    query = (
        select(Event, Project.name)
        .join(Project, Project.id == Event.project_id)
        .where(Event.project_id.in_(project_ids))
    )
    if target_ids is not None:
        query = query.where(Event.target_id.in_(target_ids))
    if after is not None:
        query = query.where(Event.created_at > after if ascending else Event.created_at < after)
    order = Event.created_at.asc() if ascending else Event.created_at.desc()
    rows = session.execute(query.order_by(order, Event.id).limit(limit)).all()
    return [(event_record(row[0]), row[1]) for row in rows]


def project_ids_by_name(session: Session, names: list[str]) -> dict[str, str]:
    """`name: id` of the named projects that exist."""
    rows = session.execute(select(Project.name, Project.id).where(Project.name.in_(names)))
    return {name: project_id for name, project_id in rows}


def all_project_names(session: Session) -> list[str]:
    return list(session.scalars(select(Project.name).order_by(Project.name)))


def fleet_instances(
    session: Session, project_id: str, fleet_name: str
) -> tuple[Any, list[tuple[int, str, int]]] | None:
    """The spec of a live fleet and its instances' (num, status, busy blocks)."""
    fleet = session.scalars(
        select(Fleet).where(
            Fleet.project_id == project_id, Fleet.name == fleet_name, Fleet.deleted.is_(False)
        )
    ).first()
    if fleet is None:
        return None
    rows = session.scalars(select(Instance).where(Instance.fleet_id == fleet.id)).all()
    return fleet.spec, [(i.instance_num, i.status, i.busy_blocks) for i in rows]


def leave_fleet_instances(
    session: Session, project_id: str, fleet_name: str, nums: list[int], reason: str
) -> int:
    """Mark the fleet's idle instances `nums` terminating for `reason` (compare-and-set on
    idle, so one a job took meanwhile stays); how many were marked."""
    fleet = session.scalars(
        select(Fleet).where(
            Fleet.project_id == project_id, Fleet.name == fleet_name, Fleet.deleted.is_(False)
        )
    ).first()
    if fleet is None:
        return 0
    marked = 0
    for instance in session.scalars(
        select(Instance).where(Instance.fleet_id == fleet.id, Instance.instance_num.in_(nums))
    ):
        if instance.status == "idle" and not instance.busy_blocks:
            instance.status, instance.termination_reason = "terminating", reason
            instance.due_at = None
            marked += 1
    return marked


def resource_origin(session: Session, project_id: str, kind: str, name: str) -> str | None:
    """The origin (`git:<path>@<sha>` or `cli:<user>`) of a live fleet, volume or gateway."""
    found = live_resource(session, project_id, kind, name)
    return found.origin if found is not None else None
