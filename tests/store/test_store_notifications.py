"""The notification store on both databases: receivers, the follower, leased deliveries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import event

from reconciler.adapters.db import Store
from reconciler.adapters.db.notifications import NotificationsStore
from reconciler.core.notifying import check_receiver
from reconciler.domain.notifications import Receiver
from reconciler.domain.sources import Source
from reconciler.errors import UsageError
from tests.store.conftest import FakeClock
from tests.store.members import set_member

SECRET = "s" * 32


def _notes(store: Store) -> NotificationsStore:
    return NotificationsStore(store.engine, clock=store.clock)


def _hook(name: str, **kw: object) -> Receiver:
    fields: dict[str, object] = {
        "kind": "webhook",
        "url": "http://127.0.0.1:9/hook",
        "events": ("run.failed", "reconcile.failed"),
        "secret": SECRET,
    }
    fields.update(kw)
    return check_receiver(Receiver(name=name, **fields))  # type: ignore[arg-type]


def _run_failed(store: Store, project_id: str, name: str) -> None:
    store.append_event(
        project_id=project_id, target_type="run", target_id=name, target_name=name,
        message="run status running -> failed",
    )  # fmt: skip


def test_follower_queues_each_event_once_per_receiver(store: Store, clock: FakeClock) -> None:
    notes = _notes(store)
    main = store.get_or_create_project("main")
    other = store.get_or_create_project("other")
    _run_failed(store, main.id, "before")  # before any receiver: never notified
    clock.advance(1)
    notes.add_receiver(_hook("all"), "admin")
    notes.add_receiver(_hook("main-only", project="main"), "admin")
    notes.add_receiver(_hook("reconciles", events=("reconcile.failed",)), "admin")
    _run_failed(store, main.id, "a")
    _run_failed(store, other.id, "b")
    store.append_event(
        project_id=main.id, target_type="run", target_id="c", target_name="c",
        message="run status submitted -> running",
    )  # fmt: skip
    notes.follow_events()
    notes.follow_events()  # the overlap reads them again: nothing is added twice
    clock.advance(5)
    notes.follow_events()
    seen = {(d.receiver, d.target_name) for d in notes.list_deliveries(viewer=None)}
    assert seen == {("all", "a"), ("all", "b"), ("main-only", "a")}
    assert len(notes.list_deliveries(viewer=None)) == 3


def test_late_commit_inside_the_overlap_is_still_queued(store: Store, clock: FakeClock) -> None:
    notes = _notes(store)
    main = store.get_or_create_project("main")
    notes.add_receiver(_hook("all"), "admin")
    clock.advance(10)
    _run_failed(store, main.id, "new")
    notes.follow_events(overlap=30)
    clock.advance(-5)  # a replica's event stamped before the cursor, committed after it
    _run_failed(store, main.id, "late")
    clock.advance(5)
    notes.follow_events(overlap=30)
    assert {d.target_name for d in notes.list_deliveries(viewer=None)} == {"new", "late"}


def test_claims_are_exclusive_and_fenced(store: Store, clock: FakeClock) -> None:
    notes, other = _notes(store), _notes(store)
    main = store.get_or_create_project("main")
    notes.add_receiver(_hook("all"), "admin")
    _run_failed(store, main.id, "a")
    notes.follow_events()
    [claimed] = notes.claim_due(10, lease=60)
    assert other.claim_due(10, lease=60) == []  # held
    assert not other.finish_attempt(
        claimed.id, "not-the-token", delivered=True, status_code=200, error=None, retry_in=None
    )
    assert notes.finish_attempt(
        claimed.id, claimed.token, delivered=False, status_code=503, error="503", retry_in=10
    )
    [view] = notes.list_deliveries(viewer=None)
    assert (view.status, view.attempts, view.last_status_code) == ("retrying", 1, 503)
    assert view.next_attempt_at == store.now() + timedelta(seconds=10)
    assert other.claim_due(10, lease=60) == []  # not due yet
    clock.advance(10)
    [again] = other.claim_due(10, lease=60)
    assert again.attempts == 1 and again.receiver.secret == SECRET
    clock.advance(61)  # the lease expired: someone else may take it
    [third] = notes.claim_due(10, lease=60)
    assert not other.finish_attempt(
        again.id, again.token, delivered=True, status_code=200, error=None, retry_in=None
    )
    assert notes.finish_attempt(
        third.id, third.token, delivered=False, status_code=None, error="down", retry_in=None
    )
    [view] = notes.list_deliveries(viewer=None)
    assert (view.status, view.attempts, view.next_attempt_at) == ("failed", 2, None)


def test_members_see_only_their_projects_deliveries(store: Store) -> None:
    notes = _notes(store)
    main = store.get_or_create_project("main")
    other = store.get_or_create_project("other")
    notes.add_receiver(_hook("all"), "admin")
    _run_failed(store, main.id, "mine")
    _run_failed(store, other.id, "theirs")
    notes.follow_events()
    user = store.create_user("alice")
    set_member(store, main.id, "alice", "user")
    assert [d.target_name for d in notes.list_deliveries(viewer=user.id)] == ["mine"]
    assert len(notes.list_deliveries(viewer=None)) == 2


def test_receiver_names_are_unique_and_deleting_drops_deliveries(store: Store) -> None:
    notes = _notes(store)
    main = store.get_or_create_project("main")
    notes.add_receiver(_hook("all"), "admin")
    with pytest.raises(UsageError, match="receiver all exists"):
        notes.add_receiver(_hook("all"), "admin")
    _run_failed(store, main.id, "a")
    notes.follow_events()
    assert notes.delete_receiver("all")
    assert not notes.delete_receiver("all")
    assert notes.list_deliveries(viewer=None) == []


def test_a_source_filter_takes_the_events_of_the_project_it_feeds(store: Store) -> None:
    notes = _notes(store)
    alpha = store.get_or_create_project("alpha")
    beta = store.get_or_create_project("beta")
    store.add_source(Source(name="team-a", repo="/srv/repos/a", project="alpha"))
    store.add_source(Source(name="team-b", repo="/srv/repos/b", project="beta"))
    notes.add_receiver(_hook("a-only", source="team-a"), "admin")
    _run_failed(store, alpha.id, "from-a")
    _run_failed(store, beta.id, "from-b")
    notes.follow_events()
    assert [d.target_name for d in notes.list_deliveries(viewer=None)] == ["from-a"]


def test_ended_deliveries_are_pruned_after_their_keep(store: Store, clock: FakeClock) -> None:
    notes = _notes(store)
    main = store.get_or_create_project("main")
    notes.add_receiver(_hook("all"), "admin")
    _run_failed(store, main.id, "old")
    _run_failed(store, main.id, "open")
    notes.follow_events()
    claimed = {c.event.target_name: c for c in notes.claim_due(10, lease=60)}
    old = claimed["old"]
    assert notes.finish_attempt(
        old.id, old.token, delivered=True, status_code=200, error=None, retry_in=None
    )
    clock.advance(100)
    assert notes.prune_deliveries(timedelta(seconds=101)) == 0  # not old enough
    clock.advance(2)
    assert notes.prune_deliveries(timedelta(seconds=101)) == 1
    assert [d.target_name for d in notes.list_deliveries(viewer=None)] == ["open"]  # kept


def test_a_quiet_pass_writes_nothing(store: Store, clock: FakeClock) -> None:
    notes = _notes(store)
    main = store.get_or_create_project("main")
    notes.add_receiver(_hook("all"), "admin")
    _run_failed(store, main.id, "a")
    notes.follow_events()
    [claimed] = notes.claim_due(10, lease=60)
    notes.finish_attempt(
        claimed.id, claimed.token, delivered=False, status_code=500, error="x", retry_in=60
    )
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *rest: object) -> None:
        statements.append(" ".join(statement.split()[:2]).upper())

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        clock.advance(1)
        assert notes.follow_events() == 0  # the event is read again (overlap): queued already
        assert notes.claim_due(10, lease=60) == []  # not due: a pass finds nothing to send
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    writes = [s for s in statements if s.split()[0] in ("INSERT", "UPDATE", "DELETE")]
    assert statements and not writes and "BEGIN IMMEDIATE" not in statements, statements
    assert len(notes.list_deliveries(viewer=None)) == 1
