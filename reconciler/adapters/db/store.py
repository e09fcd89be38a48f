"""`Store`: the one object through which the control plane reads and writes its state.

It is the composition of the parts (accounts, inventory, history, workloads, approvals)
over one engine and one clock, plus `store.leases` for the background workers. Build it in
the composition root and pass it down: `Store.from_url(url)` or `Store(engine, clock=...)`.
No module globals, no implicit session: every method opens and closes its own short transaction and
returns frozen domain values (`reconciler.domain`; rows converted in `records.py`) — some
older methods still return detached rows to the workers not converted yet (docs/contracts.md).

The store is synchronous; async callers run it off the event loop: the workers' hot path in
the store's lane (`in_lane`, `lanes.py`: one thread on SQLite), the rest with
`asyncio.to_thread` (the web layer's `Database` does).
"""

from __future__ import annotations

from sqlalchemy import Engine

from reconciler.adapters.db.agentstates import AgentStatesStore
from reconciler.adapters.db.approvals import ApprovalsStore
from reconciler.adapters.db.capacity import CapacityStore
from reconciler.adapters.db.connecting import create_db_engine
from reconciler.adapters.db.deadleases import DeadLeasesStore
from reconciler.adapters.db.history import HistoryStore
from reconciler.adapters.db.instancerows import InstanceRowsStore
from reconciler.adapters.db.inventory import InventoryStore
from reconciler.adapters.db.jobsteps import JobStepsStore
from reconciler.adapters.db.leasing import Leases
from reconciler.adapters.db.maintenance import MaintenanceLeases
from reconciler.adapters.db.migrating import upgrade_database
from reconciler.adapters.db.planwrites import PlanWritesStore
from reconciler.adapters.db.runningjobs import RunningJobsStore
from reconciler.adapters.db.runsteps import RunStepsStore
from reconciler.adapters.db.serving import ServingStore
from reconciler.adapters.db.sources import SourcesStore
from reconciler.adapters.db.stackrows import StackRowsStore
from reconciler.adapters.db.steploads import StepLoadsStore
from reconciler.adapters.db.teardowns import TeardownsStore
from reconciler.adapters.db.workloads import WorkloadsStore
from reconciler.ports import Clock


class Store(
    InventoryStore,
    HistoryStore,
    WorkloadsStore,
    JobStepsStore,
    StepLoadsStore,
    RunStepsStore,
    RunningJobsStore,
    AgentStatesStore,
    CapacityStore,
    PlanWritesStore,
    DeadLeasesStore,
    ApprovalsStore,
    ServingStore,
    StackRowsStore,
    InstanceRowsStore,
    TeardownsStore,
    SourcesStore,
):
    """Projects, accounts, inventory, history, workloads and approvals; see docs/store.md."""

    def __init__(self, engine: Engine, *, clock: Clock | None = None) -> None:
        super().__init__(engine, clock=clock)
        self.leases = Leases(engine, clock=self.clock)
        self.maintenance = MaintenanceLeases(self.leases)

    @classmethod
    def from_url(cls, db_url: str, *, clock: Clock | None = None, migrate: bool = False) -> Store:
        """A store on a new engine for `db_url`; `migrate=True` upgrades the schema first."""
        engine = create_db_engine(db_url)
        if migrate:
            upgrade_database(engine)
        return cls(engine, clock=clock)

    def upgrade(self) -> str:
        """Apply pending migrations; returns the revision reached."""
        return upgrade_database(self.engine)

    def close(self) -> None:
        """Dispose of the engine's connections (and let the lane's threads go)."""
        self.lane.close()
        self.engine.dispose()
