"""The retention sweep's units of work on both databases: what goes, and what always stays."""

from __future__ import annotations

from datetime import timedelta

from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Job, Resource, Run
from reconciler.adapters.db.retention import Keep, RetentionStore
from tests.store.conftest import FakeClock
from tests.store.deliveries import deliver, delivery

DAY = 86400.0


def _retention(store: Store) -> RetentionStore:
    return RetentionStore(store.engine, clock=store.clock)


def test_events_and_deliveries_go_by_age_then_by_count_in_batches(
    store: Store, clock: FakeClock
) -> None:
    project = store.get_or_create_project("main")
    for i in range(10):
        store.append_event(
            project_id=project.id, target_type="run", target_name="r", message=f"{i}"
        )
        deliver(store, "github", f"d{i}")
        clock.advance(DAY)
    retention = _retention(store)
    keep = Keep(max_age=timedelta(days=5.5), max_count=1000)
    assert retention.prune_events(keep, batch=3) == 3  # one bounded batch
    assert retention.prune_events(keep, batch=3) == 2
    assert retention.prune_events(keep, batch=3) == 0
    assert [e.message for e in store.list_events()] == ["9", "8", "7", "6", "5"]
    assert retention.prune_events(Keep(timedelta(days=99), max_count=2), batch=100) == 3
    assert [e.message for e in store.list_events()] == ["9", "8"]
    assert retention.prune_deliveries(Keep(timedelta(days=99), max_count=4), batch=100) == 6
    assert delivery(store, "github", "d5") is None
    assert delivery(store, "github", "d6") is not None


def test_reconciles_keep_the_newest_the_last_applied_and_the_active(
    store: Store, clock: FakeClock
) -> None:
    main, other = store.get_or_create_project("main"), store.get_or_create_project("other")
    applied = store.create_reconcile(main.id, trigger="timer")
    store.finish_reconcile(applied.id, status="succeeded", applied_revision="a" * 40)
    ids = []
    for _ in range(4):
        clock.advance(DAY)
        rec = store.create_reconcile(main.id, trigger="timer")
        store.finish_reconcile(rec.id, status="failed", error="bad config")
        ids.append(rec.id)
    clock.advance(DAY)
    running = store.create_reconcile(main.id, trigger="timer")
    store.set_reconcile_stage(running.id, "fetch")
    lone = store.create_reconcile(other.id, trigger="timer")
    store.finish_reconcile(lone.id, status="failed")
    clock.advance(100 * DAY)
    deleted = _retention(store).prune_reconciles(Keep(timedelta(days=1), max_count=1), batch=50)
    assert deleted == 3  # the failed ones but the newest finished of main
    left = {r.id for r in store.list_reconciles(main.id)} | {
        r.id for r in store.list_reconciles(other.id)
    }
    assert left == {applied.id, ids[-1], running.id, lone.id}
    assert store.last_applied_revision(main.id) == "a" * 40


def test_logs_may_go_only_when_job_and_run_have_ended(store: Store, clock: FakeClock) -> None:
    project = store.get_or_create_project("main")
    now = store.now()

    def run_with_job(run_status: str, finished: bool) -> str:
        run = store.add(Run(project_id=project.id, run_name=f"r-{run_status}-{finished}",
                            run_type="task", spec={}, spec_hash="h", status=run_status,
                            submitted_at=now))  # fmt: skip
        job = store.add(Job(run_id=run.id, status="done" if finished else "running",
                            job_spec={}, submitted_at=now,
                            finished_at=now if finished else None))  # fmt: skip
        return job.id

    done = run_with_job("done", True)
    active_run = run_with_job("running", True)  # an earlier submission of a live service
    active_job = run_with_job("running", False)
    clock.advance(10 * DAY)
    ended_before = store.now() - timedelta(days=7)
    wanted = {done, active_run, active_job, "gone-job"}
    assert _retention(store).finished_log_jobs(wanted, ended_before) == {done, "gone-job"}
    assert _retention(store).finished_log_jobs(wanted, now) == {"gone-job"}


def test_archives_in_use_are_those_of_runs_not_finished(store: Store) -> None:
    project = store.get_or_create_project("main")
    now = store.now()
    for status, archive in (("running", "a" * 64), ("done", "b" * 64)):
        store.add(Run(project_id=project.id, run_name=status, run_type="task",
                      spec={"file_archives": [{"id": archive, "path": "."}]}, spec_hash="h",
                      status=status, submitted_at=now))  # fmt: skip
    assert _retention(store).archives_in_use() == {"a" * 64}


def test_the_maintenance_row_is_leased_by_one_sweeper_at_a_time(store: Store) -> None:
    from reconciler.adapters.db.models import Maintenance

    retention = _retention(store)
    retention.ensure_maintenance("retention")
    retention.ensure_maintenance("retention")  # idempotent
    first = store.leases.claim_due(Maintenance, owner="a", limit=1, lease_seconds=60)
    second = store.leases.claim_due(Maintenance, owner="b", limit=1, lease_seconds=60)
    assert len(first) == 1 and second == []
    store.leases.release(Maintenance, *first[0], due_in=600, values={"last_result": {"x": 1}})
    assert retention.maintenance_result("retention") == {"x": 1}
    assert store.leases.claim_due(Maintenance, owner="b", limit=1, lease_seconds=60) == []


