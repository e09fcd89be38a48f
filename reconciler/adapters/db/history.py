"""The `Store` methods for what happened: events and reconciles.

Every state change is an event row (`append_event`), and so is a worker's step failing on
a row for a reason other than the store refusing it (`note_step_failure`). A reconcile
row follows one pass: `create_reconcile` (queued) → `set_reconcile_stage` per stage
(running; each stage's start and duration go to `stage_timings`) → `finish_reconcile`
(succeeded|failed|aborted, with the outcome). Webhook deliveries are recorded by the
routes' unit (`reconciler.adapters.db.readmodels.project.record_delivery`), deduped on
(provider, delivery_id) by the unique constraint, so two replicas receiving the same
delivery agree on which one is new (tests/store/test_store_history.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, delete, select
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Event, Job, Project, Reconcile, Run
from reconciler.adapters.db.records import reconcile_record
from reconciler.adapters.db.sessions import StoreBase
from reconciler.adapters.db.workleasing import WORK_MODELS
from reconciler.domain.history import ReconcileRecord
from reconciler.errors import UsageError

RECONCILE_TRIGGERS = frozenset({"timer", "webhook", "cli", "api", "startup"})
RECONCILE_OUTCOMES = frozenset({"succeeded", "failed", "aborted"})


class HistoryStore(StoreBase):
    # -- events -----------------------------------------------------------------------------

    def append_event(
        self,
        *,
        project_id: str | None,
        target_type: str,
        target_name: str,
        message: str,
        target_id: str | None = None,
    ) -> None:
        self.add(
            Event(
                project_id=project_id,
                target_type=target_type,
                target_id=target_id,
                target_name=target_name,
                message=message,
                created_at=self.now(),
            )
        )

    def note_step_failure(self, kind: str, row_id: str, message: str) -> None:
        """An event on the row a worker's step keeps failing on (the worker's `on_error`),
        in its project, named as the row is (a job by its run); none for a row gone."""
        model = WORK_MODELS.get(kind)
        with self.writing() as session:
            row = session.get(model, row_id) if model is not None else None
            if row is None:
                return
            named = session.get(Run, row.run_id) if isinstance(row, Job) else row
            name = getattr(named, "run_name", None) or getattr(named, "name", None) or row_id
            session.add(
                Event(
                    project_id=getattr(named, "project_id", None),
                    target_type=kind.removesuffix("s"),
                    target_id=row_id,
                    target_name=str(name)[:200],
                    message=message,
                    created_at=self.now(),
                )
            )

    def list_events(
        self,
        *,
        project_id: str | None = None,
        target_type: str | None = None,
        target_id: str | None = None,
        target_name: str | None = None,
        since: datetime | None = None,
        before: datetime | None = None,
        limit: int = 100,
        ascending: bool = False,
    ) -> list[Event]:
        """Events matching every filter given, newest first unless `ascending`."""
        query = select(Event)
        if project_id is not None:
            query = query.where(Event.project_id == project_id)
        if target_type is not None:
            query = query.where(Event.target_type == target_type)
        if target_id is not None:
            query = query.where(Event.target_id == target_id)
        if target_name is not None:
            query = query.where(Event.target_name == target_name)
        if since is not None:
            query = query.where(Event.created_at >= since)
        if before is not None:  # paging back: pass the oldest `created_at` seen
            query = query.where(Event.created_at < before)
        if ascending:
            query = query.order_by(Event.created_at, Event.id)
        else:
            query = query.order_by(Event.created_at.desc(), Event.id.desc())
        with self.reading() as session:
            return list(session.scalars(query.limit(limit)))

    # -- reconciles -------------------------------------------------------------------------

    def create_reconcile(
        self,
        project_id: str,
        *,
        trigger: str,
        delivery_id: str | None = None,
        attempted_revision: str | None = None,
    ) -> Reconcile:
        """A new queued reconcile."""
        if trigger not in RECONCILE_TRIGGERS:
            raise UsageError(f"unknown reconcile trigger {trigger!r}")
        return self.add(
            Reconcile(
                project_id=project_id,
                trigger=trigger,
                status="queued",
                delivery_id=delivery_id,
                attempted_revision=attempted_revision,
                created_at=self.now(),
            )
        )

    def queue_reconcile(
        self,
        project_id: str,
        *,
        trigger: str,
        delivery_id: str | None = None,
        revision: str | None = None,
    ) -> str:
        """Queue a reconcile of the project, or coalesce with the queued one not yet taken
        (moved to the newest revision asked: a head request, `None`, wins over a pinned
        one). One transaction; returns the reconcile's id."""
        if trigger not in RECONCILE_TRIGGERS:
            raise UsageError(f"unknown reconcile trigger {trigger!r}")
        query = (
            select(Reconcile)
            .where(
                Reconcile.project_id == project_id,
                Reconcile.status == "queued",
                Reconcile.lock_token.is_(None),
            )
            .order_by(Reconcile.created_at)
            .limit(1)
            .with_for_update()
        )
        with self.writing() as session:
            queued = session.scalars(query).first()
            if queued is not None:
                if queued.attempted_revision is not None:
                    queued.attempted_revision = revision
                if delivery_id is not None:
                    queued.delivery_id = delivery_id
                return queued.id
            row = Reconcile(
                project_id=project_id,
                trigger=trigger,
                status="queued",
                delivery_id=delivery_id,
                attempted_revision=revision,
                created_at=self.now(),
            )
            session.add(row)
            session.flush()
            return row.id

    def set_reconcile_stage(self, reconcile_id: str, stage: str, **values: Any) -> None:
        """Enter `stage`: closes the previous stage's timing, marks the reconcile running.

        Extra `values` (e.g. `attempted_revision=...`, `plan=...`) are set in the same write.
        """
        now = self.now()
        with self.writing() as session:
            row = _get_reconcile(session.get(Reconcile, reconcile_id), reconcile_id)
            timings = _close_last_stage(row.stage_timings, now)
            timings.append({"stage": stage, "started_at": now.isoformat(), "seconds": None})
            row.stage_timings = timings
            row.stage = stage
            row.status = "running"
            row.started_at = row.started_at or now
            for key, value in values.items():
                setattr(row, key, value)

    def finish_reconcile(
        self,
        reconcile_id: str,
        *,
        status: str,
        outcome: Any = None,
        applied_revision: str | None = None,
        error: str | None = None,
    ) -> None:
        """End the reconcile with succeeded|failed|aborted; `applied_revision` when applied."""
        if status not in RECONCILE_OUTCOMES:
            raise UsageError(f"a reconcile ends succeeded, failed or aborted, not {status!r}")
        now = self.now()
        with self.writing() as session:
            row = _get_reconcile(session.get(Reconcile, reconcile_id), reconcile_id)
            row.stage_timings = _close_last_stage(row.stage_timings, now)
            row.status, row.outcome, row.error, row.finished_at = status, outcome, error, now
            if applied_revision is not None:
                row.applied_revision = applied_revision

    def fold_repeated_failure(self, reconcile_id: str, token: str, *, commit: str) -> str | None:
        """Record a pass of `commit` on the reconcile that already failed planning it.

        When the project's newest finished reconcile failed to plan `commit` (its outcome
        has `plan_failed`) against the same last applied revision, the same commit plans the
        same errors: that row's `checked` (`count`, `last_at`) is updated and this
        reconcile (still leased by `token`) is deleted, in one transaction. Returns the id
        of the row updated; None (nothing written) otherwise.
        """
        earlier_query = (
            select(Reconcile)
            .where(
                Reconcile.project_id
                == select(Reconcile.project_id)
                .where(Reconcile.id == reconcile_id)
                .scalar_subquery(),
                Reconcile.id != reconcile_id,
                Reconcile.status.in_(sorted(RECONCILE_OUTCOMES)),
            )
            .order_by(Reconcile.created_at.desc(), Reconcile.id.desc())
            .limit(1)
            .with_for_update()
        )
        with self.writing() as session:
            earlier = session.scalars(earlier_query).first()
            if earlier is None or earlier.status != "failed":
                return None
            outcome = earlier.outcome if isinstance(earlier.outcome, dict) else {}
            failed = outcome.get("plan_failed")
            base = _last_applied(session, earlier.project_id)
            if earlier.attempted_revision != commit or not isinstance(failed, dict):
                return None
            if failed.get("base") != base:
                return None
            gone = session.execute(
                delete(Reconcile).where(Reconcile.id == reconcile_id, Reconcile.lock_token == token)
            )
            if not getattr(gone, "rowcount", 0):
                return None  # the lease was lost: whoever holds it records the pass
            checked = outcome.get("checked")
            count = int(checked.get("count") or 1) + 1 if isinstance(checked, dict) else 2
            last = self.now().isoformat()
            earlier.outcome = {**outcome, "checked": {"count": count, "last_at": last}}
            return earlier.id

    def load_reconcile(self, reconcile_id: str, token: str) -> ReconcileRecord | None:
        """The reconcile if this lease still holds it, with its project's name ("" when the
        project is gone), in one statement; None otherwise (the reconciles worker)."""
        with self.reading() as session:
            found = session.execute(
                select(Reconcile, Project.name)
                .outerjoin(Project, Project.id == Reconcile.project_id)
                .where(Reconcile.id == reconcile_id, Reconcile.lock_token == token)
            ).first()
            return None if found is None else reconcile_record(found[0], found[1] or "")

    def get_reconcile(self, reconcile_id: str) -> Reconcile | None:
        return self.get(Reconcile, reconcile_id)

    def list_reconciles(
        self, project_id: str, *, status: str | None = None, limit: int = 50
    ) -> list[Reconcile]:
        """Reconciles of the project, newest first."""
        query = select(Reconcile).where(Reconcile.project_id == project_id)
        if status is not None:
            query = query.where(Reconcile.status == status)
        query = query.order_by(Reconcile.created_at.desc(), Reconcile.id.desc()).limit(limit)
        with self.reading() as session:
            return list(session.scalars(query))

    def last_applied_revision(self, project_id: str) -> str | None:
        """The revision of the newest succeeded reconcile that applied one (the last good)."""
        with self.reading() as session:
            return _last_applied(session, project_id)


def last_applied(column: Any, project_id: str) -> Select[Any]:
    """A query of `column` of the project's newest succeeded reconcile that applied a
    revision (what is deployed): the base of plans, approvals and vanished capacity."""
    return (
        select(column)
        .where(
            Reconcile.project_id == project_id,
            Reconcile.status == "succeeded",
            Reconcile.applied_revision.is_not(None),
        )
        .order_by(Reconcile.finished_at.desc(), Reconcile.id.desc())
        .limit(1)
    )


def _last_applied(session: Session, project_id: str) -> str | None:
    return session.scalars(last_applied(Reconcile.applied_revision, project_id)).first()


def _get_reconcile(row: Reconcile | None, reconcile_id: str) -> Reconcile:
    if row is None:
        raise UsageError(f"no reconcile {reconcile_id}")
    return row


def _close_last_stage(timings: Any, now: datetime) -> list[dict[str, Any]]:
    """A copy of `timings` with the open last stage given its duration."""
    closed = [dict(entry) for entry in (timings or [])]
    if closed and closed[-1].get("seconds") is None:
        started = datetime.fromisoformat(closed[-1]["started_at"])
        closed[-1]["seconds"] = round((now - started).total_seconds(), 6)
    return closed
