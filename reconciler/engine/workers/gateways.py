"""The gateways worker: the gateway's stack up (`running`) or destroyed (`terminated`).

The embedded default is the server's built-in proxy (local engine: outputs its URL);
cloud gateways go through the Pulumi engine. Same steps as volumes (`volumes.py`).
"""

from __future__ import annotations

from reconciler.engine.worker import Process, WorkerConfig
from reconciler.engine.workers import WorkerDeps
from reconciler.engine.workers.stacking import StackRows
from reconciler.engine.workers.volumes import process_capacity

CONFIG = WorkerConfig(kind="gateways", concurrency=10, lease_seconds=30.0, min_interval=15.0)
READY = "running"


def make_process(deps: WorkerDeps) -> Process:
    rows = StackRows(deps, "gateway")
    return lambda row_id, token: process_capacity(rows, READY, row_id, token)
