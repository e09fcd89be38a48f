"""The workers' step reads, each one read transaction: a job step's rows, a run step's rows.

A jobs-worker step needs its job (by lease token), the job's run and project, and the
instance it is placed on; a runs-worker step needs its run (by lease token) and the run's
jobs. Read one by one they cost a transaction each (4 and 2); here they are one each
(`load_job_rows`: one statement; `load_run_rows`: two). Called by
`reconciler.engine.workers.jobs` and `reconciler.engine.workers.runs`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from reconciler.adapters.db.models import Instance, Job, Project, Run
from reconciler.adapters.db.sessions import StoreBase


@dataclass(frozen=True, slots=True)
class JobRows:
    """A leased job with its run, project and (when placed) instance, read together."""

    job: Job
    run: Run
    project: Project
    instance: Instance | None


class StepLoadsStore(StoreBase):
    """The `Store` part for the workers' step reads; see the module docstring."""

    def load_job_rows(self, job_id: str, token: str) -> JobRows | None:
        """The job if this lease still holds it, with its run, project and instance."""
        query = (
            select(Job, Run, Project, Instance)
            .join(Run, Run.id == Job.run_id)
            .join(Project, Project.id == Run.project_id)
            .outerjoin(Instance, Instance.id == Job.instance_id)
            .where(Job.id == job_id, Job.lock_token == token)
        )
        with self.reading() as session:
            found = session.execute(query).first()
        if found is None:
            return None
        job, run, project, instance = found
        return JobRows(job, run, project, instance)

    def load_run_rows(self, run_id: str, token: str) -> tuple[Run, list[Job]] | None:
        """The run if this lease still holds it, with its jobs (as `list_jobs` orders them)."""
        with self.reading() as session:
            run = session.scalars(select(Run).where(Run.id == run_id, Run.lock_token == token))
            found = run.first()
            if found is None:
                return None
            jobs = session.scalars(
                select(Job)
                .where(Job.run_id == run_id)
                .order_by(Job.replica_num, Job.job_num, Job.submission_num, Job.submitted_at)
            )
            return found, list(jobs)
