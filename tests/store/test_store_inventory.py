"""The inventory (deployed resources) and the planner's observed state, on both databases."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy.exc import IntegrityError

from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Resource, Run
from reconciler.domain.kinds import Kind
from tests.store.conftest import FakeClock


def _record(store: Store, kind: str, name: str, **overrides: object) -> Resource:
    values: dict[str, object] = {
        "origin": f"git:{name}.dstack.yml@c1",
        "path": f"{name}.dstack.yml",
        "commit": "c1",
        "spec": {"type": kind, "name": name, "nested": {"b": 2, "a": [1, 2]}},
        "spec_hash": f"hash-{name}",
        "status": "active",
    }
    values.update(overrides)
    return store.record_resource("main", kind, name, **values)  # type: ignore[arg-type]


def test_record_resource_upserts_the_live_row(store: Store, clock: FakeClock) -> None:
    first = _record(store, "fleet", "gpus")
    created = store.now()
    clock.advance(10)
    second = _record(store, "fleet", "gpus", commit="c2", spec_hash="h2", spec={"nodes": 2})
    assert second.id == first.id
    [row] = store.list_resources("main")
    assert (row.commit, row.spec_hash, row.spec) == ("c2", "h2", {"nodes": 2})
    assert row.created_at == created and row.updated_at == store.now()
    assert row.created_at.tzinfo is not None


def test_same_name_different_kinds_and_projects_are_distinct(store: Store) -> None:
    _record(store, "task", "train")
    _record(store, "service", "train")
    store.record_resource(
        "other", "task", "train", origin="cli:bob", path=None, commit=None,
        spec={}, spec_hash="x", status="running",
    )  # fmt: skip
    assert [(r.kind, r.name) for r in store.list_resources("main")] == [
        ("service", "train"),
        ("task", "train"),
    ]
    assert [r.origin for r in store.list_resources("other")] == ["cli:bob"]


def test_mark_deleted_hides_the_row_and_allows_a_new_one(store: Store) -> None:
    old = _record(store, "volume", "data")
    assert store.mark_resource_deleted("main", "volume", "data")
    assert not store.mark_resource_deleted("main", "volume", "data")
    assert store.list_resources("main") == []
    assert store.get_resource("main", "volume", "data") is None
    new = _record(store, "volume", "data")
    assert new.id != old.id
    history = store.list_resources("main", include_deleted=True)
    assert [(r.id, r.deleted_at is None) for r in history] == [(new.id, True), (old.id, False)]


def test_two_live_rows_of_one_key_are_refused_by_the_database(store: Store) -> None:
    live = _record(store, "task", "train")
    duplicate = Resource(
        project_id=live.project_id, kind="task", name="train", origin="cli:x", path=None,
        commit=None, spec={}, spec_hash="h", status="s", created_at=store.now(),
        updated_at=store.now(),
    )  # fmt: skip
    with pytest.raises(IntegrityError):
        store.add(duplicate)


def test_load_observed_gives_frozen_domain_values(store: Store) -> None:
    volume = _record(store, "volume", "data")
    task = _record(store, "task", "train", status="submitted")
    _record(store, "service", "llm", origin="cli:bob", path=None, commit=None)
    _record(store, "fleet", "gone")
    store.mark_resource_deleted("main", "fleet", "gone")
    observed = store.load_observed("main")
    assert observed.project == "main"
    by_name = {r.name: r for r in observed.resources}
    assert set(by_name) == {"data", "train", "llm"}
    data = by_name["data"]
    assert (data.kind, data.spec, data.spec_hash, data.path, data.commit) == (
        Kind.VOLUME, volume.spec, "hash-data", "data.dstack.yml", "c1",
    )  # fmt: skip
    assert data.is_managed and not by_name["llm"].is_managed
    assert by_name["train"].status == "submitted" and not by_name["train"].finished
    project_id = task.project_id
    for status, when in (("running", 1), ("done", 2)):
        store.add(
            Run(
                project_id=project_id, run_name="train", run_type="task", spec={},
                spec_hash="hash-train", status=status, resource_id=task.id,
                submitted_at=store.now().replace(second=when),
            )
        )  # fmt: skip
    train = {r.name: r for r in store.load_observed("main").resources}["train"]
    assert (train.status, train.finished) == ("done", True)
    assert store.load_observed("nobody").resources == ()


def test_set_resource_status(store: Store) -> None:
    row = _record(store, "gateway", "gw")
    assert store.set_resource_status(row.id, "failed", "no quota")
    got = store.get_resource("main", "gateway", "gw")
    assert got is not None and (got.status, got.status_message) == ("failed", "no quota")
    assert not store.set_resource_status("missing", "x")


def test_concurrent_records_in_a_new_project_create_it_once(store: Store) -> None:
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def record(i: int) -> None:
        barrier.wait()
        try:
            store.record_resource(
                "fresh", "task", f"t{i}", origin="cli:x", path=None, commit=None,
                spec={}, spec_hash="h", status="running",
            )  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=record, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert [p.name for p in store.list_projects()] == ["fresh"]
    assert [r.name for r in store.list_resources("fresh")] == ["t0", "t1", "t2", "t3"]
