"""A job that finds no free block on any instance parks the project's new jobs like it in
the waiting line in the same write (`jobsteps.ParkLike`), on SQLite and PostgreSQL: only
new ones (never processed, not leased) with its place key, only while no instance of the
project has a free block when the write runs; parked, they are woken by room given back
like any waiting job, first come first."""

from __future__ import annotations

import uuid
from datetime import UTC, timedelta
from typing import Any

from reconciler.adapters.db.jobsteps import JobStep, ParkLike, StepResult
from reconciler.adapters.db.models import Instance, Job, Run
from reconciler.adapters.db.store import Store
from reconciler.core.jobspecs import place_key_of
from tests.store.test_store_jobsteps import _placing, _rig

MESSAGE = "waiting for busy capacity"
KEY = place_key_of({"resources": {"cpu": 1}}, 1)


def _new(store: Store, run_id: str, key: str | None, seconds: int, **values: Any) -> Job:
    job = Job(
        run_id=run_id,
        status="submitted",
        job_spec={},
        submitted_at=store.now() + timedelta(seconds=seconds),
        replica_num=seconds,
        **values,
    )
    job.place_key = key
    return store.add(job)


def _leased(store: Store, job: Job) -> Job:
    """`job` as a claim leaves it (its lease token set)."""
    until = store.now() + timedelta(seconds=30)
    store.update(Job, job.id, lock_token=str(uuid.uuid4()), lock_expires_at=until, lock_owner="t")
    return _row(store, job)


def _parking_step(job: Job, instance: Instance, token: str) -> JobStep:
    return JobStep(
        job_id=job.id,
        token=token,
        read_status="submitted",
        project_id=instance.project_id,
        run_id=job.run_id,
        values={"status_message": MESSAGE, "room_ask": 1},
        release_lease=300.0,
        park_like=ParkLike(KEY, MESSAGE, 1, 300.0),
    )


def _row(store: Store, job: Job) -> Job:
    row = store.get(Job, job.id)
    assert row is not None
    return row


def test_no_room_anywhere_parks_only_the_new_jobs_like_it(store: Store) -> None:
    instance, job, token = _rig(store, total_blocks=1)
    store.update(Instance, instance.id, busy_blocks=1, status="busy")
    alike = [_new(store, job.run_id, KEY, s) for s in (1, 2)]
    other = _new(store, job.run_id, place_key_of({"resources": {"gpu": 1}}, 1), 3)
    old = _new(store, job.run_id, None, 4)  # from before place keys: its own pass
    seen = _new(store, job.run_id, KEY, 5, last_processed_at=store.now())
    elsewhere = store.add(
        Run(project_id=store.get_or_create_project("other").id, run_name="x", run_type="task",
            spec={}, spec_hash="h", status="submitted", submitted_at=store.now())
    )  # fmt: skip
    foreign = _new(store, elsewhere.id, KEY, 6)
    claimed = _leased(store, _new(store, job.run_id, KEY, 7))  # a claimed batch's job

    assert store.record_job_step(_parking_step(job, instance, token)) is StepResult.WRITTEN
    now = store.now()
    for parked in alike:
        row = _row(store, parked)
        assert (row.status_message, row.room_ask) == (MESSAGE, 1)
        assert row.due_at is not None and row.last_processed_at is not None
        assert row.due_at.replace(tzinfo=UTC) > now + timedelta(seconds=250)
    for untouched in (other, old, foreign):
        row = _row(store, untouched)
        assert (row.due_at, row.room_ask, row.status_message) == (None, None, "")
    assert _row(store, seen).room_ask is None
    assert _row(store, claimed).room_ask is None  # leased: not parked behind its pass

    # room given back wakes the first in line: the job that parked them, then the others
    for expected in (job, alike[0], alike[1]):
        store.give_back_capacity(instance.id, 1)
        store.wake_waiting_jobs(instance.project_id, 1)
        assert _row(store, expected).due_at is None, expected.replica_num
        store.update(Job, expected.id, due_at=None, instance_id=instance.id, status="running")
        store.update(Instance, instance.id, busy_blocks=1, status="busy")


def test_room_free_when_the_write_runs_parks_nothing(store: Store) -> None:
    """The job found no room, but a block was given back before its write: the jobs like
    it keep their own passes (one of them takes that block)."""
    instance, job, token = _rig(store, total_blocks=2)
    store.update(Instance, instance.id, busy_blocks=1, status="busy")
    alike = _new(store, job.run_id, KEY, 1)
    assert store.record_job_step(_parking_step(job, instance, token)) is StepResult.WRITTEN
    row = _row(store, alike)
    assert (row.due_at, row.room_ask) == (None, None)
    assert _row(store, job).room_ask == 1  # the job's own write went through


def test_a_placement_taking_the_last_block_then_a_park(store: Store) -> None:
    """Parking reads the room when its write runs: the last block, taken by a placement
    just before, leaves none, though the job was claimed while it was free."""
    instance, job, token = _rig(store, total_blocks=1)
    assert store.record_job_step(_placing(job, instance, token)) is StepResult.WRITTEN
    second = _new(store, job.run_id, KEY, 1)
    alike = _new(store, job.run_id, KEY, 2)
    step = _parking_step(second, instance, _leased(store, second).lock_token or "")
    assert store.record_job_step(step) is StepResult.WRITTEN
    assert _row(store, alike).room_ask == 1
