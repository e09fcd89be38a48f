"""The workers' step reads, each one read transaction: a batch of job steps' rows, a run
step's rows.

A jobs-worker step needs its job (by lease token), the job's run and project, the instance
it is placed on, and whether its project has secrets (read only then); a runs-worker step
needs its run (by lease token) and the run's jobs. `load_job_batch` reads them for every
job of a claimed batch in one statement (the jobs worker's `prepare`: one thread hop per
batch), `load_job_rows` for one job, `load_run_rows` a run and its jobs (two statements);
a cluster's siblings, a project's name. They return frozen domain values
(`domain.workloads`, `domain.inventory`), never ORM rows.
Called by `reconciler.engine.workers.jobs` and `reconciler.engine.workers.runs`;
`job_rows` also inside `Store.place_job`'s transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Instance, Job, Project, Run, Secret
from reconciler.adapters.db.records import instance_record
from reconciler.adapters.db.sessions import StoreBase
from reconciler.adapters.db.workrecords import job_record, project_ref, run_record
from reconciler.domain.inventory import InstanceRecord
from reconciler.domain.workloads import JobRecord, ProjectRef, RunRecord

BATCH = 200
"""Jobs read per statement (bounded IN list)."""


@dataclass(frozen=True, slots=True)
class JobRows:
    """A leased job with its run, project and (when placed) instance, read together."""

    job: JobRecord
    run: RunRecord
    project: ProjectRef
    instance: InstanceRecord | None
    secrets: bool = True  # the project has secrets (False: rendering need not read them)


def job_rows(session: Session, leases: Sequence[tuple[str, str]]) -> dict[str, JobRows]:
    """The rows of each (job id, token) whose lease still holds, by token."""
    found: dict[str, JobRows] = {}
    has_secrets = select(Secret.id).where(Secret.project_id == Project.id).exists()
    for start in range(0, len(leases), BATCH):
        chunk = list(leases[start : start + BATCH])
        query = (
            select(Job, Run, Project, Instance, has_secrets)
            .join(Run, Run.id == Job.run_id)
            .join(Project, Project.id == Run.project_id)
            .outerjoin(Instance, Instance.id == Job.instance_id)
            .where(tuple_(Job.id, Job.lock_token).in_(chunk))
        )
        for job, run, project, instance, secrets in session.execute(query):
            found[str(job.lock_token)] = JobRows(
                job_record(job),
                run_record(run),
                project_ref(project),
                instance_record(instance) if instance is not None else None,
                bool(secrets),
            )
    return found


class StepLoadsStore(StoreBase):
    """The `Store` part for the workers' step reads; see the module docstring."""

    def load_job_batch(self, leases: Sequence[tuple[str, str]]) -> dict[str, JobRows]:
        """Every job of a claimed batch [(job id, token)] still held, by token."""
        if not leases:
            return {}
        with self.reading() as session:
            return job_rows(session, leases)

    def load_job_rows(self, job_id: str, token: str) -> JobRows | None:
        """The job if this lease still holds it, with its run, project and instance."""
        return self.load_job_batch([(job_id, token)]).get(token)

    def load_run_rows(self, run_id: str, token: str) -> tuple[RunRecord, list[JobRecord]] | None:
        """The run if this lease still holds it, with its jobs (as `list_jobs` orders them)."""
        with self.reading() as session:
            run = session.scalars(select(Run).where(Run.id == run_id, Run.lock_token == token))
            found = run.first()
            if found is None:
                return None
            return run_record(found), _run_jobs(session, run_id)

    def run_job_records(self, run_id: str) -> list[JobRecord]:
        """Every job of the run (as `list_jobs` orders them): a cluster's siblings."""
        with self.reading() as session:
            return _run_jobs(session, run_id)

    def project_name(self, project_id: str) -> str | None:
        with self.reading() as session:
            return session.scalars(select(Project.name).where(Project.id == project_id)).first()


def _run_jobs(session: Session, run_id: str) -> list[JobRecord]:
    jobs = session.scalars(
        select(Job)
        .where(Job.run_id == run_id)
        .order_by(Job.replica_num, Job.job_num, Job.submission_num, Job.submitted_at)
    )
    return [job_record(job) for job in jobs]
