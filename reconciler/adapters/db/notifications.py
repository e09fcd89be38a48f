"""The notification units of work: receivers, the events follower, leased deliveries.

`NotificationsStore` is built over the server's engine by the composition root (the
notifier, `reconciler.engine.notifier`, and the API, `reconciler.web.routes_notifications`,
share one). Three things make a notification exactly once per (event, receiver) however
many replicas run:

- `follow_events` reads `events` after the cursor (less an `overlap`, so an event whose
  transaction committed late is still seen) and inserts one `notification_deliveries` row
  per event and receiver that takes it, ignoring the rows already there: the unique
  (event_id, receiver_id) decides, whichever replica saw the event first. The cursor only
  moves forward.
- `claim_due` takes due rows with a conditional write of a lease (a row is held by one
  notifier at a time, `SKIP LOCKED` on PostgreSQL so replicas do not queue on each other).
- `finish_attempt` records the outcome fenced by that lease: delivered, retrying at a due
  time, or failed after the last attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import (
    Event,
    Job,
    Member,
    NotificationCursor,
    NotificationDelivery,
    NotificationReceiver,
    Project,
    Run,
    SourceRow,
    new_id,
)
from reconciler.adapters.db.notifyrows import OPEN, delivery_view, event_record, receiver_record
from reconciler.adapters.db.sessions import StoreBase
from reconciler.core.notifying import NOTIFIED_TARGETS, bounded_event, event_kinds, takes
from reconciler.domain.notifications import (
    ClaimedDelivery,
    DeliveryView,
    NotifiedEvent,
    Receiver,
)
from reconciler.errors import UsageError

CURSOR = "events"


class NotificationsStore(StoreBase):
    """See the module docstring."""

    # -- receivers -------------------------------------------------------------------------

    def add_receiver(self, receiver: Receiver, created_by: str) -> Receiver:
        """Store a checked receiver (`core.notifying.check_receiver`); refused by name."""
        row = NotificationReceiver(
            name=receiver.name,
            kind=receiver.kind,
            url=receiver.url,
            secret=receiver.secret,
            events=list(receiver.events),
            project_name=receiver.project,
            source_name=receiver.source,
            created_by=created_by,
            created_at=self.now(),
        )
        try:
            self.add(row)
        except IntegrityError:
            raise UsageError(
                f"receiver {receiver.name} exists: delete it first or pick another name"
            ) from None
        return receiver_record(row)

    def list_receivers(self) -> list[Receiver]:
        with self.reading() as session:
            rows = session.scalars(select(NotificationReceiver).order_by(NotificationReceiver.name))
            return [receiver_record(row) for row in rows]

    def delete_receiver(self, name: str) -> bool:
        """Delete the receiver and its deliveries; False if there is none of that name."""
        with self.writing() as session:
            result = session.execute(
                delete(NotificationReceiver).where(NotificationReceiver.name == name)
            )
        return bool(getattr(result, "rowcount", 0))

    # -- the follower ----------------------------------------------------------------------

    def follow_events(self, *, overlap: float = 30.0, page: int = 500) -> int:
        """Queue a delivery per new notified event and receiver taking it (see the module
        docstring); the number of rows added. The events are read in a read transaction;
        a write happens only when there is a delivery to add or the cursor to move, so a
        quiet server's passes write nothing (on SQLite, they never take the write lock)."""
        with self.reading() as session:
            receivers = [receiver_record(r) for r in session.scalars(select(NotificationReceiver))]
            if not receivers:
                return 0
            stored = session.scalar(
                select(NotificationCursor.position).where(NotificationCursor.name == CURSOR)
            )
            position = stored if stored is not None else min(_created(r) for r in receivers)
            sources = dict(session.execute(select(SourceRow.project_name, SourceRow.name)).all())
            values: list[dict[str, Any]] = []
            last = position
            after: tuple[datetime, str] = (position - timedelta(seconds=overlap), "")
            while True:
                rows = session.execute(_events_after(after, page)).all()
                why = _why_runs_ended(session, [event for event, _ in rows])
                for event, project in rows:
                    values.extend(_deliveries(event, project, receivers, sources, why))
                if rows:
                    after = (rows[-1][0].created_at, rows[-1][0].id)
                    last = max(last, after[0])
                if len(rows) < page:
                    break
            values = _not_queued(session, values)
        if not values and stored is not None and last <= stored:
            return 0
        with self.writing() as session:
            self._ensure_cursor(session, position)
            added = self._insert_new(session, values) if values else 0
            session.execute(
                update(NotificationCursor)
                .where(NotificationCursor.name == CURSOR, NotificationCursor.position < last)
                .values(position=last)
            )  # never moved back: replicas may pass each other
        return added

    def _ensure_cursor(self, session: Session, start: datetime) -> None:
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        session.execute(
            insert(NotificationCursor).values(name=CURSOR, position=start).on_conflict_do_nothing()
        )

    def _insert_new(self, session: Session, values: list[dict[str, Any]]) -> int:
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        statement = insert(NotificationDelivery).on_conflict_do_nothing(
            index_elements=["event_id", "receiver_id"]
        )
        now = self.now()
        rows = [{**v, "next_attempt_at": now, "created_at": now} for v in values]
        result = session.execute(statement, rows)
        return int(getattr(result, "rowcount", 0) or 0)

    # -- deliveries ------------------------------------------------------------------------

    def claim_due(self, limit: int, lease: float) -> list[ClaimedDelivery]:
        """Up to `limit` due deliveries, each leased to this caller for `lease` seconds."""
        now = self.now()
        due = (
            NotificationDelivery.status.in_(OPEN),
            NotificationDelivery.next_attempt_at <= now,
            or_(
                NotificationDelivery.lock_token.is_(None),
                NotificationDelivery.lock_expires_at <= now,
            ),
        )
        query = (
            select(NotificationDelivery.id)
            .where(*due)
            .order_by(NotificationDelivery.next_attempt_at)
            .limit(limit)
        )
        with self.reading() as session:  # nothing due (the usual pass): no write at all
            if session.scalar(query.limit(1)) is None:
                return []
        if self.engine.dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        claimed: list[ClaimedDelivery] = []
        with self.writing() as session:
            for delivery_id in session.scalars(query).all():
                token = new_id()
                won = session.execute(
                    update(NotificationDelivery)
                    .where(NotificationDelivery.id == delivery_id, *due)
                    .values(lock_token=token, lock_expires_at=now + timedelta(seconds=lease))
                )
                if not getattr(won, "rowcount", 0):
                    continue  # another replica took it between the read and the write
                row = session.get(NotificationDelivery, delivery_id)
                receiver = session.get(NotificationReceiver, row.receiver_id) if row else None
                if row is None or receiver is None:
                    continue
                claimed.append(
                    ClaimedDelivery(
                        row.id, token, row.attempts, receiver_record(receiver), event_record(row)
                    )
                )
        return claimed

    def finish_attempt(
        self,
        delivery_id: str,
        token: str,
        *,
        delivered: bool,
        status_code: int | None,
        error: str | None,
        retry_in: float | None,
    ) -> bool:
        """Record an attempt: delivered, retrying in `retry_in` s, or failed (no retry
        left: `retry_in` None). Fenced by the lease; False if it was lost."""
        now = self.now()
        values: dict[str, Any] = {
            "attempts": NotificationDelivery.attempts + 1,
            "last_status_code": status_code,
            "last_error": None if error is None else error[:1000],
            "lock_token": None,
            "lock_expires_at": None,
        }
        if delivered:
            values |= {"status": "delivered", "finished_at": now}
        elif retry_in is None:
            values |= {"status": "failed", "finished_at": now}
        else:
            values |= {"status": "retrying", "next_attempt_at": now + timedelta(seconds=retry_in)}
        with self.writing() as session:
            result = session.execute(
                update(NotificationDelivery)
                .where(
                    NotificationDelivery.id == delivery_id, NotificationDelivery.lock_token == token
                )
                .values(**values)
            )
        return bool(getattr(result, "rowcount", 0))

    def next_due(self) -> datetime | None:
        """When the earliest open delivery is due (None: nothing open)."""
        query = select(func.min(NotificationDelivery.next_attempt_at)).where(
            NotificationDelivery.status.in_(OPEN)
        )
        with self.reading() as session:
            return session.scalar(query)

    def prune_deliveries(self, older_than: timedelta, batch: int = 1000) -> int:
        """Delete up to `batch` delivered or failed deliveries that ended more than
        `older_than` ago (the table stays bounded); how many."""
        ended = (
            select(NotificationDelivery.id)
            .where(
                NotificationDelivery.status.in_(("delivered", "failed")),
                NotificationDelivery.finished_at < self.now() - older_than,
            )
            .limit(batch)
        )
        with self.writing() as session:
            ids = list(session.scalars(ended))
            if ids:
                session.execute(
                    delete(NotificationDelivery).where(NotificationDelivery.id.in_(ids))
                )
        return len(ids)

    def list_deliveries(
        self, *, viewer: str | None, limit: int = 50, project: str | None = None
    ) -> list[DeliveryView]:
        """Deliveries, newest first: all of them for an admin (`viewer` None), else only
        those of the projects the user `viewer` (an id) is a member of."""
        query = (
            select(NotificationDelivery, NotificationReceiver.name, Project.name)
            .join(NotificationReceiver, NotificationReceiver.id == NotificationDelivery.receiver_id)
            .outerjoin(Project, Project.id == NotificationDelivery.project_id)
        )
        if viewer is not None:
            mine = select(Member.project_id).where(Member.user_id == viewer)
            query = query.where(NotificationDelivery.project_id.in_(mine))
        if project is not None:
            query = query.where(Project.name == project)
        query = query.order_by(
            NotificationDelivery.created_at.desc(), NotificationDelivery.id.desc()
        ).limit(max(1, min(limit, 1000)))
        with self.reading() as session:
            return [
                delivery_view(row, receiver, name) for row, receiver, name in session.execute(query)
            ]


