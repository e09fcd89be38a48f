"""The API's read models of a project's secrets, events, reconciles, deliveries (in the store).

The queries are `reconciler.adapters.db.readmodels.project` (each runs in the one transaction
`Database.read`/`.write` opens); the routes keep importing them by their names here.
"""

from __future__ import annotations

from reconciler.adapters.db.readmodels.project import (
    delete_secret,
    get_reconcile,
    get_secret_ciphertext,
    list_deliveries,
    list_events,
    list_reconciles,
    list_secrets,
    project_exists,
    put_secret,
    record_delivery,
    set_delivery,
    to_reconcile,
)

__all__ = [
    "delete_secret",
    "get_reconcile",
    "get_secret_ciphertext",
    "list_deliveries",
    "list_events",
    "list_reconciles",
    "list_secrets",
    "project_exists",
    "put_secret",
    "record_delivery",
    "set_delivery",
    "to_reconcile",
]
