"""A deleted project's hosts (`host_teardowns`), on SQLite and PostgreSQL.

Deleting a project records, in the same transaction, one row per host to undo: its live SSH
instances (even idle ones: their agents hold its members' keys) and every host that runs one
of its unfinished jobs or one the store ended without its agent, with the agent's ids of
those jobs. Finished jobs, terminated hosts and other projects' rows are left out. The
worker's units of work: lease, load, hold (why, due later), finish (the row goes), and
`fleets_on_host` (who else lists a host).
"""

from __future__ import annotations

from datetime import datetime

from reconciler.adapters.db.models import Fleet, HostTeardown, Instance, Job, Run
from reconciler.adapters.db.readmodels.accounts import delete_project
from reconciler.adapters.db.readmodels.database import Database
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.teardowns import lists_host
from tests.store.conftest import FakeClock


def _fleet(store: Store, project: str, name: str) -> tuple[str, str]:
    project_id = store.get_or_create_project(project).id
    fleet = store.add(
        Fleet(project_id=project_id, name=name, spec={}, status="active", created_at=store.now())
    )
    return project_id, fleet.id


def _instance(
    store: Store, project: str, fleet: str, host: str, *, backend: str = "ssh", status: str = "idle"
) -> str:
    project_id = store.get_or_create_project(project).id
    row = store.add(
        Instance(fleet_id=fleet, project_id=project_id, name=f"{host}-{project}", status=status,
                 created_at=store.now(), hostname=host, ssh_port=22, ssh_user="root",
                 agent_port=10998, backend=backend, resources={"identity_file": "/k"})
    )  # fmt: skip
    return row.id


def _job(store: Store, project: str, instance: str, status: str, **kw: object) -> str:
    project_id = store.get_or_create_project(project).id
    now: datetime = store.now()
    run = store.add(
        Run(project_id=project_id, run_name=f"run-{status}", run_type="task", spec={},
            spec_hash="x", status=status, submitted_at=now)
    )  # fmt: skip
    job = store.add(
        Job(run_id=run.id, status=status, job_spec={}, submitted_at=now, instance_id=instance,
            agent_job_id=str(kw.get("agent_id") or "") or None,
            termination_reason=str(kw.get("reason") or "") or None)
    )  # fmt: skip
    return job.id


def test_deleting_a_project_records_its_hosts_to_undo(store: Store) -> None:
    _, doomed_fleet = _fleet(store, "doomed", "ssh")
    _, doomed_local = _fleet(store, "doomed", "local")
    _, stays_fleet = _fleet(store, "stays", "ssh")
    host_a = _instance(store, "doomed", doomed_fleet, "10.0.0.1")
    _instance(store, "doomed", doomed_fleet, "10.0.0.2", status="terminated")
    local = _instance(store, "doomed", doomed_local, "127.0.0.1", backend="local")
    shared = _instance(store, "stays", stays_fleet, "10.0.0.1")
    running = _job(store, "doomed", local, "running", agent_id="agent-job-1")
    _job(store, "doomed", local, "done")
    lost = _job(store, "doomed", host_a, "failed", reason="instance_unreachable")
    _job(store, "stays", shared, "running")

    hosts = Database(store.engine).write_now(delete_project, "doomed", store.now())

    assert hosts == 2
    found = {t.host.hostname: t for t in store.list_teardowns()}
    assert set(found) == {"10.0.0.1", "127.0.0.1"}
    assert found["10.0.0.1"].job_ids == (lost,) and found["10.0.0.1"].host.backend == "ssh"
    assert found["10.0.0.1"].host.resources == {"identity_file": "/k"}
    assert (
        found["127.0.0.1"].job_ids == ("agent-job-1",) and running not in found["127.0.0.1"].job_ids
    )
    assert all(t.project == "doomed" for t in found.values())
    assert store.get(Fleet, doomed_fleet) is None and store.get(Instance, host_a) is None
    assert store.fleets_on_host("10.0.0.1", 22) == [stays_fleet]
    assert store.fleets_on_host("10.0.0.2", 22) == []


