"""Notification rows as the domain's records (`reconciler.domain.notifications`): what
`reconciler.adapters.db.notifications` hands out."""

from __future__ import annotations

from datetime import datetime

from reconciler.adapters.db.models import NotificationDelivery, NotificationReceiver
from reconciler.domain.notifications import DeliveryView, NotifiedEvent, Receiver

OPEN = ("pending", "retrying")


def receiver_record(row: NotificationReceiver) -> Receiver:
    return Receiver(
        name=row.name,
        kind="slack" if row.kind == "slack" else "webhook",
        url=row.url,
        events=tuple(row.events or ()),
        project=row.project_name,
        source=row.source_name,
        secret=row.secret,
        id=row.id,
        created_by=row.created_by,
        created_at=row.created_at,
    )


def event_record(row: NotificationDelivery) -> NotifiedEvent:
    data = row.event if isinstance(row.event, dict) else {}
    return NotifiedEvent(
        id=row.event_id,
        kind=row.kind,
        project=data.get("project"),
        target_type=str(data.get("target_type", "")),
        target_name=str(data.get("target_name", "")),
        message=str(data.get("message", "")),
        created_at=datetime.fromisoformat(str(data.get("created_at"))),
    )


def delivery_view(row: NotificationDelivery, receiver: str, project: str | None) -> DeliveryView:
    event = event_record(row)
    status = row.status if row.status in ("pending", "retrying", "delivered") else "failed"
    return DeliveryView(
        id=row.id,
        receiver=receiver,
        kind=row.kind,
        project=project,
        target_name=event.target_name,
        message=event.message,
        status=status,  # type: ignore[arg-type]
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at if row.status in OPEN else None,
        last_status_code=row.last_status_code,
        last_error=row.last_error,
        created_at=row.created_at,
        finished_at=row.finished_at,
    )
