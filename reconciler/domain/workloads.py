"""Frozen copies of the workload rows the workers step: runs, jobs, and their project.

The store (`reconciler.adapters.db`) reads `runs` and `jobs` rows and hands out these values
(`Store.load_job_batch`, `load_run_rows`, …), so the jobs and runs workers never hold an ORM
row: `RunRecord` (a run as recorded), `JobRecord` (a job as recorded), `ProjectRef` (the
project's id and name). A worker's write says what changes; it never mutates these. Pure:
no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectRef:
    """A project's id and name."""

    id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One `runs` row (without its lease stamps)."""

    id: str
    project_id: str
    run_name: str
    run_type: str
    spec: Any
    spec_hash: str
    status: str
    submitted_at: datetime
    resource_id: str | None = None
    termination_reason: str | None = None
    status_message: str = ""
    deployment_num: int = 0
    next_triggered_at: datetime | None = None
    priority: int = 0
    deleted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    """One `jobs` row (without its lease stamps)."""

    id: str
    run_id: str
    status: str
    job_spec: Any
    submitted_at: datetime
    replica_num: int = 0
    job_num: int = 0
    group_name: str | None = None
    submission_num: int = 0
    deployment_num: int = 0
    termination_reason: str | None = None
    status_message: str = ""
    exit_status: int | None = None
    instance_id: str | None = None
    agent_job_id: str | None = None
    log_offset: int = 0
    unreachable_since: datetime | None = None
    finished_at: datetime | None = None
    room_ask: int | None = None
    """Waiting for busy capacity: the free blocks one instance needs before it can fit."""
    runtime: Any = None
    """What the jobs worker keeps of a placed job (GPUs, blocks, ports, started_at, …)."""
