"""A worker's step that fails on a row for another reason than the store refusing it (a
bug, a row it cannot handle) is told in the row's events, not only in the server's log:
the controller gives every worker `failure_events` (`Store.note_step_failure`), which
names the row as its events are named (a job by its run). The worker's own back-off is
tests/engine/test_worker.py's. Real store, SQLite and PostgreSQL.
"""

from __future__ import annotations

from reconciler.adapters.db.models import Job, Run
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.engine.controller import failure_events
from reconciler.engine.worker import Lease, ProcessResult, Worker, WorkerConfig


async def test_a_failing_step_is_an_event_of_its_row(db_url: str) -> None:
    store = Store.from_url(db_url, migrate=True)
    try:
        project = store.get_or_create_project("main")
        now = store.now()
        run = store.add(Run(project_id=project.id, run_name="stuck", run_type="task", spec={},
                            spec_hash="h", status="running", submitted_at=now))  # fmt: skip
        store.add(Job(run_id=run.id, status="running", job_spec={}, submitted_at=now))

        async def process(row_id: str, token: str) -> ProcessResult:
            raise KeyError("no such thing")

        for kind in ("runs", "jobs"):
            worker = Worker(
                WorkerConfig(kind=kind, error_delay=3600),
                leasing=StoreLeasing(store.leases, make_lease=Lease),
                process=process,
                on_error=failure_events(store),
            )
            assert await worker.process_once() == 1
        events = store.list_events(project_id=project.id)
        assert sorted((e.target_type, e.target_name, e.message) for e in events) == [
            ("job", "stuck", "jobs step failed ('no such thing'); tried again in 3600 s"),
            ("run", "stuck", "runs step failed ('no such thing'); tried again in 3600 s"),
        ]
    finally:
        store.close()
