"""The state store: SQLAlchemy models, the `Store`, migrations and worker leases.

Shell code (I/O). The composition root builds one `Store` per database and passes it down;
the planner only ever sees the frozen `ObservedState` that `Store.load_observed` returns.
"""

from reconciler.adapters.db.connecting import create_db_engine, redact_url, resolve_db_url
from reconciler.adapters.db.leasing import Leases
from reconciler.adapters.db.migrating import current_revision, head_revision, upgrade_database
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing

__all__ = [
    "Leases",
    "Store",
    "StoreLeasing",
    "create_db_engine",
    "current_revision",
    "head_revision",
    "redact_url",
    "resolve_db_url",
    "upgrade_database",
]
