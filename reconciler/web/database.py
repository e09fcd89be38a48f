"""How request handlers reach the database: `Database` lives in the store.

`reconciler.adapters.db.readmodels.database.Database` runs one read-model function per call
in a worker thread, in one transaction; the web imports it by this name.
"""

from __future__ import annotations

from reconciler.adapters.db.readmodels.database import Database

__all__ = ["Database"]
