"""The ORM models of every Dockyard table (docs/contracts.md, "State store tables").

Import models from here; `Base.metadata` is the schema the alembic migrations must match
(tests/store/test_migrations.py checks it).
"""

from reconciler.adapters.db.models.accounts import Member, Project, Secret, Token, User
from reconciler.adapters.db.models.approvals import ApprovalRow
from reconciler.adapters.db.models.base import Base, JSONText, Leased, UTCDateTime, new_id
from reconciler.adapters.db.models.capacity import Fleet, Gateway, Instance, Volume
from reconciler.adapters.db.models.notifications import (
    NotificationCursor,
    NotificationDelivery,
    NotificationReceiver,
)
from reconciler.adapters.db.models.operations import HostTeardown, Maintenance, Replica
from reconciler.adapters.db.models.previewruns import PreviewRunRow
from reconciler.adapters.db.models.resources import Delivery, Event, Reconcile, Resource
from reconciler.adapters.db.models.sources import SourceRow
from reconciler.adapters.db.models.workloads import Job, Run

LEASED_MODELS: tuple[type[Base], ...] = (Run, Job, Fleet, Instance, Volume, Gateway, Reconcile)

__all__ = [
    "LEASED_MODELS",
    "ApprovalRow",
    "Base",
    "Delivery",
    "Event",
    "Fleet",
    "Gateway",
    "HostTeardown",
    "Instance",
    "JSONText",
    "Job",
    "Leased",
    "Maintenance",
    "Member",
    "NotificationCursor",
    "NotificationDelivery",
    "NotificationReceiver",
    "PreviewRunRow",
    "Project",
    "Reconcile",
    "Replica",
    "Resource",
    "Run",
    "Secret",
    "SourceRow",
    "Token",
    "UTCDateTime",
    "User",
    "Volume",
    "new_id",
]
