"""Deployed resources (the inventory), events, reconciles and webhook deliveries.

`resources` is what the planner compares the desired state with: one live row per
(project, kind, name), soft-deleted with `deleted_at` so history stays. `reconciles` records
each pass (trigger, attempted/applied revision, plan, outcome, stage timings) and is leased by
the reconcile worker like the rows in `workloads.py`; `deliveries`
dedupes webhooks on (provider, delivery_id). Written by the engine and the web layer through
the `Store`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from reconciler.adapters.db.models.base import Base, JSONText, Leased, UTCDateTime, id_column


class Resource(Base, kw_only=True):
    __tablename__ = "resources"
    __table_args__ = (
        Index(
            "uq_resources_live",
            "project_id",
            "kind",
            "name",
            unique=True,
            sqlite_where=text("deleted_at IS NULL"),
            postgresql_where=text("deleted_at IS NULL"),
        ),
    )

    id: Mapped[str] = id_column()
    project_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE")
    )
    kind: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(200))
    origin: Mapped[str] = mapped_column(String(1000))  # git:<path>@<sha> | cli:<user>
    path: Mapped[str | None] = mapped_column(String(1000))
    commit: Mapped[str | None] = mapped_column(String(64))
    spec: Mapped[Any] = mapped_column(JSONText)
    spec_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    status_message: Mapped[str] = mapped_column(Text, default="")
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class Event(Base, kw_only=True):
    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_project_created", "project_id", "created_at"),
        Index("ix_events_created_at", "created_at"),  # the retention sweep's order
    )

    id: Mapped[str] = id_column()
    project_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE")
    )
    target_type: Mapped[str] = mapped_column(String(32))
    target_id: Mapped[str | None] = mapped_column(String(36), index=True)
    target_name: Mapped[str] = mapped_column(String(200))
    message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Reconcile(Leased, Base, kw_only=True):
    __tablename__ = "reconciles"
    __table_args__ = (Index("ix_reconciles_project_created", "project_id", "created_at"),)

    id: Mapped[str] = id_column()
    project_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE")
    )
    trigger: Mapped[str] = mapped_column(String(16))  # timer | webhook | cli | api
    status: Mapped[str] = mapped_column(String(16))  # queued|running|succeeded|failed|aborted
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    delivery_id: Mapped[str | None] = mapped_column(String(200), default=None)
    attempted_revision: Mapped[str | None] = mapped_column(String(64), default=None)
    applied_revision: Mapped[str | None] = mapped_column(String(64), default=None)
    stage: Mapped[str | None] = mapped_column(String(32), default=None)
    plan: Mapped[Any] = mapped_column(JSONText, default=None, nullable=True)
    outcome: Mapped[Any] = mapped_column(JSONText, default=None, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    stage_timings: Mapped[Any] = mapped_column(JSONText, default_factory=list)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class Delivery(Base, kw_only=True):
    __tablename__ = "deliveries"
    __table_args__ = (
        UniqueConstraint("provider", "delivery_id"),
        Index("ix_deliveries_received_at", "received_at"),  # the retention sweep's order
    )

    id: Mapped[str] = id_column()
    provider: Mapped[str] = mapped_column(String(16))  # github | gitlab
    delivery_id: Mapped[str] = mapped_column(String(200))
    event: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ref: Mapped[str | None] = mapped_column(String(500), default=None)
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    outcome: Mapped[str | None] = mapped_column(String(32), default=None)
    reason: Mapped[str | None] = mapped_column(Text, default=None)
