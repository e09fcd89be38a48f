"""Runs, jobs, fleets, instances, volumes and gateways: CRUD basics, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Fleet, Instance, Job, Run, Volume
from tests.store.conftest import FakeClock


def _run(store: Store, name: str, **values: object) -> Run:
    project = store.get_or_create_project("main")
    fields: dict[str, object] = {
        "project_id": project.id, "run_name": name, "run_type": "task", "spec": {"n": name},
        "spec_hash": "h", "status": "submitted", "submitted_at": store.now(),
    }  # fmt: skip
    fields.update(values)
    return store.add(Run(**fields))  # type: ignore[arg-type]


def test_runs_newest_first_and_by_name(store: Store, clock: FakeClock) -> None:
    old = _run(store, "train")
    clock.advance(1)
    new = _run(store, "train", status="running")
    clock.advance(1)
    gone = _run(store, "train", deleted=True)
    other = _run(store, "serve", status="done")
    project_id = old.project_id
    assert store.get_run_by_name(project_id, "train") == store.get(Run, new.id)
    assert [r.id for r in store.list_runs(project_id)] == [other.id, new.id, old.id]
    assert [r.id for r in store.list_runs(project_id, statuses=["running", "done"])] == [
        other.id, new.id,
    ]  # fmt: skip
    assert gone.id in {r.id for r in store.list_runs(project_id, include_deleted=True)}
    assert store.get_run_by_name(project_id, "nope") is None


def test_update_is_unfenced_and_reports_missing_rows(store: Store) -> None:
    run = _run(store, "train")
    assert store.update(Run, run.id, status="terminating", status_message="stopped by bob")
    got = store.get(Run, run.id)
    assert got is not None and (got.status, got.status_message) == ("terminating", "stopped by bob")
    assert not store.update(Run, "missing", status="x")


def test_jobs_in_replica_order_and_instances(store: Store) -> None:
    run = _run(store, "train")
    fleet = store.add(
        Fleet(project_id=run.project_id, name="gpus", spec={}, status="active",
              created_at=store.now())
    )  # fmt: skip
    instance = store.add(
        Instance(
            fleet_id=fleet.id, project_id=run.project_id, name="gpus-0", status="idle",
            created_at=store.now(), resources={"gpus": [{"name": "A100"}]}, price=1.5,
        )
    )  # fmt: skip
    for replica, job_num in ((1, 0), (0, 1), (0, 0)):
        store.add(
            Job(
                run_id=run.id, status="submitted", job_spec={"r": replica, "j": job_num},
                submitted_at=store.now(), replica_num=replica, job_num=job_num,
                instance_id=instance.id if replica == 0 else None,
            )
        )  # fmt: skip
    jobs = store.list_jobs(run.id)
    assert [(j.replica_num, j.job_num) for j in jobs] == [(0, 0), (0, 1), (1, 0)]
    [got] = store.list_instances(fleet_id=fleet.id, statuses=["idle"])
    assert got.resources == {"gpus": [{"name": "A100"}]} and got.price == 1.5
    assert store.list_instances(project_id=run.project_id, statuses=["busy"]) == []
    assert [f.name for f in store.list_fleets(run.project_id)] == ["gpus"]
    record = store.instance_record(instance.id)  # a domain value, not the ORM row
    assert record is not None and not isinstance(record, Instance)
    assert (record.name, record.resources) == ("gpus-0", {"gpus": [{"name": "A100"}]})
    assert store.instance_record("no-such-instance") is None


def test_volumes_by_name_skip_deleted(store: Store) -> None:
    project = store.get_or_create_project("main")
    store.add(Volume(project_id=project.id, name="x", spec={}, status="active",
                     created_at=store.now(), deleted=True))  # fmt: skip
    live = store.add(Volume(project_id=project.id, name="x", spec={"v": 1}, status="active",
                            created_at=store.now(), outputs={"id": "a"}))  # fmt: skip
    assert store.get_volume_by_name(project.id, "x") == store.get(Volume, live.id)


def test_timestamps_are_utc_aware_and_naive_ones_refused(store: Store) -> None:
    plus_two = timezone(timedelta(hours=2))
    run = _run(store, "tz", submitted_at=datetime(2026, 5, 1, 12, 0, tzinfo=plus_two))
    got = store.get(Run, run.id)
    assert got is not None
    assert got.submitted_at == datetime(2026, 5, 1, 10, 0, tzinfo=UTC)
    assert got.submitted_at.tzinfo == UTC
    with pytest.raises(Exception, match="naive datetime"):
        _run(store, "naive", submitted_at=datetime(2026, 5, 1, 12, 0))
