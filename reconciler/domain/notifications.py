"""Notification receivers and deliveries, as the store hands them out.

A receiver is where notifications go (docs/notifications.md): a generic JSON webhook
signed with its own secret, or a Slack-compatible incoming webhook, with the event kinds it
takes and optionally one project and one source. A delivery is one event sent (or to be
sent) to one receiver. Built by `reconciler.adapters.db.notifications`; read by the
notifier (`reconciler.engine.notifier`), the API and the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

ReceiverKind = Literal["webhook", "slack"]
DeliveryStatus = Literal["pending", "retrying", "delivered", "failed"]


@dataclass(frozen=True, slots=True)
class Receiver:
    name: str
    kind: ReceiverKind
    url: str
    events: tuple[str, ...]
    project: str | None = None
    source: str | None = None
    secret: str | None = None
    """The webhook's HMAC key; never shown (the API and the CLI print `has_secret`)."""
    id: str = ""
    created_by: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class NotifiedEvent:
    """What a notification says about its event: a snapshot taken when it was queued."""

    id: str
    kind: str
    project: str | None
    target_type: str
    target_name: str
    message: str
    created_at: datetime

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "project": self.project,
            "target_type": self.target_type,
            "target_name": self.target_name,
            "message": self.message,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    """A delivery a notifier holds the lease of (`token`), with where it goes."""

    id: str
    token: str
    attempts: int
    receiver: Receiver
    event: NotifiedEvent


@dataclass(frozen=True, slots=True)
class DeliveryView:
    """A delivery as listed (`dockyard notification list`)."""

    id: str
    receiver: str
    kind: str
    project: str | None
    target_name: str
    message: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None
