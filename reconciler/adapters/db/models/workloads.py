"""Runs and their jobs: the rows the run and job workers take with a lease.

Statuses and termination reasons are dstack's strings; this module does not
interpret them. A run belongs to a project and, when managed, to a `resources` row; a job
belongs to a run and, once placed, to an instance.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from reconciler.adapters.db.models.base import Base, JSONText, Leased, UTCDateTime, id_column


class Run(Leased, Base, kw_only=True):
    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_project_name", "project_id", "run_name"),
        Index("ix_runs_status_processed", "status", "last_processed_at"),
    )

    id: Mapped[str] = id_column()
    project_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE")
    )
    run_name: Mapped[str] = mapped_column(String(200))
    run_type: Mapped[str] = mapped_column(String(32))  # task | service | dev-environment
    spec: Mapped[Any] = mapped_column(JSONText)
    spec_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))
    submitted_at: Mapped[datetime] = mapped_column(UTCDateTime())
    resource_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("resources.id", ondelete="SET NULL"), default=None, index=True
    )
    termination_reason: Mapped[str | None] = mapped_column(String(64), default=None)
    status_message: Mapped[str] = mapped_column(Text, default="")
    deployment_num: Mapped[int] = mapped_column(Integer, default=0)
    next_triggered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)


class Job(Leased, Base, kw_only=True):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_status_processed", "status", "last_processed_at"),
        # The claim and `next_due` read active jobs by status (a positive list: finished
        # jobs, the whole history, are never walked) and due time.
        Index("ix_jobs_status_due", "status", "due_at"),
        # The wake of waiting jobs walks the line in its order and stops at the first
        # that fits (`stepstatements.wake_waiting`): its cost does not grow with it.
        Index("ix_jobs_waiting_line", "status", "wait_rank", "submitted_at", "id"),
    )

    id: Mapped[str] = id_column()
    run_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("runs.id", ondelete="CASCADE"), index=True
    )
    status: Mapped[str] = mapped_column(String(32))
    job_spec: Mapped[Any] = mapped_column(JSONText)
    submitted_at: Mapped[datetime] = mapped_column(UTCDateTime())
    replica_num: Mapped[int] = mapped_column(Integer, default=0)
    job_num: Mapped[int] = mapped_column(Integer, default=0)
    group_name: Mapped[str | None] = mapped_column(String(200), default=None)
    submission_num: Mapped[int] = mapped_column(Integer, default=0)
    deployment_num: Mapped[int] = mapped_column(Integer, default=0)
    termination_reason: Mapped[str | None] = mapped_column(String(64), default=None)
    status_message: Mapped[str] = mapped_column(Text, default="")
    exit_status: Mapped[int | None] = mapped_column(Integer, default=None)
    instance_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("instances.id", ondelete="SET NULL"), default=None, index=True
    )
    agent_job_id: Mapped[str | None] = mapped_column(String(200), default=None)
    log_offset: Mapped[int] = mapped_column(BigInteger, default=0)
    unreachable_since: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    # A job waiting for busy capacity: the fewest free blocks one instance needs before
    # it can fit (`scheduling.room_ask`), so blocks given back wake a job they can hold.
    room_ask: Mapped[int | None] = mapped_column(Integer, default=None)
    # Its place in the line of waiting jobs, before the time it came: 0 for a service or a
    # dev environment (someone waits on it), 1 for a task (`jobsteps.wait_rank`).
    # Set by the units of work that submit jobs (the database's 1 for rows without it).
    wait_rank: Mapped[int] = mapped_column(Integer, server_default="1", init=False)
    # Equal for jobs placement cannot tell apart (`scheduling.place_key`): one that finds no
    # room parks the new ones like it in the line (`jobsteps.ParkLike`). Set on submit.
    place_key: Mapped[str | None] = mapped_column(String(32), default=None, init=False)
    # What the jobs worker learns while the job runs: allocated GPUs and blocks, host ports,
    # started_at, probe readiness. Owned by reconciler.engine.workers.jobs.
    runtime: Mapped[Any] = mapped_column(JSONText, default=None, nullable=True)