def _not_queued(session: Session, values: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`values` less the (event, receiver) pairs already queued (the overlap reads them
    again each pass); the unique constraint still decides between replicas."""
    ids = sorted({v["event_id"] for v in values})
    queued: set[tuple[str, str]] = set()
    for i in range(0, len(ids), 500):
        pairs = select(NotificationDelivery.event_id, NotificationDelivery.receiver_id).where(
            NotificationDelivery.event_id.in_(ids[i : i + 500])
        )
        queued.update((event_id, receiver_id) for event_id, receiver_id in session.execute(pairs))
    return [v for v in values if (v["event_id"], v["receiver_id"]) not in queued]


def _events_after(after: tuple[datetime, str], page: int) -> Any:
    at, last_id = after
    return (
        select(Event, Project.name)
        .outerjoin(Project, Project.id == Event.project_id)
        .where(
            Event.target_type.in_(NOTIFIED_TARGETS),
            or_(Event.created_at > at, and_(Event.created_at == at, Event.id > last_id)),
        )
        .order_by(Event.created_at, Event.id)
        .limit(page)
    )


def _why_runs_ended(session: Session, events: list[Event]) -> dict[str, str]:
    """Why each run a notified run event names ended: the run's termination reason and
    its first failed job's (with the exit status), read once per page of events."""
    ids = {
        e.target_id
        for e in events
        if e.target_type == "run" and e.target_id and event_kinds(e.target_type, e.message)
    }
    if not ids:
        return {}
    why = {
        run_id: reason or ""
        for run_id, reason in session.execute(
            select(Run.id, Run.termination_reason).where(Run.id.in_(ids))
        )
    }
    jobs = session.execute(
        select(Job.run_id, Job.replica_num, Job.job_num, Job.termination_reason, Job.exit_status)
        .where(Job.run_id.in_(ids), Job.status == "failed")
        .order_by(Job.replica_num, Job.job_num)
    ).all()
    told: set[str] = set()
    for run_id, replica, num, reason, exit_status in jobs:
        if run_id in told:
            continue
        told.add(run_id)
        code = f", exit status {exit_status}" if exit_status is not None else ""
        why[run_id] = f"{why.get(run_id) or 'failed'}: job {replica}/{num} {reason or ''}{code}"
    return {run_id: text for run_id, text in why.items() if text}


def _deliveries(
    event: Event,
    project: str | None,
    receivers: Iterable[Receiver],
    sources: dict[str, str],
    why: dict[str, str],
) -> list[dict[str, Any]]:
    source = sources.get(project) if project is not None else None
    values = []
    reason = why.get(event.target_id or "") if event.target_type == "run" else None
    message = f"{event.message}; {reason}" if reason else event.message
    for kind in event_kinds(event.target_type, event.message):
        snapshot = bounded_event(
            NotifiedEvent(
                event.id,
                kind,
                project,
                event.target_type,
                event.target_name,
                message,
                event.created_at,
            )
        )
        for receiver in receivers:
            if event.created_at >= _created(receiver) and takes(receiver, kind, project, source):
                values.append(
                    {
                        "id": new_id(),
                        "event_id": event.id,
                        "receiver_id": receiver.id,
                        "project_id": event.project_id,
                        "kind": kind,
                        "event": snapshot.as_json(),
                        "status": "pending",
                        "attempts": 0,
                    }
                )
    return values


def _created(receiver: Receiver) -> datetime:
    assert receiver.created_at is not None
    return receiver.created_at
