"""Frozen copies of the history rows the shell reads or records: reconciles, events,
webhook deliveries.

The store (`reconciler.adapters.db`) returns `ReconcileRecord`s to the reconciles worker
and the signed reconcile pages, `EventRecord`s to dstack's `events/list`, and records a
`NewDelivery` for the webhook routes. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileRecord:
    """One `reconciles` row (without its lease stamps) and its project's name."""

    id: str
    project_id: str
    project: str
    trigger: str
    status: str
    created_at: datetime
    delivery_id: str | None = None
    attempted_revision: str | None = None
    applied_revision: str | None = None
    stage: str | None = None
    plan: Any = None
    outcome: Any = None
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRecord:
    """One `events` row."""

    id: str
    project_id: str | None
    target_type: str
    target_id: str | None
    target_name: str
    message: str
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class NewDelivery:
    """A webhook delivery to record (once per provider and delivery id)."""

    provider: str
    delivery_id: str
    event: str
    received_at: datetime
    ref: str | None = None
    status_code: int | None = None
    outcome: str | None = None
    reason: str | None = None