def _run(store: Store, name: str, status: str, *, submitted_days_ago: float,
         jobs: tuple[tuple[str, float | None], ...] = (("done", None),),
         project: str = "main", deleted: bool = False) -> str:  # fmt: skip
    """A run submitted `submitted_days_ago`, with jobs (status, ended how many days ago; None:
    when it was submitted)."""
    project_id = store.get_or_create_project(project).id
    now = store.now()
    submitted = now - timedelta(days=submitted_days_ago)
    run = store.add(Run(project_id=project_id, run_name=name, run_type="task", spec={},
                        spec_hash="h", status=status, submitted_at=submitted,
                        deleted=deleted))  # fmt: skip
    for job_status, ended in jobs:
        finished = submitted if ended is None else now - timedelta(days=ended)
        store.add(Job(run_id=run.id, status=job_status, job_spec={}, submitted_at=submitted,
                      finished_at=None if job_status == "running" else finished))  # fmt: skip
    return run.id


def test_finished_runs_go_with_their_jobs_but_never_what_is_still_needed(store: Store) -> None:
    month = Keep(max_age=timedelta(days=30), max_count=1000)
    gone = [
        _run(store, "train", "done", submitted_days_ago=50),
        _run(store, "train", "failed", submitted_days_ago=45),
        _run(store, "svc", "terminated", submitted_days_ago=44),  # an active run's old one
        _run(store, "removed", "done", submitted_days_ago=40, deleted=True),  # newest, deleted
    ]
    kept = [
        _run(store, "train", "done", submitted_days_ago=40),  # the newest of its name
        _run(store, "svc", "running", submitted_days_ago=43, jobs=(("running", None),)),
        _run(store, "svc", "done", submitted_days_ago=42, jobs=(("done", 29),)),  # ended lately
        _run(store, "svc", "done", submitted_days_ago=41, jobs=(("terminating", 41),)),
        _run(store, "eval", "done", submitted_days_ago=5),
        _run(store, "eval", "done", submitted_days_ago=4),
        _run(store, "train", "done", submitted_days_ago=39, project="other"),  # its own newest
        _run(store, "svc", "done", submitted_days_ago=1),
    ]
    held = _run(store, "svc", "failed", submitted_days_ago=48)  # a worker holds its lease
    store.update(Run, held, lock_token="t", lock_owner="w",
                 lock_expires_at=store.now() + timedelta(seconds=60))  # fmt: skip
    job_held = _run(store, "svc", "failed", submitted_days_ago=47)  # or one of its jobs'
    store.update(Job, store.list_jobs(job_held)[0].id, lock_token="t", lock_owner="w",
                 lock_expires_at=store.now() + timedelta(seconds=60))  # fmt: skip
    managed = _run(store, "web", "done", submitted_days_ago=46)  # its resource's newest run
    resource = store.add(Resource(project_id=store.get_or_create_project("main").id,
                                  kind="task", name="web", origin="git:web.yml@abc",
                                  path="web.yml", commit="abc", spec={}, spec_hash="h",
                                  status="done", created_at=store.now(),
                                  updated_at=store.now()))  # fmt: skip
    store.update(Run, managed, resource_id=resource.id)
    _run(store, "web", "done", submitted_days_ago=2)  # a newer one of the name, applied by hand
    retention = _retention(store)
    assert retention.prune_runs(month, batch=3) == 3  # one bounded batch, oldest first
    assert retention.prune_runs(month, batch=3) == 1
    assert retention.prune_runs(month, batch=3) == 0
    for run_id in gone:
        assert store.get(Run, run_id) is None and store.list_jobs(run_id) == []
    for run_id in (*kept, held, job_held, managed):
        assert store.get(Run, run_id) is not None and store.list_jobs(run_id) != []
    main = store.get_or_create_project("main").id
    newest = store.get_run_by_name(main, "svc")
    assert newest is not None and newest.id == kept[-1]
    assert store.get_run_by_name(main, "removed") is None  # as before the sweep


def test_finished_runs_beyond_the_count_go_but_the_newest_of_each_name(store: Store) -> None:
    ids = [_run(store, f"job-{i % 3}", "done", submitted_days_ago=10 - i) for i in range(9)]
    active = _run(store, "job-0", "running", submitted_days_ago=0, jobs=(("running", None),))
    retention = _retention(store)
    assert retention.prune_runs(Keep(timedelta(days=99), max_count=4), batch=100) == 5
    left = {run_id for run_id in (*ids, active) if store.get(Run, run_id) is not None}
    assert left == {*ids[5:], active}  # the 4 newest finished, and the active one
    assert retention.prune_runs(Keep(timedelta(days=99), max_count=1), batch=100) == 2
    left = {run_id for run_id in (*ids, active) if store.get(Run, run_id) is not None}
    assert left == {ids[7], ids[8], active}  # the newest job-1 and job-2 (job-0's: active)
