"""The jobs worker's units of work on SQLite and PostgreSQL: placing a job takes the
instance's blocks and writes the job in one transaction, so a fenced write that fails after
placement leaks no blocks, and a full instance writes nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, timedelta
from typing import Any

import pytest

from reconciler.adapters.db.jobsteps import JobStep, StepResult, Take, WaitPlace
from reconciler.adapters.db.models import Fleet, Instance, Job, Run
from reconciler.adapters.db.runsteps import NewJob, RunWrite
from reconciler.adapters.db.store import Store

HOST = {"cpus": 8, "arch": "x86_64", "memory_mib": 16384, "disk_mib": 100000, "gpus": []}


def _rig(store: Store, *, total_blocks: int = 2) -> tuple[Instance, Job, str]:
    project = store.get_or_create_project("main")
    fleet = store.add(
        Fleet(project_id=project.id, name="local", spec={}, status="active",
              created_at=store.now())
    )  # fmt: skip
    instance = store.add(
        Instance(
            fleet_id=fleet.id, project_id=project.id, name="local-0", status="idle",
            created_at=store.now(), host_info=HOST, total_blocks=total_blocks,
        )
    )  # fmt: skip
    run = store.add(
        Run(project_id=project.id, run_name="train", run_type="task", spec={},
            spec_hash="h", status="submitted", submitted_at=store.now())
    )  # fmt: skip
    job = store.add(Job(run_id=run.id, status="submitted", job_spec={}, submitted_at=store.now()))
    ((_, token),) = store.leases.claim_due(Job, owner="t", limit=1, lease_seconds=30)
    return instance, job, token


def _placing(job: Job, instance: Instance, token: str, blocks: int = 1) -> JobStep:
    return JobStep(
        job_id=job.id,
        token=token,
        read_status="submitted",
        project_id=instance.project_id,
        run_id=job.run_id,
        values={"status": "provisioning", "instance_id": instance.id},
        take=(Take(instance.id, blocks),),
        event=("train/0/0", "job status submitted -> provisioning"),
    )


def test_a_fenced_write_failing_after_placement_leaks_no_blocks(store: Store) -> None:
    instance, job, token = _rig(store)
    assert store.record_job_step(_placing(job, instance, "stolen")) is StepResult.LEASE_LOST
    kept = store.get(Instance, instance.id)
    assert kept is not None and (kept.busy_blocks, kept.status) == (0, "idle")
    unplaced = store.get(Job, job.id)
    assert unplaced is not None and (unplaced.status, unplaced.instance_id) == ("submitted", None)
    assert store.list_events(project_id=instance.project_id) == []

    assert store.record_job_step(_placing(job, instance, token)) is StepResult.WRITTEN
    taken = store.get(Instance, instance.id)
    assert taken is not None and (taken.busy_blocks, taken.status) == (1, "busy")
    placed = store.get(Job, job.id)
    assert placed is not None and (placed.status, placed.instance_id) == (
        "provisioning",
        instance.id,
    )
    events = store.list_events(project_id=instance.project_id)
    assert [e.message for e in events] == ["job status submitted -> provisioning"]
    run = store.get(Run, job.run_id)
    assert run is not None and run.due_at is None  # the run reacts at once


def test_a_status_changed_meanwhile_leaks_no_blocks(store: Store) -> None:
    instance, job, token = _rig(store)
    store.update(Job, job.id, status="terminating")  # a stop requested meanwhile
    assert store.record_job_step(_placing(job, instance, token)) is StepResult.LEASE_LOST
    kept = store.get(Instance, instance.id)
    assert kept is not None and kept.busy_blocks == 0


def test_an_instance_filled_meanwhile_writes_nothing(store: Store) -> None:
    instance, job, token = _rig(store, total_blocks=2)
    store.update(Instance, instance.id, busy_blocks=2, status="busy")
    step = _placing(job, instance, token)
    assert store.record_job_step(step) is StepResult.CAPACITY_TAKEN
    unplaced = store.get(Job, job.id)
    assert unplaced is not None and unplaced.status == "submitted"
    full = store.get(Instance, instance.id)
    assert full is not None and full.busy_blocks == 2


def test_a_cluster_placement_takes_all_or_nothing(store: Store) -> None:
    first, job, token = _rig(store, total_blocks=1)
    second = store.add(
        Instance(
            fleet_id=first.fleet_id, project_id=first.project_id, name="local-1",
            status="busy", created_at=store.now(), host_info=HOST, total_blocks=1,
            busy_blocks=1, instance_num=1,
        )
    )  # fmt: skip
    sibling = store.add(
        Job(run_id=job.run_id, status="submitted", job_spec={}, submitted_at=store.now(),
            job_num=1)
    )  # fmt: skip
    step = _placing(job, first, token)
    step = replace(step, take=(*step.take, Take(second.id, 1, sibling.id)))
    assert store.record_job_step(step) is StepResult.CAPACITY_TAKEN
    kept = store.get(Instance, first.id)
    assert kept is not None and kept.busy_blocks == 0  # the first take was rolled back
    alone = store.get(Job, sibling.id)
    assert alone is not None and alone.instance_id is None


def test_a_release_gives_blocks_back_and_wakes_the_oldest_waiting(store: Store) -> None:
    instance, job, token = _rig(store)
    assert store.record_job_step(_placing(job, instance, token)) is StepResult.WRITTEN
    waiting = store.add(
        Job(run_id=job.run_id, status="submitted", job_spec={}, submitted_at=store.now(),
            replica_num=1, due_at=store.now())
    )  # fmt: skip
    ending = JobStep(
        job_id=job.id,
        token=token,
        read_status="provisioning",
        project_id=instance.project_id,
        run_id=job.run_id,
        values={"status": "done"},
        release=(instance.id, 1),
    )
    assert store.record_job_step(ending) is StepResult.WRITTEN
    idle = store.get(Instance, instance.id)
    assert idle is not None and (idle.busy_blocks, idle.status) == (0, "idle")
    woken = store.get(Job, waiting.id)
    assert woken is not None and woken.due_at is None
    assert len(store.list_events(project_id=instance.project_id)) == 1  # no event asked


def test_room_made_wakes_a_waiting_service_ahead_of_older_tasks(store: Store) -> None:
    instance, job, _ = _rig(store)
    store.update(Job, job.id, status="provisioning")  # placed: not waiting
    tasks = [
        store.add(
            Job(
                run_id=job.run_id,
                status="submitted",
                job_spec={},
                submitted_at=store.now(),
                replica_num=i + 1,
                due_at=store.now(),
            )
        )
        for i in range(3)
    ]
    service_run = store.add(
        Run(project_id=instance.project_id, run_name="api", run_type="service", spec={},
            spec_hash="s", status="submitted", submitted_at=store.now())
    )  # fmt: skip
    # submitted as the runs worker submits it: its rank in line from its run's type
    service_id = store.submit_job(
        NewJob(run_id=service_run.id, nodes=1, spec={}, replica_num=0, job_num=0,
               group_name=None, submission_num=0, deployment_num=0)
    )  # fmt: skip
    store.update(Job, service_id, due_at=store.now())  # it found no room either
    service = store.get(Job, service_id)
    assert service is not None and service.wait_rank == 0
    store.wake_waiting_jobs(instance.project_id, 2)
    woken = [j.id for j in (store.get(Job, t.id) for t in [service, *tasks]) if j and not j.due_at]
    assert woken[0] == service.id and len(woken) == 2  # the service first, then a task


def _waiting(store: Store, job: Job, n: int) -> list[Job]:
    jobs = []
    for i in range(n):
        row = Job(run_id=job.run_id, status="submitted", job_spec={}, submitted_at=store.now(),
                  replica_num=i + 1, due_at=store.now())  # fmt: skip
        jobs.append(store.add(row))
    return jobs


def _asleep(store: Store, jobs: list[Job]) -> None:
    for job in jobs:
        store.update(Job, job.id, due_at=store.now())


def _woken(store: Store, jobs: list[Job]) -> int:
    return sum(1 for j in jobs if (row := store.get(Job, j.id)) is not None and row.due_at is None)


def test_waking_is_a_chain_whatever_the_queue(store: Store) -> None:
    """Blocks given back wake the first waiting job, a placement that leaves room the next
    one, a placement that fills the instance none: a step's cost does not grow with the
    queue."""
    instance, job, token = _rig(store, total_blocks=3)
    waiting = _waiting(store, job, 5)
    assert store.record_job_step(_placing(job, instance, token)) is StepResult.WRITTEN
    assert _woken(store, waiting) == 1  # 2 of 3 blocks free: the next one tries
    _asleep(store, waiting)
    full = _placing(job, instance, token, blocks=2)
    store.update(Job, job.id, status="submitted", instance_id=None)
    assert store.record_job_step(full) is StepResult.WRITTEN
    assert _woken(store, waiting) == 0  # 3 of 3 taken: nobody is woken for nothing
    ending = JobStep(
        job_id=job.id, token=token, read_status="provisioning", project_id=instance.project_id,
        run_id=job.run_id, values={"status": "done"}, release=(instance.id, 3),
    )  # fmt: skip
    assert store.record_job_step(ending) is StepResult.WRITTEN
    assert _woken(store, waiting) == 1  # it places, and wakes the next if room is left


def _in_line(store: Store, job: Job, asks: list[int], start: int = 1) -> list[Job]:
    """Sleeping waiting jobs, one second apart from `start` s after `job`, with these asks."""
    jobs = []
    for i, ask in enumerate(asks):
        when = job.submitted_at + timedelta(seconds=start + i)
        row = Job(run_id=job.run_id, status="submitted", job_spec={}, submitted_at=when,
                  replica_num=i + 1, due_at=store.now(), room_ask=ask)  # fmt: skip
        jobs.append(store.add(row))
    return jobs


def _awake(store: Store, jobs: list[Job]) -> list[int]:
    return [i for i, j in enumerate(jobs) if (row := store.get(Job, j.id)) and row.due_at is None]


def test_a_release_wakes_the_first_job_its_room_can_hold(store: Store) -> None:
    """Head-of-line: one block given back passes over the first job in line, which needs
    two, and wakes the one-block job behind it (it would sleep its back-off otherwise)."""
    instance, job, token = _rig(store, total_blocks=4)
    assert store.record_job_step(_placing(job, instance, token, blocks=4)) is StepResult.WRITTEN
    line = _in_line(store, job, [2, 1, 1])
    ending = JobStep(
        job_id=job.id, token=token, read_status="provisioning", project_id=instance.project_id,
        run_id=job.run_id, values={"status": "done"}, release=(instance.id, 1),
    )  # fmt: skip
    assert store.record_job_step(ending) is StepResult.WRITTEN
    assert _awake(store, line) == [1]


def test_a_job_without_room_passes_the_wake_to_the_next_that_fits(store: Store) -> None:
    """A job that finds one block free but needs two wakes the first job behind it in line
    that one block can hold: never one ahead of it, nor one that needs more."""
    instance, job, token = _rig(store, total_blocks=4)
    store.update(Instance, instance.id, busy_blocks=3, status="busy")
    ahead = _in_line(store, job, [1], start=-5)
    behind = _in_line(store, job, [2, 1, 1])
    waits = JobStep(
        job_id=job.id, token=token, read_status="submitted", project_id=instance.project_id,
        run_id=job.run_id, values={"room_ask": 2},
        pass_wake=WaitPlace(1, job.submitted_at, job.id),
    )  # fmt: skip
    assert store.record_job_step(waits) is StepResult.WRITTEN
    assert (_awake(store, ahead), _awake(store, behind)) == ([], [1])
    row = store.get(Job, job.id)
    assert row is not None and row.room_ask == 2


def test_a_step_can_drop_its_lease_in_the_same_transaction(store: Store, clock: Any) -> None:
    instance, job, token = _rig(store)
    step = replace(_placing(job, instance, token), release_lease=30.0)
    assert store.record_job_step(step) is StepResult.WRITTEN
    row = store.get(Job, job.id)
    assert row is not None and (row.lock_token, row.lock_owner, row.status) == (
        None,
        None,
        "provisioning",
    )
    assert row.due_at is not None and row.last_processed_at is not None
    due = row.due_at.replace(tzinfo=UTC) if row.due_at.tzinfo is None else row.due_at
    assert (due - store.now()).total_seconds() == pytest.approx(30.0)
    # the lease is gone: the same token writes nothing more
    again = replace(_placing(job, instance, token), read_status="provisioning", take=())
    assert store.record_job_step(again) is StepResult.LEASE_LOST


def test_one_read_loads_a_steps_rows_and_a_run_write_is_fenced(store: Store) -> None:
    instance, job, token = _rig(store)
    assert store.load_job_rows(job.id, "stolen") is None
    store.update(Job, job.id, instance_id=instance.id)
    rows = store.load_job_rows(job.id, token)
    assert rows is not None and rows.instance is not None
    assert (rows.job.id, rows.run.id, rows.instance.id) == (job.id, job.run_id, instance.id)
    assert rows.project.id == instance.project_id
    ((run_id, run_token),) = store.leases.claim_due(Run, owner="t", limit=1, lease_seconds=30)
    loaded = store.load_run_rows(run_id, run_token)
    assert loaded is not None and [j.id for j in loaded[1]] == [job.id]
    write = RunWrite(
        run_id=run_id, token=run_token, read_status="running", project_id=instance.project_id,
        values={"status": "done"}, events=(("train", "run status running -> done"),),
    )  # fmt: skip
    assert not store.record_run_write(write)  # read in another status: nothing written
    messages = [
        "run status submitted -> terminating (all_jobs_done)",
        "run status terminating -> done",
    ]
    both = tuple(("train", m) for m in messages)  # a run whose last job ended: one write
    write = replace(write, read_status="submitted", release_lease=0.0, events=both)
    assert store.record_run_write(write)
    run = store.get(Run, run_id)
    assert run is not None and (run.status, run.lock_token) == ("done", None)
    events = store.list_events(project_id=instance.project_id)  # newest first
    assert [e.message for e in reversed(events)] == messages  # in order
