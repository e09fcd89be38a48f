"""The retention sweep end to end on a real SQLite store and data dir, in virtual time:
what it deletes, what it keeps, bounded passes, and one sweeper at a time."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from reconciler.adapters.blobs import BlobStore
from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Job, Run
from reconciler.engine.joblogs import LogCap, job_log_path, tail_path, write_chunk
from reconciler.engine.retention import MAX_BATCHES, RetentionPolicy, RetentionSweeper
from reconciler.settings import Settings
from tests.store.conftest import FakeClock
from tests.store.deliveries import deliver

DAY = 86400.0


def _sweeper(
    store: Store, data_dir: Path, owner: str = "a", **settings: object
) -> RetentionSweeper:
    values: dict[str, object] = {"data_dir": data_dir, **settings}
    policy = RetentionPolicy.from_settings(Settings.model_validate(values))
    return RetentionSweeper(store, data_dir, policy, owner)


def _job(store: Store, name: str, run_status: str, job_finished: bool) -> tuple[Run, Job]:
    project = store.get_or_create_project("main")
    now = store.now()
    run = store.add(Run(project_id=project.id, run_name=name, run_type="task",
                        spec={"file_archives": [{"id": name[0] * 64, "path": "."}]},
                        spec_hash="h", status=run_status, submitted_at=now))  # fmt: skip
    job = store.add(Job(run_id=run.id, status="done" if job_finished else "running",
                        job_spec={}, submitted_at=now,
                        finished_at=now if job_finished else None))  # fmt: skip
    return run, job


def _log(data_dir: Path, run: Run, job: Job, at: float) -> Path:
    path = job_log_path(data_dir, "main", run.run_name, job.id)
    write_chunk(path, 0, b"x" * 3000, LogCap(head=1000, tail=1000))
    for each in (path, tail_path(path)):
        os.utime(each, (at, at))
    return path


def test_a_pass_deletes_what_is_old_and_keeps_what_active_runs_need(tmp_path: Path) -> None:
    clock = FakeClock()
    store = Store.from_url(f"sqlite:///{tmp_path / 'd.db'}", clock=clock, migrate=True)
    data_dir = tmp_path / "data"
    project = store.get_or_create_project("main")
    for i in range(5):
        store.append_event(
            project_id=project.id, target_type="run", target_name="r", message=str(i)
        )
        deliver(store, "github", f"d{i}")
    ended_run, ended_job = _job(store, "aaa-ended", "done", True)
    live_run, live_job = _job(store, "bbb-live", "running", True)
    again_run, again_job = _job(store, "ddd-again", "done", True)
    clock.advance(1)
    newer_run, _ = _job(store, "ddd-again", "done", True)
    blobs = BlobStore(data_dir / "files")
    for name in ("a", "b", "c"):
        blobs.put(name.encode() * 10)  # content-addressed: names are hashes
    kept_archive = "b" * 64
    (data_dir / "files" / kept_archive).write_bytes(b"in use")
    clock.advance(30 * DAY)
    old = clock.now_ts() - 20 * DAY
    for path in (data_dir / "files").iterdir():
        os.utime(path, (old, old))
    ended_log = _log(data_dir, ended_run, ended_job, old)
    live_log = _log(data_dir, live_run, live_job, old)
    again_log = _log(data_dir, again_run, again_job, old)
    fresh_run, fresh_job = _job(store, "ccc-fresh", "done", True)
    fresh_log = _log(data_dir, fresh_run, fresh_job, clock.now_ts())

    counts = _sweeper(
        store, data_dir, events_max_age="7d", deliveries_max_age="7d", runs_max_age="7d"
    ).sweep_once()

    assert counts == {
        "events": 5, "reconciles": 0, "deliveries": 5, "runs": 1, "job_logs": 2, "archives": 3
    }  # fmt: skip
    assert store.get(Run, again_run.id) is None and store.get(Job, again_job.id) is None
    assert store.get(Run, newer_run.id) is not None  # the newest of its name stays
    assert store.get(Run, ended_run.id) is not None and store.get(Run, live_run.id) is not None
    assert not again_log.exists()  # the pruned run's log went in the same pass
    assert not ended_log.exists() and not tail_path(ended_log).exists()
    assert not ended_log.parent.exists()  # the run's empty folder went too
    assert live_log.exists() and fresh_log.exists()
    assert [p.name for p in (data_dir / "files").iterdir()] == [kept_archive]
    assert _sweeper(store, data_dir, owner="b").sweep_once() is None  # not due again yet
    clock.advance(601)
    assert _sweeper(store, data_dir, owner="b").sweep_once() is not None


def test_passes_are_bounded_and_the_next_comes_soon_when_more_is_left(tmp_path: Path) -> None:
    clock = FakeClock()
    store = Store.from_url(f"sqlite:///{tmp_path / 'd.db'}", clock=clock, migrate=True)
    project = store.get_or_create_project("main")
    total = MAX_BATCHES * 2 + 7
    for i in range(total):
        store.append_event(
            project_id=project.id, target_type="run", target_name="r", message=str(i)
        )
    clock.advance(60 * DAY)
    sweeper = _sweeper(store, tmp_path / "data", retention_batch=2)
    first = sweeper.sweep_once()
    assert first is not None and first["events"] == MAX_BATCHES * 2
    assert sweeper.sweep_once() is None
    clock.advance(5)
    second = sweeper.sweep_once()
    assert second is not None and second["events"] == 7
    assert store.list_events() == []
    clock.advance(5)
    assert sweeper.sweep_once() is None  # nothing was left: due after the interval
    assert timedelta(seconds=sweeper.policy.interval) == timedelta(minutes=10)
