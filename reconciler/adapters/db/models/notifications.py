"""The notification tables: receivers, their deliveries, and the follower's cursor.

`notification_receivers` are what global admins define (docs/notifications.md): where to
send (a generic JSON webhook signed with its own secret, or a Slack-compatible incoming
webhook) and which events go there (kinds, optionally one project and one source).
`notification_deliveries` holds one row per (event, receiver): the unique constraint is
what makes a notification exactly once in the store whichever replica's follower saw the
event first; the row carries a snapshot of the event (events are pruned by retention), its
attempts and outcome, and the lease of the replica sending it. `notification_cursors` is
the follower's position in `events`. Written by `reconciler.adapters.db.notifications`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from reconciler.adapters.db.models.base import Base, JSONText, UTCDateTime, id_column


class NotificationReceiver(Base, kw_only=True):
    __tablename__ = "notification_receivers"

    id: Mapped[str] = id_column()
    name: Mapped[str] = mapped_column(String(100), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # webhook | slack
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str | None] = mapped_column(Text, nullable=True, default=None)
    events: Mapped[Any] = mapped_column(JSONText)  # the event kinds sent here
    project_name: Mapped[str | None] = mapped_column(String(100), nullable=True, default=None)
    source_name: Mapped[str | None] = mapped_column(String(100), nullable=True, default=None)
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class NotificationDelivery(Base, kw_only=True):
    __tablename__ = "notification_deliveries"
    __table_args__ = (
        UniqueConstraint("event_id", "receiver_id"),
        Index("ix_notification_deliveries_due", "status", "next_attempt_at"),
        Index("ix_notification_deliveries_project", "project_id", "created_at"),
    )

    id: Mapped[str] = id_column()
    event_id: Mapped[str] = mapped_column(String(36))  # no foreign key: events are pruned
    receiver_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("notification_receivers.id", ondelete="CASCADE")
    )
    project_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE"), nullable=True
    )
    kind: Mapped[str] = mapped_column(String(32))
    event: Mapped[Any] = mapped_column(JSONText)  # the event's snapshot, bounded
    status: Mapped[str] = mapped_column(String(16))  # pending|retrying|delivered|failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    last_status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    lock_token: Mapped[str | None] = mapped_column(String(36), default=None)
    lock_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class NotificationCursor(Base, kw_only=True):
    __tablename__ = "notification_cursors"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    position: Mapped[datetime] = mapped_column(UTCDateTime())
