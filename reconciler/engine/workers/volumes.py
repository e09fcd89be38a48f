"""The volumes worker: brings each volume's stack up once and destroys it when asked.

`submitted` → `active` with the engine's outputs (a local directory, a cloud disk id);
`terminating` → destroyed, `terminated`, and dropped from the inventory. An active volume
needs nothing until its row changes (dstack: volumes cannot change in place). See
`stacking` for the engine rules shared with gateways and fleets.
"""

from __future__ import annotations

from reconciler.engine.outcomes import Outcome
from reconciler.engine.worker import Process, ProcessResult, WorkerConfig
from reconciler.engine.workers import WorkerDeps
from reconciler.engine.workers.stacking import StackRows

CONFIG = WorkerConfig(kind="volumes", concurrency=10, lease_seconds=30.0, min_interval=15.0)
READY = "active"
IDLE_INTERVAL = 300.0


def make_process(deps: WorkerDeps) -> Process:
    rows = StackRows(deps, "volume")
    return lambda row_id, token: process_capacity(rows, READY, row_id, token)


async def process_capacity(rows: StackRows, ready: str, row_id: str, token: str) -> ProcessResult:
    """One step of a volume or gateway row (shared: both are a single stack)."""
    row = await rows.load(row_id, token)
    if row is None:
        return None
    if row.status == "terminating":
        failed = await rows.destroy(row, token)
        return failed.retry_after if failed is not None else None
    if row.status == ready:
        return IDLE_INTERVAL
    outputs = await rows.up(row, token)
    if isinstance(outputs, Outcome):
        return outputs.retry_after
    if await rows.write(row, token, status=ready, status_message="", outputs=outputs):
        await rows.event(row, f"{rows.kind} {row.name} {ready}")
        await rows.set_resource(row, ready)
    return IDLE_INTERVAL
