"""What a jobs-worker step writes beside its job: its events and the run that follows it.

`step_events`/`run_events` build the rows of `events` a step adds (the job's status change,
then the run's, in order) so the step inserts them all in one statement; `follow_run`
writes a one-job run's new values with its job (`core.runfollow`), fenced by the run's
status read and only while no runs worker holds the run — else the run is made due and its
worker decides. Called inside `Store.record_job_step`'s transaction (`jobsteps.py`), on its
connection.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Update, bindparam, update

from reconciler.adapters.db.leasing import leased_table
from reconciler.adapters.db.models import Run, new_id
from reconciler.core.runfollow import RunFollow

_RUNS = leased_table(Run)  # Core DML: cheaper than the ORM's bulk update (`jobsteps._JOBS`)


@dataclass(frozen=True, slots=True)
class RunFollowing:
    """A one-job run's new values written with its job (see the module docstring)."""

    read_status: str
    target_name: str
    change: RunFollow


def following(follow: RunFollowing | None) -> bool:
    """Whether there is a run write to try (no values: the run stays as it is)."""
    return follow is not None and bool(follow.change.values)


def follow_run(connection: Connection, run_id: str, follow: RunFollowing | None) -> bool:
    """Write the run's values with its job; False: made due instead (nothing written)."""
    assert follow is not None
    values = follow.change.values
    params = {f"v_{name}": value for name, value in values.items()}
    params |= {"p_id": run_id, "p_status": follow.read_status}
    written = connection.execute(_run_write(tuple(sorted(values))), params).rowcount
    if not written:  # held by a runs worker, or changed meanwhile: it decides
        connection.execute(_make_due(), {"p_id": run_id})
    return bool(written)


@functools.cache
def _run_write(names: tuple[str, ...]) -> Update:
    """The followed run's write (built once per set of columns; see `stepstatements`)."""
    c = _RUNS.c
    fence = (c.id == bindparam("p_id"), c.status == bindparam("p_status"), c.lock_token.is_(None))
    values = {name: bindparam(f"v_{name}", type_=c[name].type) for name in names}
    return update(_RUNS).where(*fence).values(**values)


@functools.cache
def _make_due() -> Update:
    return update(_RUNS).where(_RUNS.c.id == bindparam("p_id")).values(due_at=None)


def step_events(
    project_id: str, job_id: str, event: tuple[str, str] | None, now: datetime
) -> list[dict[str, Any]]:
    """The job's status-change event (target name, message), as `events` values."""
    if event is None:
        return []
    target_name, message = event
    return [_event(project_id, "job", job_id, target_name, message, now)]


def run_events(
    project_id: str, run_id: str, follow: RunFollowing, now: datetime
) -> list[dict[str, Any]]:
    """The followed run's status-change events, just after the job's and in order."""
    return [
        _event(project_id, "run", run_id, follow.target_name, message, now + timedelta(0, 0, i + 1))
        for i, message in enumerate(follow.change.events)
    ]


def _event(
    project_id: str, kind: str, target_id: str, name: str, message: str, at: datetime
) -> dict[str, Any]:
    return {
        "id": new_id(),
        "project_id": project_id,
        "target_type": kind,
        "target_id": target_id,
        "target_name": name,
        "message": message,
        "created_at": at,
    }
