"""The generic worker on the real store: two workers (two stores, two connection pools, as
two server replicas would have) process every due row exactly once, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections import Counter

from reconciler.adapters.db.models import Volume
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.engine.worker import Lease, Process, ProcessResult, Worker, WorkerConfig

ROWS = 200


async def test_two_replicas_process_each_row_exactly_once(db_url: str) -> None:
    stores = [Store.from_url(db_url, migrate=True), Store.from_url(db_url)]
    project = stores[0].get_or_create_project("main")
    for i in range(ROWS):
        stores[0].add(
            Volume(
                project_id=project.id,
                name=f"v{i}",
                spec={},
                status="submitted",
                created_at=stores[0].now(),
            )
        )
    seen: Counter[str] = Counter()
    by_replica: Counter[int] = Counter()
    done = asyncio.Event()

    def make_process(replica: int) -> Process:
        async def process(row_id: str, token: str) -> ProcessResult:
            seen[row_id] += 1
            by_replica[replica] += 1
            await asyncio.sleep(0)  # let the other replica claim meanwhile
            if len(seen) == ROWS:
                done.set()
            return 3600.0  # not due again during the test

        return process

    config = WorkerConfig(kind="volumes", concurrency=8, idle_cap=0.01)
    workers = [
        Worker(
            config,
            leasing=StoreLeasing(store.leases, make_lease=Lease),
            process=make_process(i),
            owner=f"replica-{i}",
        )
        for i, store in enumerate(stores)
    ]
    for worker in workers:
        await worker.start()
    try:
        await asyncio.wait_for(done.wait(), 60)
    finally:
        for worker in workers:
            await worker.stop()
        for store in stores:
            store.close()
    assert len(seen) == ROWS
    assert max(seen.values()) == 1, [r for r, n in seen.items() if n > 1]
    assert by_replica[0] > 0 and by_replica[1] > 0, by_replica
