"""Events, reconciles (stages with timings) and webhook deliveries, on both databases."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from reconciler.adapters.db import Store
from reconciler.errors import UsageError
from tests.store.conftest import FakeClock
from tests.store.deliveries import deliver, delivery


def test_events_filter_and_order(store: Store, clock: FakeClock) -> None:
    main, other = store.get_or_create_project("main"), store.get_or_create_project("other")
    for i in range(3):
        store.append_event(
            project_id=main.id, target_type="run", target_id=f"r{i % 2}",
            target_name=f"run{i % 2}", message=f"event {i}",
        )  # fmt: skip
        clock.advance(1)
    store.append_event(project_id=other.id, target_type="fleet", target_name="f", message="x")
    store.append_event(project_id=None, target_type="server", target_name="-", message="up")
    assert [e.message for e in store.list_events(project_id=main.id)] == [
        "event 2", "event 1", "event 0",
    ]  # fmt: skip
    assert [e.message for e in store.list_events(project_id=main.id, ascending=True, limit=2)] == [
        "event 0", "event 1",
    ]  # fmt: skip
    assert [e.message for e in store.list_events(target_id="r0")] == ["event 2", "event 0"]
    assert [e.message for e in store.list_events(target_type="fleet")] == ["x"]
    assert [e.message for e in store.list_events(target_name="run1")] == ["event 1"]
    since = store.now() - timedelta(seconds=1)
    assert {e.message for e in store.list_events(since=since)} == {"event 2", "x", "up"}
    assert len(store.list_events()) == 5
    page = store.list_events(project_id=main.id, limit=2)
    older = store.list_events(project_id=main.id, before=page[-1].created_at)
    assert [e.message for e in older] == ["event 0"]


def test_reconcile_lifecycle_records_stage_timings(store: Store, clock: FakeClock) -> None:
    project = store.get_or_create_project("main")
    rec = store.create_reconcile(project.id, trigger="webhook", delivery_id="d-1")
    assert (rec.status, rec.stage, rec.stage_timings) == ("queued", None, [])
    clock.advance(1)
    store.set_reconcile_stage(rec.id, "fetch")
    clock.advance(2.5)
    store.set_reconcile_stage(rec.id, "plan", attempted_revision="abc", plan={"actions": []})
    clock.advance(0.25)
    store.finish_reconcile(
        rec.id, status="succeeded", outcome={"created": 1}, applied_revision="abc"
    )
    got = store.get_reconcile(rec.id)
    assert got is not None
    assert (got.status, got.stage, got.attempted_revision, got.applied_revision) == (
        "succeeded", "plan", "abc", "abc",
    )  # fmt: skip
    assert got.plan == {"actions": []} and got.outcome == {"created": 1}
    assert [(t["stage"], t["seconds"]) for t in got.stage_timings] == [
        ("fetch", 2.5), ("plan", 0.25),
    ]  # fmt: skip
    assert got.started_at == rec.created_at + timedelta(seconds=1)
    assert got.finished_at == store.now()
    assert store.last_applied_revision(project.id) == "abc"


def test_failed_reconcile_keeps_the_last_good_revision(store: Store, clock: FakeClock) -> None:
    project = store.get_or_create_project("main")
    good = store.create_reconcile(project.id, trigger="timer")
    store.finish_reconcile(good.id, status="succeeded", applied_revision="good")
    clock.advance(1)
    bad = store.create_reconcile(project.id, trigger="cli", attempted_revision="bad")
    store.set_reconcile_stage(bad.id, "apply")
    store.finish_reconcile(bad.id, status="failed", error="stack up failed")
    assert store.last_applied_revision(project.id) == "good"
    assert [r.id for r in store.list_reconciles(project.id)] == [bad.id, good.id]
    assert [r.id for r in store.list_reconciles(project.id, status="failed")] == [bad.id]
    failed = store.get_reconcile(bad.id)
    assert failed is not None and failed.error == "stack up failed"
    assert failed.stage_timings[-1]["seconds"] == 0.0


def test_reconcile_arguments_are_checked(store: Store) -> None:
    project = store.get_or_create_project("main")
    with pytest.raises(UsageError, match="trigger"):
        store.create_reconcile(project.id, trigger="cron")
    rec = store.create_reconcile(project.id, trigger="api")
    with pytest.raises(UsageError, match="succeeded, failed or aborted"):
        store.finish_reconcile(rec.id, status="running")
    with pytest.raises(UsageError, match="no reconcile"):
        store.set_reconcile_stage("missing", "fetch")


def test_deliveries_dedupe_per_provider(store: Store) -> None:
    assert deliver(store, "github", "abc", ref="main")
    assert not deliver(store, "github", "abc")
    assert deliver(store, "gitlab", "abc")
    got = delivery(store, "github", "abc")
    assert got is not None and got.ref == "main"


def test_concurrent_duplicate_deliveries_yield_one_new(store: Store) -> None:
    answers: list[bool] = []
    barrier = threading.Barrier(4)

    def receive() -> None:
        barrier.wait()
        answers.append(deliver(store, "github", "d"))

    threads = [threading.Thread(target=receive) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(answers) == [False, False, False, True]
