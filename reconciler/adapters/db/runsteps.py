"""The runs worker's write as one unit of work: the run's values, its event, its lease.

`record_run_write(write)` writes a run's values fenced by its lease token and by the status
it was read in (a stop from the API always wins), the status-change event, and, with
`release_lease`, drops the lease and sets when the run is due again — one transaction, where
it used to be three (the fenced update, the event, the release). Called by
`reconciler.engine.workers.runs`. A run whose last job ended goes `terminating` and to its
end in one write (two events). `submit_job` inserts a job the runs worker submits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from reconciler.adapters.db.models import Event, Job, Run
from reconciler.adapters.db.sessions import StoreBase
from reconciler.adapters.db.stepstatements import RUNS, fenced_write
from reconciler.core.jobspecs import place_key_of
from reconciler.core.scheduling import wait_rank
from reconciler.domain.statuses import JobStatus


@dataclass(frozen=True, slots=True)
class RunWrite:
    """One fenced write of a run, with what goes in the same transaction."""

    run_id: str
    token: str
    read_status: str
    project_id: str
    values: Mapping[str, Any]
    events: tuple[tuple[str, str], ...] = ()  # (target name, message), in order
    release_lease: float | None = None  # set: the lease goes with the write, due again then


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job the runs worker submits for a run's slot (`submit_job`)."""

    run_id: str
    nodes: int
    spec: Mapping[str, Any]
    replica_num: int
    job_num: int
    group_name: str | None
    submission_num: int
    deployment_num: int


class RunStepsStore(StoreBase):
    """The `Store` part for the runs worker's writes; see the module docstring."""

    def record_run_write(self, write: RunWrite) -> bool:
        """The write in one transaction; False (nothing written) if the fence failed."""
        now = self.now()
        fenced, params = fenced_write(
            RUNS,
            write.values,
            row_id=write.run_id,
            token=write.token,
            read_status=write.read_status,
            now=now,
            release_lease=write.release_lease,
        )
        with self.writing() as session:
            if not session.connection().execute(fenced, params).rowcount:
                return False
            for i, (target_name, message) in enumerate(write.events):
                session.add(
                    Event(
                        project_id=write.project_id,
                        target_type="run",
                        target_id=write.run_id,
                        target_name=target_name,
                        message=message,
                        created_at=now + timedelta(microseconds=i),  # listed in order
                    )
                )
        return True

    def submit_job(self, new: NewJob) -> str:
        """Insert a `submitted` job for a run's slot; its id."""
        job = Job(
            run_id=new.run_id,
            status=JobStatus.SUBMITTED.value,
            job_spec={"slot": {"nodes": new.nodes}, "spec": dict(new.spec)},
            submitted_at=self.now(),
            replica_num=new.replica_num,
            job_num=new.job_num,
            group_name=new.group_name,
            submission_num=new.submission_num,
            deployment_num=new.deployment_num,
        )
        with self.writing() as session:
            run_type = session.scalar(select(Run.run_type).where(Run.id == new.run_id))
            job.wait_rank = wait_rank(run_type or "task")
            job.place_key = place_key_of(new.spec, new.nodes)
            session.add(job)
        return job.id
