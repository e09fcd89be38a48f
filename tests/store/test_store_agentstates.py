"""`Store.record_agent_running`: an agent's "job started" recorded in one transaction, on
SQLite and PostgreSQL — only for jobs still `pulling` on that instance and in no worker's
hands; each with its status event, its run made due."""

from __future__ import annotations

from datetime import timedelta

from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Event, Fleet, Instance, Job, Run
from tests.store.conftest import FakeClock


def _instance(store: Store, project_id: str, name: str) -> Instance:
    fleet = store.add(
        Fleet(project_id=project_id, name=f"f-{name}", spec={}, status="active",
              created_at=store.now())
    )  # fmt: skip
    return store.add(
        Instance(fleet_id=fleet.id, project_id=project_id, name=name, status="busy",
                 created_at=store.now())
    )  # fmt: skip


def _job(store: Store, run: Run, instance: Instance, status: str, **values: object) -> Job:
    fields: dict[str, object] = {
        "run_id": run.id, "status": status, "job_spec": {}, "submitted_at": store.now(),
        "instance_id": instance.id, "runtime": {"blocks": 1},
        "due_at": store.now() + timedelta(hours=1),
    }  # fmt: skip
    fields.update(values)
    return store.add(Job(**fields))  # type: ignore[arg-type]


def test_an_agents_started_jobs_are_recorded_running(store: Store, clock: FakeClock) -> None:
    project = store.get_or_create_project("main")
    run = store.add(
        Run(project_id=project.id, run_name="train", run_type="task", spec={}, spec_hash="h",
            status="provisioning", submitted_at=store.now(),
            due_at=store.now() + timedelta(hours=1))
    )  # fmt: skip
    here, there = _instance(store, project.id, "here"), _instance(store, project.id, "there")
    pulling = _job(store, run, here, "pulling", agent_job_id="agent-1")
    by_own_id = _job(store, run, here, "pulling")  # the agent knows it by the job's own id
    in_hand = _job(
        store, run, here, "pulling", lock_token="t", lock_expires_at=store.now() + timedelta(60)
    )
    provisioning = _job(store, run, here, "provisioning")  # its submit is still in flight
    elsewhere = _job(store, run, there, "pulling")

    ids = ["agent-1", by_own_id.id, in_hand.id, provisioning.id, elsewhere.id, "unknown"]
    recorded = store.record_agent_running(here.id, ids)

    assert sorted(recorded) == sorted([pulling.id, by_own_id.id])
    statuses = {j.id: j.status for j in store.list_jobs(run.id)}
    assert statuses[pulling.id] == statuses[by_own_id.id] == "running"
    assert statuses[in_hand.id] == statuses[elsewhere.id] == "pulling"
    assert statuses[provisioning.id] == "provisioning"
    job = store.get(Job, pulling.id)
    assert job is not None and job.runtime == {"blocks": 1, "started_at": clock.now_ts()}
    assert job.lock_token is None and job.due_at is not None  # the job's own pass: its wake
    woken = store.get(Run, run.id)
    assert woken is not None and woken.due_at is None  # due now: the run follows its jobs
    with store.reading() as session:
        messages = {e.target_id: e.message for e in session.query(Event)}
    assert messages == {
        pulling.id: "job status pulling -> running",
        by_own_id.id: "job status pulling -> running",
    }
    assert store.record_agent_running(here.id, ids) == []  # said again: nothing to record
