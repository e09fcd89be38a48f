"""The values one step of the jobs worker works with: config, loaded rows, updates.

Shared by `jobs.py` (submitted, provisioning) and `job_running.py` (running,
terminating), so neither imports the other's internals.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.diskspace import DiskWatch
from reconciler.core.jobspecs import JobSlot
from reconciler.core.transitions import job_status_for
from reconciler.domain.inventory import InstanceRecord
from reconciler.domain.statuses import JobTerminationReason
from reconciler.domain.workloads import JobRecord, ProjectRef, RunRecord
from reconciler.engine.joblogs import LogCap

Update = dict[str, Any]

RELEASE = "__release_blocks__"
"""Update key: (instance id, blocks) to give back in the same transaction as the update."""
REMOVE = "__remove_agent_job__"
"""Update key: the agent job id to remove from its host once the update is stored."""
WAKE_FLEET = "__wake_fleet__"
"""Update key: the fleet to make due (and the fleets worker to hint) once it is stored."""
TAKE = "__take_blocks__"
"""Update key: the placement's `jobsteps.Take`s, taken in the same transaction as the update."""
PASS_WAKE = "__pass_wake__"
"""Update key: the job's `jobsteps.WaitPlace`; it found no room though an instance has free
blocks, so the next job in line that could use them is woken in the same transaction."""
PARK_LIKE = "__park_like__"
"""Update key: the job's `jobsteps.ParkLike`; it found no free block on any instance, so the
project's new jobs like it (same `place_key`) join the waiting line in the same write."""
MARKERS = (RELEASE, REMOVE, WAKE_FLEET, TAKE, PASS_WAKE, PARK_LIKE)


ClusterEnded = Callable[[object], Awaitable[tuple[JobTerminationReason, str] | None]]
"""`(instance resources)`: why the cluster allocation an instance records ended (its jobs'
termination reason and a message), None while it holds its node
(`reconciler.engine.slurmengine`; `WorkerDeps.cluster_ended`)."""


@dataclass(frozen=True, slots=True)
class JobsConfig:
    """Tunables of the jobs worker (built from the server settings)."""

    data_dir: Path
    unreachable_grace: float = 120.0
    wait_poll: float = 2.0
    wait_backoff: float = 300.0  # a job no instance has room for; room made wakes it
    active_poll: float = 1.0
    quick_poll: float = 0.2  # the first seconds after submit/stop: most short jobs end there
    quick_for: float = 5.0
    log_chunk: int = 4 * 1024 * 1024
    log_chunks_per_pass: int = 8
    log_cap: LogCap | None = None  # head and tail kept of each log (None: everything)
    disk: DiskWatch | None = None  # the data dir: nearly full, logs wait on the agent
    disk_poll: float = 3.0  # an ended job whose log waits for that space: looked at again
    cluster_ended: ClusterEnded | None = None  # why a Slurm allocation ended (None: no Slurm)


@dataclass(frozen=True, slots=True)
class JobContext:
    """The rows one processing step needs, read once (with its claimed batch:
    `Store.load_job_batch`)."""

    job: JobRecord
    run: RunRecord
    project: ProjectRef
    instance: InstanceRecord | None = None  # where the job is placed, as read with it
    secrets: bool = True  # its project has secrets (False: rendering need not read them)

    @property
    def slot(self) -> JobSlot:
        data = self.job.job_spec if isinstance(self.job.job_spec, Mapping) else {}
        slot = data.get("slot") or {}
        return JobSlot(
            replica_num=self.job.replica_num,
            job_num=self.job.job_num,
            group_name=self.job.group_name,
            nodes=int(slot.get("nodes") or 1),
            spec=data.get("spec") or self.run.spec,
        )

    @property
    def runtime(self) -> dict[str, Any]:
        return dict(self.job.runtime) if isinstance(self.job.runtime, Mapping) else {}


def finish(reason: JobTerminationReason, now: Any, message: str = "", **extra: Any) -> Update:
    """The update that ends a job for `reason`."""
    return {
        "status": job_status_for(reason).value,
        "termination_reason": reason.value,
        "status_message": message,
        "finished_at": now,
        **extra,
    }
