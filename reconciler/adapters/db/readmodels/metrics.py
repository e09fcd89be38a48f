"""The figures `/metrics` reads from the database: reconciles, runs, jobs, worker lag.

`read_figures(session, now)` runs in one read transaction at every scrape
(`reconciler.web.metrics.Metrics` calls it through `Database.read_now`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Fleet, Gateway, Instance, Job, Reconcile, Run, Volume

_FINISHED_RUN = ("terminated", "failed", "done")
_FINISHED_JOB = ("terminated", "aborted", "failed", "done")


@dataclass(frozen=True, slots=True)
class StateFigures:
    """What the collector reads from the database in one short session."""

    reconciles: dict[str, int] = field(default_factory=dict)
    reconcile_seconds: dict[str, tuple[int, float]] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)
    lag_seconds: dict[str, float] = field(default_factory=dict)


def _seconds(later: datetime, earlier: datetime) -> float:
    return max(0.0, (later - earlier).total_seconds())


def read_figures(session: Session, now: datetime) -> StateFigures:
    reconciles = dict(
        session.execute(select(Reconcile.status, func.count()).group_by(Reconcile.status)).all()
    )
    durations: dict[str, tuple[int, float]] = {}
    rows = session.execute(
        select(Reconcile.status, Reconcile.created_at, Reconcile.finished_at).where(
            Reconcile.finished_at.is_not(None)
        )
    )
    for status, created, finished in rows:
        if finished is None:
            continue
        count, total = durations.get(status, (0, 0.0))
        durations[status] = (count + 1, total + _seconds(finished, created))
    runs = dict(
        session.execute(
            select(Run.status, func.count()).where(Run.deleted.is_(False)).group_by(Run.status)
        ).all()
    )
    jobs = dict(session.execute(select(Job.status, func.count()).group_by(Job.status)).all())
    return StateFigures(reconciles, durations, runs, jobs, _read_lag(session, now))


def _read_lag(session: Session, now: datetime) -> dict[str, float]:
    """Per worker kind: how long the least recently processed active row has waited."""
    active: dict[str, tuple[Any, Any, Any]] = {
        "runs": (Run.last_processed_at, Run.submitted_at, Run.status.not_in(_FINISHED_RUN)),
        "jobs": (Job.last_processed_at, Job.submitted_at, Job.status.not_in(_FINISHED_JOB)),
        "instances": (
            Instance.last_processed_at,
            Instance.created_at,
            Instance.status != "terminated",
        ),
        "fleets": (Fleet.last_processed_at, Fleet.created_at, Fleet.deleted.is_(False)),
        "volumes": (Volume.last_processed_at, Volume.created_at, Volume.deleted.is_(False)),
        "gateways": (Gateway.last_processed_at, Gateway.created_at, Gateway.deleted.is_(False)),
    }
    lag: dict[str, float] = {}
    for kind, (processed, created, condition) in active.items():
        # a row never processed has waited since it was made
        oldest = session.scalar(
            select(func.min(func.coalesce(processed, created))).where(condition)
        )
        lag[kind] = _seconds(now, oldest) if oldest is not None else 0.0
    queued = session.scalar(
        select(func.min(Reconcile.created_at)).where(Reconcile.status == "queued")
    )
    lag["reconciles"] = _seconds(now, queued) if queued is not None else 0.0
    return lag
