"""The named reads that hand frozen domain values to the engine and the web (issue 13):
a leased reconcile or capacity row with its project, the fenced capacity write, a service's
running replicas, a resource's source, the maintenance lease; on both databases."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import event

from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Fleet, Instance, Job, Reconcile, Run, Volume
from reconciler.adapters.db.retention import RetentionStore
from reconciler.domain.history import ReconcileRecord
from reconciler.domain.inventory import CapacityRecord, InstanceRecord, LeasedInstance
from reconciler.domain.observed import ResourceSource


def _volume(store: Store) -> Volume:
    resource = store.record_resource(
        "main", "volume", "data", origin="git:vols/data.yml@abc", path="vols/data.yml",
        commit="abc", spec={"type": "volume"}, spec_hash="h", status="submitted",
    )  # fmt: skip
    return store.add(
        Volume(project_id=resource.project_id, name="data", spec={"type": "volume"},
               status="submitted", created_at=store.now(), resource_id=resource.id)
    )  # fmt: skip


def test_a_leased_reconcile_comes_with_its_project_name(store: Store) -> None:
    project = store.get_or_create_project("main")
    row = store.create_reconcile(project.id, trigger="cli", attempted_revision="abc")
    [(row_id, token)] = store.leases.claim_due(Reconcile, owner="a", limit=1, lease_seconds=30)
    found = store.load_reconcile(row_id, token)
    assert isinstance(found, ReconcileRecord) and found.id == row.id
    assert (found.project, found.status, found.attempted_revision) == ("main", "queued", "abc")
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.status = "running"  # type: ignore[misc]
    assert store.load_reconcile(row_id, "another token") is None


def test_a_capacity_row_loads_with_project_and_path_and_writes_fenced(store: Store) -> None:
    volume = _volume(store)
    [(row_id, token)] = store.leases.claim_due(Volume, owner="a", limit=1, lease_seconds=30)
    found = store.load_capacity("volume", row_id, token)
    assert isinstance(found, CapacityRecord)
    assert (found.kind, found.id, found.project, found.path) == (
        "volume", volume.id, "main", "vols/data.yml",
    )  # fmt: skip
    assert store.load_capacity("volume", row_id, "lost") is None
    assert store.load_capacity("gateway", row_id, token) is None  # another table
    assert not store.write_capacity("volume", row_id, "lost", {"status": "active"})
    assert store.write_capacity("volume", row_id, token, {"status": "active", "outputs": {"x": 1}})
    again = store.load_capacity("volume", row_id, token)
    assert again is not None and (again.status, again.outputs) == ("active", {"x": 1})
    with pytest.raises(ValueError, match="lock_token"):
        store.write_capacity("volume", row_id, token, {"lock_token": None})


def test_a_leased_instance_comes_with_its_fleet_in_one_statement(store: Store) -> None:
    project = store.get_or_create_project("main")
    fleet = store.add(
        Fleet(project_id=project.id, name="gpu", spec={"blocks": "auto"}, status="active",
              created_at=store.now())
    )  # fmt: skip
    member, alone = (
        store.add(Instance(project_id=project.id, fleet_id=fleet_id, name=name, status="idle",
                           created_at=store.now(), hostname="127.0.0.1", agent_port=10999))
        for fleet_id, name in ((fleet.id, "gpu-0"), (None, "local-0"))
    )  # fmt: skip
    leases = dict(store.leases.claim_due(Instance, owner="a", limit=2, lease_seconds=30))
    statements: list[str] = []
    listener = lambda *a: statements.append(a[2])  # noqa: E731
    event.listen(store.engine, "before_cursor_execute", listener)
    try:
        found = store.load_instance(member.id, leases[member.id])
    finally:
        event.remove(store.engine, "before_cursor_execute", listener)
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1  # the instance joined with its fleet
    assert isinstance(found, LeasedInstance) and isinstance(found.instance, InstanceRecord)
    assert (found.instance.name, found.instance.agent_port) == ("gpu-0", 10999)
    assert found.fleet is not None and (found.fleet.id, found.fleet.spec) == (
        fleet.id, {"blocks": "auto"},
    )  # fmt: skip
    lone = store.load_instance(alone.id, leases[alone.id])
    assert lone is not None and lone.fleet is None
    assert store.load_instance(member.id, "lost") is None
    assert not store.write_instance(member.id, "lost", {"status": "busy"})
    assert store.write_instance(member.id, leases[member.id], {"status": "busy"})
    again = store.load_instance(member.id, leases[member.id])
    assert again is not None and again.instance.status == "busy"
    with pytest.raises(ValueError, match="lock_token"):
        store.write_instance(member.id, leases[member.id], {"lock_token": None})


def test_resource_source_and_project_ids(store: Store) -> None:
    volume = _volume(store)
    assert volume.resource_id is not None
    assert store.resource_source(volume.resource_id) == ResourceSource(
        "git:vols/data.yml@abc", "vols/data.yml", "abc"
    )
    assert store.resource_source("missing") is None
    assert store.project_id_of("main") == volume.project_id
    assert store.project_id_of("other") is None
    assert store.ensure_project("main") == volume.project_id
    created = store.ensure_project("other")
    assert store.project_id_of("other") == created != volume.project_id


def _service(store: Store, name: str, run_type: str = "service") -> Run:
    project = store.get_or_create_project("main")
    return store.add(
        Run(project_id=project.id, run_name=name, run_type=run_type, spec={"port": 80},
            spec_hash="h", status="running", submitted_at=store.now())
    )  # fmt: skip


def test_service_replicas_are_its_running_jobs_with_their_instances(store: Store) -> None:
    run = _service(store, "web")
    instance = store.add(
        Instance(project_id=run.project_id, fleet_id=None, name="local-0", status="busy",
                 created_at=store.now(), hostname="127.0.0.1", agent_port=10999)
    )  # fmt: skip
    jobs = {}
    for replica, status, on in ((1, "running", True), (0, "running", True), (2, "submitted", False),
                                (3, "running", False)):  # fmt: skip
        jobs[replica] = store.add(
            Job(run_id=run.id, status=status, job_spec={}, submitted_at=store.now(),
                replica_num=replica, instance_id=instance.id if on else None,
                runtime={"ready": True, "ports": {"80": 8080 + replica}})
        )  # fmt: skip
    statements: list[str] = []
    listener = lambda *a: statements.append(a[2])  # noqa: E731
    event.listen(store.engine, "before_cursor_execute", listener)
    try:
        found = store.service_replicas("main", "web")
    finally:
        event.remove(store.engine, "before_cursor_execute", listener)
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 2  # the run, then its running jobs with their instances
    assert found is not None and found.spec == {"port": 80}
    assert [r.job_id for r in found.replicas] == [jobs[0].id, jobs[1].id]
    first = found.replicas[0]
    assert isinstance(first.instance, InstanceRecord) and first.instance.agent_port == 10999
    assert first.runtime["ports"] == {"80": 8080}
    _service(store, "batch", run_type="task")
    assert store.service_replicas("main", "batch") is None
    assert store.service_replicas("main", "missing") is None
    assert store.service_replicas("other", "web") is None


def test_maintenance_lease_is_one_task_at_a_time(store: Store) -> None:
    tasks = RetentionStore(store.engine, clock=store.clock)
    tasks.ensure_maintenance("retention")
    tasks.ensure_maintenance("preview-runs")
    token = store.maintenance.claim("retention", owner="a", lease_seconds=60)
    assert token is not None
    assert store.maintenance.claim("retention", owner="b", lease_seconds=60) is None
    assert store.maintenance.claim("preview-runs", owner="b", lease_seconds=60) is not None
    assert store.maintenance.renew("retention", token, lease_seconds=60)
    assert not store.maintenance.renew("retention", "lost", lease_seconds=60)
    assert store.maintenance.release("retention", token, due_in=600, last_result={"events": 2})
    assert tasks.maintenance_result("retention") == {"events": 2}
    assert store.maintenance.claim("retention", owner="b", lease_seconds=60) is None  # not due
