"""Events, reconciles, webhook deliveries and project secrets, as wire models.

Secrets arrive here already encrypted (`ciphertext`); this module never sees plain values
except as the return of `get_secret_ciphertext`, which the route decrypts for admins only.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Delivery, Event, Project, Reconcile, Secret
from reconciler.adapters.db.records import reconcile_record
from reconciler.api import models as wire
from reconciler.core.reconcile_bounds import within_budget
from reconciler.domain.history import NewDelivery, ReconcileRecord
from reconciler.errors import NotFoundError


def list_events(
    session: Session,
    project_id: str,
    project: str,
    *,
    limit: int,
    since: datetime | None,
    target_type: str | None,
    target_name: str | None,
) -> list[wire.Event]:
    query = select(Event).where(Event.project_id == project_id)
    if since is not None:
        query = query.where(Event.created_at >= since)
    if target_type is not None:
        query = query.where(Event.target_type == target_type)
    if target_name is not None:
        query = query.where(Event.target_name == target_name)
    rows = list(session.scalars(query.order_by(Event.created_at.desc(), Event.id).limit(limit)))
    return [
        wire.Event(
            id=row.id,
            message=row.message,
            timestamp=row.created_at,
            targets=[
                wire.EventTarget(
                    type=row.target_type,
                    project_name=project,
                    id=row.target_id,
                    name=row.target_name,
                )
            ],
        )
        for row in reversed(rows)
    ]


def to_reconcile(row: Reconcile, project: str) -> wire.Reconcile:
    return wire.Reconcile(
        id=row.id,
        project_name=project,
        trigger=row.trigger,
        delivery_id=row.delivery_id,
        attempted_revision=row.attempted_revision,
        applied_revision=row.applied_revision,
        status=row.status,
        stage=row.stage,
        plan=row.plan,
        outcome=row.outcome,
        error=row.error,
        stage_timings=row.stage_timings,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )


def list_reconciles(
    session: Session, project_id: str, project: str, limit: int
) -> list[wire.Reconcile]:
    rows = session.scalars(
        select(Reconcile)
        .where(Reconcile.project_id == project_id)
        .order_by(Reconcile.created_at.desc(), Reconcile.id)
        .limit(limit)
    )
    answer, spent = [], 0
    for row in rows:  # whole plans up to LIST_BYTES, then their short forms
        reconcile = to_reconcile(row, project)
        plan, outcome, spent = within_budget(reconcile.plan, reconcile.outcome, spent)
        answer.append(reconcile.model_copy(update={"plan": plan, "outcome": outcome}))
    return answer


def get_reconcile(
    session: Session, project_id: str, project: str, reconcile_id: str
) -> wire.Reconcile:
    row = session.get(Reconcile, reconcile_id)
    if row is None or row.project_id != project_id:
        raise NotFoundError(f"reconcile {reconcile_id} not found")
    return to_reconcile(row, project)


def list_deliveries(session: Session, limit: int) -> list[wire.Delivery]:
    rows = session.scalars(
        select(Delivery).order_by(Delivery.received_at.desc(), Delivery.id).limit(limit)
    )
    return [
        wire.Delivery(
            id=row.id,
            provider=row.provider,
            delivery_id=row.delivery_id,
            event=row.event,
            ref=row.ref,
            status_code=row.status_code,
            outcome=row.outcome,
            reason=row.reason,
            received_at=row.received_at,
        )
        for row in rows
    ]


def record_delivery(session: Session, delivery: NewDelivery) -> str | None:
    """Insert the delivery; its id, or None when (provider, delivery_id) was recorded before."""
    row = Delivery(
        provider=delivery.provider,
        delivery_id=delivery.delivery_id,
        event=delivery.event,
        ref=delivery.ref,
        status_code=delivery.status_code,
        outcome=delivery.outcome,
        reason=delivery.reason,
        received_at=delivery.received_at,
    )
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        return None
    return row.id


def set_delivery(session: Session, delivery_pk: str, *, outcome: str, reason: str | None) -> None:
    row = session.get(Delivery, delivery_pk)
    if row is not None:
        row.outcome, row.reason = outcome, reason


def list_secrets(session: Session, project_id: str) -> list[wire.Secret]:
    rows = session.execute(
        select(Secret.id, Secret.name).where(Secret.project_id == project_id).order_by(Secret.name)
    )
    return [wire.Secret(id=row_id, name=name) for row_id, name in rows]


def get_secret_ciphertext(session: Session, project_id: str, name: str) -> tuple[str, str]:
    row = session.scalar(select(Secret).where(Secret.project_id == project_id, Secret.name == name))
    if row is None:
        raise NotFoundError(f"secret {name} not found")
    return row.id, row.ciphertext


def put_secret(
    session: Session, project_id: str, name: str, ciphertext: str, now: datetime
) -> wire.Secret:
    row = session.scalar(select(Secret).where(Secret.project_id == project_id, Secret.name == name))
    if row is None:
        row = Secret(
            project_id=project_id, name=name, ciphertext=ciphertext, created_at=now, updated_at=now
        )
        session.add(row)
        session.flush()
    else:
        row.ciphertext, row.updated_at = ciphertext, now
    return wire.Secret(id=row.id, name=name)


def delete_secret(session: Session, project_id: str, name: str) -> None:
    result = session.execute(
        delete(Secret).where(Secret.project_id == project_id, Secret.name == name)
    )
    if not getattr(result, "rowcount", 0):
        raise NotFoundError(f"secret {name} not found")


def find_reconcile_page(session: Session, kind: str, ident: str) -> ReconcileRecord | None:
    """The newest reconcile by id (`reconciles`) or by revision (`commits`), with its
    project's name, for the signed reconcile pages."""
    query = select(Reconcile, Project.name).join(Project, Project.id == Reconcile.project_id)
    if kind == "reconciles":
        query = query.where(Reconcile.id == ident)
    else:
        query = query.where(Reconcile.attempted_revision == ident)
    found = session.execute(query.order_by(Reconcile.created_at.desc()).limit(1)).first()
    return None if found is None else reconcile_record(found[0], found[1])
