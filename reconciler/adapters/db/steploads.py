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

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar, cast

from sqlalchemy import Select, Table, bindparam, select, tuple_
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Instance, Job, Project, Run, Secret
from reconciler.adapters.db.sessions import StoreBase
from reconciler.adapters.db.workrecords import job_record, run_record
from reconciler.domain.inventory import InstanceRecord
from reconciler.domain.workloads import JobRecord, ProjectRef, RunRecord

BATCH = 200
"""Jobs read per statement (bounded IN list)."""
RecordT = TypeVar("RecordT")


@dataclass(frozen=True, slots=True)
class JobRows:
    """A leased job with its run, project and (when placed) instance, read together."""

    job: JobRecord
    run: RunRecord
    project: ProjectRef
    instance: InstanceRecord | None
    secrets: bool = True  # the project has secrets (False: rendering need not read them)


def job_rows(session: Session, leases: Sequence[tuple[str, str]]) -> dict[str, JobRows]:
    """The rows of each (job id, token) whose lease still holds, by token (Core rows made
    into records: no ORM objects to build and track, the hot read of every job step)."""
    found: dict[str, JobRows] = {}
    connection = session.connection()
    for start in range(0, len(leases), BATCH):
        chunk = list(leases[start : start + BATCH])
        for row in connection.execute(_job_rows_query(), {"p_leases": chunk}):
            m = row._mapping
            instance = _record(InstanceRecord, m, "i_") if m["i_id"] is not None else None
            found[str(m["lease_token"])] = JobRows(
                _record(JobRecord, m, "j_"),
                _record(RunRecord, m, "r_"),
                _record(ProjectRef, m, "p_"),
                instance,
                bool(m["has_secrets"]),
            )
    return found


_LOADED: tuple[tuple[type[Any], Table, str], ...] = (
    (JobRecord, cast(Table, Job.__table__), "j_"),
    (RunRecord, cast(Table, Run.__table__), "r_"),
    (ProjectRef, cast(Table, Project.__table__), "p_"),
    (InstanceRecord, cast(Table, Instance.__table__), "i_"),
)


_NAMES: dict[type[Any], tuple[str, ...]] = {
    record: tuple(f.name for f in fields(record)) for record, _, _ in _LOADED
}
"""Each record's fields: columns of its table, of the same names."""


def _record(record: type[RecordT], mapping: Mapping[Any, Any], prefix: str) -> RecordT:
    return record(**{name: mapping[prefix + name] for name in _NAMES[record]})


@functools.cache
def _job_rows_query() -> Select[Any]:
    """The batch read, built once: each record's columns labelled by table, the lease
    pairs an expanding parameter (`p_leases`)."""
    jobs, runs, projects, instances = (table for _, table, _ in _LOADED)
    columns = [
        table.c[name].label(prefix + name)
        for record, table, prefix in _LOADED
        for name in _NAMES[record]
    ]
    secrets = cast(Table, Secret.__table__)
    has_secrets = select(secrets.c.id).where(secrets.c.project_id == projects.c.id).exists()
    pairs = tuple_(jobs.c.id, jobs.c.lock_token)
    return (
        select(*columns, has_secrets.label("has_secrets"), jobs.c.lock_token.label("lease_token"))
        .select_from(
            jobs.join(runs, runs.c.id == jobs.c.run_id)
            .join(projects, projects.c.id == runs.c.project_id)
            .outerjoin(instances, instances.c.id == jobs.c.instance_id)
        )
        .where(pairs.in_(bindparam("p_leases", expanding=True)))
    )


class StepLoadsStore(StoreBase):
    """The `Store` part for the workers' step reads; see the module docstring."""

    def load_job_batch(self, leases: Sequence[tuple[str, str]]) -> dict[str, JobRows]:
        """Every job of a claimed batch [(job id, token)] still held, by token."""
        if not leases:
            return {}
        # one statement per chunk, each whole alone (a job with its run, project, instance)
        with self.reading_unpinned() as session:
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
