"""The API's read models of paged run lists: they live in the store.

The queries are `reconciler.adapters.db.readmodels.pages` (each runs in the one transaction
`Database.read`/`.write` opens); the routes keep importing them by their names here.
"""

from __future__ import annotations

from reconciler.adapters.db.readmodels.pages import (
    list_runs_paged,
)

__all__ = [
    "list_runs_paged",
]