def test_the_worker_leases_holds_and_finishes_a_row(store: Store, clock: FakeClock) -> None:
    _, fleet = _fleet(store, "doomed", "ssh")
    _instance(store, "doomed", fleet, "10.0.0.9")
    Database(store.engine).write_now(delete_project, "doomed", store.now())
    ((row_id, token),) = store.leases.claim_due(
        HostTeardown, owner="test", limit=5, lease_seconds=60
    )
    assert store.load_teardown(row_id, "not-the-token") is None
    loaded = store.load_teardown(row_id, token)
    assert loaded is not None and loaded.host.hostname == "10.0.0.9" and loaded.job_ids == ()
    assert store.hold_teardown(row_id, token, "host unreachable", 30.0)
    assert store.list_teardowns()[0].status_message == "host unreachable"
    assert store.leases.claim_due(HostTeardown, owner="test", limit=5, lease_seconds=60) == []
    assert not store.finish_teardown(row_id, token)  # the lease was released: fenced out
    clock.advance(31)
    ((again, token2),) = store.leases.claim_due(
        HostTeardown, owner="test", limit=5, lease_seconds=60
    )
    assert again == row_id and store.finish_teardown(row_id, token2)
    assert store.list_teardowns() == []


def test_an_ssh_host_leaving_its_fleet_is_recorded_with_its_instance_ending(store: Store) -> None:
    _, fleet = _fleet(store, "lab", "ssh")
    ssh = _instance(store, "lab", fleet, "10.0.0.5", status="terminating")
    ((_, token),) = store.leases.claim_due(Instance, owner="test", limit=5, lease_seconds=60)
    assert not store.end_ssh_instance(ssh, "not-the-token")
    assert store.end_ssh_instance(ssh, token)
    row = store.get(Instance, ssh)
    assert row is not None and row.status == "terminated"
    (teardown,) = store.list_teardowns()
    assert teardown.project == "lab" and teardown.job_ids == ()
    assert teardown.host.hostname == "10.0.0.5" and teardown.host.backend == "ssh"
    assert store.fleets_on_host("10.0.0.5", 22) == []  # its own fleet no longer lists it


def test_a_fleet_being_deployed_lists_its_hosts_by_its_spec(store: Store) -> None:
    project_id = store.get_or_create_project("lab").id
    spec = {"ssh_config": {"port": 2222, "hosts": ["10.0.0.7", {"hostname": "10.0.0.8"}]}}
    fleet = store.add(
        Fleet(project_id=project_id, name="new", spec=spec, status="submitted",
              created_at=store.now())
    )  # fmt: skip
    assert store.fleets_on_host("10.0.0.7", 2222) == [fleet.id]
    assert store.fleets_on_host("10.0.0.8", 2222) == [fleet.id]
    assert store.fleets_on_host("10.0.0.7", 22) == []
    assert not lists_host({"ssh_config": {"hosts": [{"hostname": "h", "port": 23}]}}, "h", 22)
    assert lists_host({"ssh_config": {"hosts": ["h"]}}, "h", None)
    assert not lists_host({"nodes": 2}, "h", 22)


def test_hosts_a_fleet_of_the_project_lists_are_recorded_before_their_instances(
    store: Store,
) -> None:
    project_id = store.get_or_create_project("doomed").id
    spec = {
        "ssh_config": {
            "user": "ubuntu",
            "identity_file": "/keys/lab",
            "hosts": ["10.0.0.3", {"hostname": "10.0.0.1", "port": 22}],
        }
    }
    fleet = store.add(
        Fleet(project_id=project_id, name="lab", spec=spec, status="submitted",
              created_at=store.now())
    )  # fmt: skip
    _instance(store, "doomed", fleet.id, "10.0.0.1")  # deployed already: recorded once
    hosts = Database(store.engine).write_now(delete_project, "doomed", store.now())
    assert hosts == 2
    found = {t.host.hostname: t.host for t in store.list_teardowns()}
    assert set(found) == {"10.0.0.1", "10.0.0.3"}
    being_deployed = found["10.0.0.3"]
    assert (being_deployed.ssh_port, being_deployed.ssh_user) == (22, "ubuntu")
    assert being_deployed.resources == {"identity_file": "/keys/lab"}
    assert being_deployed.backend == "ssh"
