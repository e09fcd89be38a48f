"""A plan batch's rows read and written at once: what the actions of runs find and insert.

Applying a commit of hundreds of new tasks one action at a time read each one's live
resource and active runs (two statements) and flushed its resource, run and jobs (three
INSERTs) — five statements per task. `prefetch` reads the live resources and active runs
of every run action of the batch in two statements; the new rows of those actions are
deferred and inserted table by table (`flush_deferred`: resources, then runs, then jobs,
so the foreign keys hold; one multi-row INSERT each). Used by
`planwrites.PlanWritesStore.apply_plan_batch` through `applying.ApplyContext.known`, in
the batch's one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Job, Resource, Run
from reconciler.domain.plan import Action
from reconciler.domain.statuses import RunStatus

_FINISHED = [s.value for s in RunStatus if s.is_finished()]
_CHUNK = 500
"""Names per IN list."""


@dataclass
class KnownRows:
    """The batch's run resources and active runs, by name, and the rows to insert."""

    resource_keys: set[tuple[str, str]]
    resources: dict[tuple[str, str], Resource] = field(default_factory=dict)
    runs: dict[str, list[Run]] = field(default_factory=dict)  # newest first
    new_resources: list[Resource] = field(default_factory=list)
    new_runs: list[Run] = field(default_factory=list)
    new_jobs: list[Job] = field(default_factory=list)

    def covers(self, kind: str, name: str) -> bool:
        return (kind, name) in self.resource_keys

    def live_resource(self, kind: str, name: str) -> Resource | None:
        row = self.resources.get((kind, name))
        return row if row is not None and row.deleted_at is None else None

    def active_runs(self, name: str) -> list[Run]:
        return [r for r in self.runs.get(name, []) if not r.deleted and r.status not in _FINISHED]

    def add_resource(self, row: Resource) -> None:
        self.resources[(row.kind, row.name)] = row
        self.new_resources.append(row)

    def add_run(self, run: Run) -> None:
        self.runs.setdefault(run.run_name, []).insert(0, run)
        self.new_runs.append(run)


def prefetch(session: Session, project_id: str, actions: Sequence[Action]) -> KnownRows:
    """The live resources and active runs of the batch's run actions (two statements)."""
    keys = {(a.kind.value, a.name) for a in actions if a.kind.is_run and a.action.changes}
    known = KnownRows(resource_keys=keys)
    names = sorted({name for _, name in keys})
    for chunk in _chunks(names):
        for row in session.scalars(
            select(Resource).where(
                Resource.project_id == project_id,
                Resource.name.in_(chunk),
                Resource.deleted_at.is_(None),
            )
        ):
            if (row.kind, row.name) in keys:
                known.resources[(row.kind, row.name)] = row
        for run in session.scalars(
            select(Run)
            .where(
                Run.project_id == project_id,
                Run.run_name.in_(chunk),
                Run.deleted.is_(False),
                Run.status.not_in(_FINISHED),
            )
            .order_by(Run.submitted_at.desc(), Run.id)
        ):
            known.runs.setdefault(run.run_name, []).append(run)
    return known


def flush_deferred(session: Session, known: KnownRows) -> None:
    """Insert the deferred rows, table by table (foreign keys first)."""
    for rows in (known.new_resources, known.new_runs, known.new_jobs):
        if rows:
            session.add_all(rows)
            session.flush()


def _chunks(names: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(names), _CHUNK):
        yield names[start : start + _CHUNK]
