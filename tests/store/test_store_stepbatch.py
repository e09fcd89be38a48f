"""A claimed batch of jobs read in one statement, a placement answering its instance as
the take left it (no read after), and a one-job run following its job in the job's write —
on SQLite and PostgreSQL: a run held by a runs worker (or changed meanwhile) is made due
instead, so the runs worker decides as before; steps ending together recorded in one
transaction, each fenced on its own."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import event

from reconciler.adapters.db.jobsteps import JobStep, StepResult, Take
from reconciler.adapters.db.models import Fleet, Instance, Job, Run
from reconciler.adapters.db.runsteps import NewJob
from reconciler.adapters.db.stepevents import RunFollowing
from reconciler.adapters.db.store import Store
from reconciler.core.runfollow import RunFollow
from reconciler.domain.inventory import InstanceRecord
from reconciler.domain.workloads import JobRecord, ProjectRef, RunRecord

HOST = {"cpus": 8, "arch": "x86_64", "memory_mib": 16384, "disk_mib": 100000, "gpus": []}
DONE = RunFollow(
    {"status": "done", "termination_reason": "all_jobs_done"},
    ("run status running -> terminating (all_jobs_done)", "run status terminating -> done"),
)


def _rig(store: Store, jobs: int = 1) -> tuple[Instance, list[Job], list[str]]:
    project = store.get_or_create_project("main")
    fleet = store.add(
        Fleet(project_id=project.id, name="local", spec={}, status="active",
              created_at=store.now())
    )  # fmt: skip
    instance = store.add(
        Instance(
            fleet_id=fleet.id, project_id=project.id, name="local-0", status="idle",
            created_at=store.now(), host_info=HOST, total_blocks=4,
        )
    )  # fmt: skip
    made = []
    for i in range(jobs):
        run = store.add(
            Run(project_id=project.id, run_name=f"t{i}", run_type="task", spec={"type": "task"},
                spec_hash="h", status="running", submitted_at=store.now())
        )  # fmt: skip
        made.append(
            store.add(Job(run_id=run.id, status="running", job_spec={}, submitted_at=store.now()))
        )
    claimed = store.leases.claim_due(Job, owner="t", limit=jobs, lease_seconds=30)
    tokens = {row_id: token for row_id, token in claimed}
    return instance, made, [tokens[j.id] for j in made]


def _ending(project_id: str, job: Job, token: str, follow: RunFollowing) -> JobStep:
    return JobStep(
        job_id=job.id,
        token=token,
        read_status="running",
        project_id=project_id,
        run_id=job.run_id,
        values={"status": "done", "termination_reason": "done_by_runner"},
        event=(f"{job.run_id}/0/0", "job status running -> done (done_by_runner)"),
        release_lease=5.0,
        follow=follow,
    )


def test_a_claimed_batch_is_read_in_one_statement(store: Store) -> None:
    _, jobs, tokens = _rig(store, jobs=3)
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    pairs = [(j.id, t) for j, t in zip(jobs, tokens, strict=True)] + [(jobs[0].id, "stolen")]
    batch = store.load_job_batch(pairs)
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1  # the whole batch, with runs, projects and instances
    assert set(batch) == set(tokens)  # a lease no longer held reads nothing
    assert {rows.job.id for rows in batch.values()} == {j.id for j in jobs}
    assert all(not rows.secrets for rows in batch.values())
    store.put_secret(batch[tokens[0]].project.id, "TOKEN", "ciphertext")
    again = store.load_job_rows(jobs[0].id, tokens[0])
    assert again is not None and again.secrets  # rendering reads secrets only then


def test_a_placement_answers_its_instance_as_the_take_left_it(store: Store) -> None:
    instance, (job,), (token,) = _rig(store)
    store.update(Job, job.id, status="submitted")
    step = JobStep(
        job_id=job.id, token=token, read_status="submitted", project_id=instance.project_id,
        run_id=job.run_id, values={"status": "provisioning", "instance_id": instance.id},
        take=(Take(instance.id, 1),),
    )  # fmt: skip
    placed = store.place_job(step)
    assert isinstance(placed, InstanceRecord)  # no read after the write: RETURNING
    assert (placed.id, placed.busy_blocks, placed.status) == (instance.id, 1, "busy")
    assert placed.host_info == HOST and placed.created_at == instance.created_at
    row = store.get(Job, job.id)
    assert row is not None and (row.lock_token, row.status) == (token, "provisioning")
    assert store.place_job(step) is StepResult.LEASE_LOST  # read in another status now


def test_a_one_job_run_follows_its_job_in_the_same_write(store: Store) -> None:
    instance, (job,), (token,) = _rig(store)
    follow = RunFollowing("running", "t0", DONE)
    step = _ending(instance.project_id, job, token, follow)
    assert store.record_job_step(step) is StepResult.WRITTEN
    run = store.get(Run, job.run_id)
    assert run is not None and (run.status, run.termination_reason) == ("done", "all_jobs_done")
    events = store.list_events(project_id=run.project_id)  # newest first
    assert [e.message for e in reversed(events)] == [
        "job status running -> done (done_by_runner)",
        "run status running -> terminating (all_jobs_done)",
        "run status terminating -> done",
    ]


def test_a_run_held_by_its_worker_is_made_due_instead(store: Store) -> None:
    instance, (job, other), (token, other_token) = _rig(store, jobs=2)
    held = store.leases.claim_due(Run, owner="runs", limit=2, lease_seconds=30)
    assert {row_id for row_id, _ in held} == {job.run_id, other.run_id}
    follow = RunFollowing("running", "t0", DONE)
    step = _ending(instance.project_id, job, token, follow)
    assert store.record_job_step(step) is StepResult.WRITTEN_RUN_DUE
    run = store.get(Run, job.run_id)
    assert run is not None and (run.status, run.due_at) == ("running", None)  # its worker's
    events = store.list_events(project_id=run.project_id)
    assert [e.message for e in events] == ["job status running -> done (done_by_runner)"]
    # read in another status (a stop from the API meanwhile): made due, nothing written
    for row_id, run_token in held:
        store.leases.release(Run, row_id, run_token, due_in=600)
    store.update(Run, other.run_id, status="terminating")
    step = _ending(instance.project_id, other, other_token, follow)
    assert store.record_job_step(step) is StepResult.WRITTEN_RUN_DUE
    stopped = store.get(Run, other.run_id)
    assert stopped is not None and (stopped.status, stopped.due_at) == ("terminating", None)


def test_the_workers_get_frozen_values_not_rows(store: Store) -> None:
    instance, (job,), (token,) = _rig(store)
    store.update(Job, job.id, instance_id=instance.id)
    rows = store.load_job_rows(job.id, token)
    assert rows is not None
    assert isinstance(rows.job, JobRecord) and isinstance(rows.run, RunRecord)
    assert isinstance(rows.project, ProjectRef) and isinstance(rows.instance, InstanceRecord)
    ((run_id, run_token),) = store.leases.claim_due(Run, owner="t", limit=1, lease_seconds=30)
    new = NewJob(
        run_id=run_id, nodes=1, spec={"type": "task"}, replica_num=0, job_num=0,
        group_name=None, submission_num=1, deployment_num=0,
    )  # fmt: skip
    added = store.submit_job(new)
    loaded = store.load_run_rows(run_id, run_token)
    assert loaded is not None and isinstance(loaded[0], RunRecord)
    assert [(j.id, j.status) for j in loaded[1]][-1] == (added, "submitted")
    assert all(isinstance(j, JobRecord) for j in loaded[1])
    assert store.run_job_records(run_id) == loaded[1]
    assert store.project_name(instance.project_id) == "main"


def test_steps_ending_together_are_recorded_together(store: Store) -> None:
    instance, jobs, tokens = _rig(store, jobs=3)
    begins: list[object] = []
    event.listen(store.engine, "begin", lambda *a: begins.append(a))
    inserts: list[str] = []
    listener = lambda *a: inserts.append(a[2]) if "INSERT INTO events" in a[2] else None  # noqa: E731
    event.listen(store.engine, "before_cursor_execute", listener)
    steps = [
        _ending(instance.project_id, job, token, RunFollowing("running", f"t{i}", DONE))
        for i, (job, token) in enumerate(zip(jobs, tokens, strict=True))
    ]
    steps[1] = replace(steps[1], token="stolen")  # its lease is gone: its fence fails alone
    results = store.record_job_steps(steps)
    assert results == [StepResult.WRITTEN, StepResult.LEASE_LOST, StepResult.WRITTEN]
    # SQLite: one transaction; PostgreSQL: one per step (a batch's row locks deadlocked
    # with another replica's wakes)
    assert len(begins) == (1 if store.engine.dialect.name == "sqlite" else 3)
    # SQLite: the written steps' events in one insert for the batch; PostgreSQL: one a step
    event.remove(store.engine, "before_cursor_execute", listener)
    assert len(inserts) == (1 if store.engine.dialect.name == "sqlite" else 2)
    statuses = [(store.get(Job, j.id), store.get(Run, j.run_id)) for j in jobs]
    assert [(j.status, r.status) for j, r in statuses if j and r] == [
        ("done", "done"),
        ("running", "running"),  # nothing of it written: not its run either
        ("done", "done"),
    ]
    assert {e.target_id for e in store.list_events(project_id=instance.project_id)} == {
        jobs[0].id,
        jobs[0].run_id,
        jobs[2].id,
        jobs[2].run_id,
    }
    with pytest.raises(ValueError, match="on its own"):  # a placement answers its instance
        store.record_job_steps([replace(steps[0], take=(Take(instance.id, 1),))])


def test_placement_candidates_read_instances_with_their_fleets_in_one_statement(
    store: Store,
) -> None:
    instance, _, _ = _rig(store)
    statements: list[str] = []
    listener = lambda *a: statements.append(a[2])  # noqa: E731
    event.listen(store.engine, "before_cursor_execute", listener)
    (candidate,) = store.placement_candidates(instance.project_id)
    event.remove(store.engine, "before_cursor_execute", listener)
    assert (candidate.instance_id, candidate.fleet_name) == (instance.id, "local")
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 2  # instances with their fleets, then the jobs on them
    # an instance of a deleted fleet is no candidate
    store.update(Fleet, instance.fleet_id, deleted=True)
    assert store.placement_candidates(instance.project_id) == []
