"""The retention sweep's units of work: prune old history in bounded batches, and lease the
sweep so one replica at a time runs it.

Each `prune_*` call is one transaction that deletes at most `batch` rows and returns how many
it deleted (the caller loops while a batch comes back full). What is never pruned: the
newest finished reconcile of every project, the newest one that applied a revision (the last good
revision is read from it), and reconciles still queued or running; a run that has not finished,
has a job not finished or held by a worker, is the newest (not deleted) run of its name in its
project or of its managed resource (what `runs/get`, the console and the planner read). Log
files and uploaded archives live on disk: `finished_log_jobs` and `archives_in_use` say which
the sweep may delete (a pruned run's job logs go like those of any job no row knows). Called by
`reconciler.engine.retention`; see docs/operations.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, delete, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from reconciler.adapters.db.models import Delivery, Event, Job, Maintenance, Reconcile, Run
from reconciler.adapters.db.sessions import StoreBase

FINISHED_RUN = ("terminated", "failed", "done")
FINISHED_JOB = ("terminated", "aborted", "failed", "done")
FINISHED_RECONCILE = ("succeeded", "failed", "aborted")


@dataclass(frozen=True, slots=True)
class Keep:
    """Rows are kept while younger than `max_age` and among the newest `max_count`."""

    max_age: timedelta
    max_count: int


class RetentionStore(StoreBase):
    """See the module docstring."""

    def ensure_maintenance(self, name: str) -> None:
        """Create the leased row of the periodic task `name` if it is not there yet."""
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        with self.writing() as session:
            session.execute(insert(Maintenance).values(id=name).on_conflict_do_nothing())

    def maintenance_result(self, name: str) -> Any:
        """What the last run of task `name` recorded (None before the first)."""
        with self.reading() as session:
            row = session.get(Maintenance, name)
            return None if row is None else row.last_result

    def prune_events(self, keep: Keep, batch: int) -> int:
        return self._prune_by_age_and_count(Event, Event.created_at, keep, batch)

    def prune_deliveries(self, keep: Keep, batch: int) -> int:
        return self._prune_by_age_and_count(Delivery, Delivery.received_at, keep, batch)

    def _prune_by_age_and_count(
        self, model: type[Event] | type[Delivery], stamp: Any, keep: Keep, batch: int
    ) -> int:
        cutoff = self.now() - keep.max_age
        old = select(model.id).where(stamp < cutoff).order_by(stamp).limit(batch)
        surplus = select(model.id).order_by(stamp.desc(), model.id.desc()).offset(keep.max_count)
        return self._delete_ids(model, old, surplus.limit(batch))

    def prune_reconciles(self, keep: Keep, batch: int) -> int:
        """Finished reconciles past the age or beyond the newest `max_count` finished ones
        of their project, except each project's newest finished and newest applied one."""
        rank = (
            func.row_number()
            .over(
                partition_by=Reconcile.project_id,
                order_by=(Reconcile.created_at.desc(), Reconcile.id.desc()),
            )
            .label("rank")
        )
        finished = Reconcile.status.in_(FINISHED_RECONCILE)
        ranked = select(Reconcile.id, Reconcile.created_at, rank).where(finished).subquery()
        cutoff = self.now() - keep.max_age
        candidates = (
            select(ranked.c.id)
            .where(
                ranked.c.rank > 1,
                or_(ranked.c.rank > keep.max_count, ranked.c.created_at < cutoff),
                ranked.c.id.not_in(self._last_applied()),
            )
            .order_by(ranked.c.created_at)
            .limit(batch)
        )
        return self._delete_ids(Reconcile, candidates)

    @staticmethod
    def _last_applied() -> Select[tuple[str]]:
        newest = (
            select(
                Reconcile.id,
                func.row_number()
                .over(
                    partition_by=Reconcile.project_id,
                    order_by=(Reconcile.finished_at.desc(), Reconcile.id.desc()),
                )
                .label("rank"),
            )
            .where(Reconcile.status == "succeeded", Reconcile.applied_revision.is_not(None))
            .subquery()
        )
        return select(newest.c.id).where(newest.c.rank == 1)

    def prune_runs(self, keep: Keep, batch: int) -> int:
        """Finished runs, with their jobs, that ended before `max_age` or are beyond the newest
        `max_count` finished runs of their project; never those the module docstring keeps.
        A run ended when its last job did (its submission when it has no job). The batch is
        found in a read (a scan of the runs) and deleted in one write transaction that checks
        again what could have changed since (status, leases, jobs), so the write lock is
        held only for the deletes."""
        now = self.now()
        cutoff = now - keep.max_age
        rank = (
            func.row_number()
            .over(
                partition_by=Run.project_id,
                order_by=(Run.submitted_at.desc(), Run.id.desc()),
            )
            .label("rank")
        )
        ranked = (
            select(Run.id, Run.submitted_at, rank)
            .where(Run.status.in_(FINISHED_RUN), _unlocked(Run, now))
            .subquery()
        )
        busy_job = (Job.status.not_in(FINISHED_JOB)) | Job.finished_at.is_(None)
        busy = select(Job.run_id).where(busy_job | ~_unlocked(Job, now))
        young = select(Job.run_id).where(Job.finished_at >= cutoff)
        old = (ranked.c.submitted_at < cutoff) & ranked.c.id.not_in(young)
        candidates = (
            select(ranked.c.id)
            .where(
                or_(ranked.c.rank > keep.max_count, old),
                ranked.c.id.not_in(busy),
                ranked.c.id.not_in(_newest_runs(Run.project_id, Run.run_name)),
                ranked.c.id.not_in(_newest_runs(Run.resource_id)),
            )
            .order_by(ranked.c.submitted_at)
            .limit(batch)
        )
        with self.reading() as session:  # the scan: a snapshot, no write lock held
            found = list(session.scalars(candidates))
        if not found:
            return 0
        with self.writing() as session:  # what still holds for them, then the deletes
            still = select(Run.id).where(
                Run.id.in_(found),
                Run.status.in_(FINISHED_RUN),
                _unlocked(Run, now),
                Run.id.not_in(busy.where(Job.run_id.in_(found))),
            )
            ids = list(session.scalars(still))
            if ids:
                session.execute(delete(Job).where(Job.run_id.in_(ids)))
                session.execute(delete(Run).where(Run.id.in_(ids)))
        return len(ids)

    def _delete_ids(self, model: Any, *queries: Select[Any]) -> int:
        with self.writing() as session:
            ids: set[str] = set()
            for query in queries:
                ids.update(session.scalars(query))
            if not ids:
                return 0
            session.execute(delete(model).where(model.id.in_(ids)))
        return len(ids)

    def finished_log_jobs(self, job_ids: Iterable[str], ended_before: datetime) -> set[str]:
        """Of `job_ids`, those whose log may go: the job finished before `ended_before` and
        its run has finished too, or no such job exists any more."""
        wanted = set(job_ids)
        if not wanted:
            return set()
        finished: ColumnElement[bool] = (Job.finished_at.is_not(None)) & (
            Job.finished_at < ended_before
        )
        query = select(Job.id, finished & Run.status.in_(FINISHED_RUN)).join(
            Run, Run.id == Job.run_id
        )
        with self.reading() as session:
            rows = session.execute(query.where(Job.id.in_(wanted))).all()
        known = {job_id: bool(done) for job_id, done in rows}
        return {job_id for job_id in wanted if known.get(job_id, True)}

    def archives_in_use(self) -> set[str]:
        """Every uploaded archive id a run that has not finished names."""
        named: set[str] = set()
        with self.reading() as session:
            for spec in session.scalars(select(Run.spec).where(Run.status.not_in(FINISHED_RUN))):
                refs = spec.get("file_archives") if isinstance(spec, dict) else None
                for ref in refs or ():
                    if isinstance(ref, dict) and isinstance(ref.get("id"), str):
                        named.add(ref["id"])
        return named


def _unlocked(model: type[Run] | type[Job], now: datetime) -> ColumnElement[bool]:
    """No worker holds the row's lease."""
    return or_(model.lock_expires_at.is_(None), model.lock_expires_at <= now)


def _newest_runs(*partition: Any) -> Select[tuple[str]]:
    """The newest not deleted run of each value of `partition` (NULLs left out)."""
    newest = (
        select(
            Run.id,
            func.row_number()
            .over(partition_by=partition, order_by=(Run.submitted_at.desc(), Run.id.desc()))
            .label("rank"),
        )
        .where(Run.deleted.is_(False), *(column.is_not(None) for column in partition))
        .subquery()
    )
    return select(newest.c.id).where(newest.c.rank == 1)
