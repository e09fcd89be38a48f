"""Webhook deliveries for tests, recorded through the unit the webhook routes use
(`reconciler.adapters.db.readmodels.project.record_delivery`) and read back by key.

Called by the store's history, retention and upgrade tests and the retention sweep test.
"""

from __future__ import annotations

from sqlalchemy import select

from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Delivery
from reconciler.adapters.db.readmodels.project import record_delivery
from reconciler.domain.history import NewDelivery


def deliver(store: Store, provider: str, delivery_id: str, *, ref: str | None = None) -> bool:
    """Record a push delivery; False when (provider, delivery_id) was recorded before."""
    new = NewDelivery(
        provider=provider, delivery_id=delivery_id, event="push", received_at=store.now(), ref=ref
    )
    with store.writing() as session:
        return record_delivery(session, new) is not None


def delivery(store: Store, provider: str, delivery_id: str) -> Delivery | None:
    with store.reading() as session:
        return session.scalars(
            select(Delivery).where(
                Delivery.provider == provider, Delivery.delivery_id == delivery_id
            )
        ).one_or_none()
