"""The capacity workers one step at a time, on a real SQLite store and the local engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.tunnel import TunnelPool
from reconciler.adapters.db.models import Fleet, Gateway, Instance, Volume
from reconciler.adapters.db.store import Store
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.worker import Lease
from reconciler.engine.workers import (
    WorkerDeps,
    WorkerTimings,
    fleets,
    gateways,
    instances,
    volumes,
)
from stacks.engines import build_engines
from stacks.local import LocalSettings


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def now_ts(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def deps(tmp_path: Path, clock: Clock) -> WorkerDeps:
    store = Store.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", migrate=True, clock=clock)
    hints: list[str] = []
    return WorkerDeps(
        store=store,
        clock=clock,
        hint=hints.append,
        agents=AgentDirectory(TunnelPool(), identity_file=None),
        data_dir=tmp_path / "data",
        engines=build_engines(LocalSettings(data_dir=tmp_path / "data", user="root"), None),
        timings=WorkerTimings(unreachable_grace=120.0),
    )


def _lease(deps: WorkerDeps, model: type, kind: str) -> Lease:
    ((row_id, token),) = deps.store.leases.claim_due(model, owner="t", limit=1, lease_seconds=30)
    return Lease(kind, row_id, token)  # type: ignore[arg-type]


def _row(deps: WorkerDeps, model: type, **values: object) -> str:
    project = deps.store.get_or_create_project("main")
    resource = deps.store.record_resource(
        "main",
        str(values.get("kind", "gateway")),
        str(values["name"]),
        origin="git:x.dstack.yml@abc",
        path="x.dstack.yml",
        commit="abc",
        spec=dict(values["spec"]),  # type: ignore[call-overload]
        spec_hash="h",
        status="submitted",
    )
    row = model(
        project_id=project.id,
        name=values["name"],
        spec=values["spec"],
        status=values.get("status", "submitted"),
        created_at=deps.store.now(),
        resource_id=resource.id,
    )
    return str(deps.store.add(row).id)


async def test_a_gateway_comes_up_on_the_local_engine_and_its_deletion_is_confirmed(
    deps: WorkerDeps,
) -> None:
    gateway_id = _row(deps, Gateway, name="gw", spec={"type": "gateway", "name": "gw"})
    process = gateways.make_process(deps)

    lease = _lease(deps, Gateway, "gateways")
    assert await process(lease.row_id, lease.token) == volumes.IDLE_INTERVAL
    row = deps.store.get(Gateway, gateway_id)
    assert row is not None and row.status == "running"
    assert row.outputs["url"].endswith("/main/")

    deps.store.update(Gateway, gateway_id, status="terminating")
    resource = deps.store.get_resource("main", "gateway", "gw")
    assert resource is not None
    deps.store.set_resource_status(resource.id, "deleting")
    deps.store.leases.release(Gateway, gateway_id, lease.token)
    lease = _lease(deps, Gateway, "gateways")
    assert await process(lease.row_id, lease.token) is None
    row = deps.store.get(Gateway, gateway_id)
    assert row is not None and (row.status, row.deleted) == ("terminated", True)
    assert deps.store.get_resource("main", "gateway", "gw") is None


async def test_a_volume_directory_is_created(deps: WorkerDeps) -> None:
    volume_id = _row(deps, Volume, kind="volume", name="data", spec={"type": "volume"})
    lease = _lease(deps, Volume, "volumes")
    await volumes.make_process(deps)(lease.row_id, lease.token)
    row = deps.store.get(Volume, volume_id)
    assert row is not None and row.status == "active"
    assert _is_dir(row.outputs["path"])


async def test_a_cloud_gateway_without_pulumi_is_blocked_with_the_engines_message(
    deps: WorkerDeps,
) -> None:
    gateway_id = _row(
        deps, Gateway, name="gw", spec={"type": "gateway", "backend": "aws", "region": "x"}
    )
    lease = _lease(deps, Gateway, "gateways")
    assert await gateways.make_process(deps)(lease.row_id, lease.token) is None
    row = deps.store.get(Gateway, gateway_id)
    assert row is not None and row.status == "failed"
    assert row.status_message.startswith("blocked: Pulumi")
    resource = deps.store.get_resource("main", "gateway", "gw")
    assert resource is not None and resource.status == "failed"


def _instance(deps: WorkerDeps, **values: object) -> str:
    project = deps.store.get_or_create_project("main")
    fleet = deps.store.add(
        Fleet(
            project_id=project.id,
            name="gpu",
            spec={"type": "fleet", "nodes": {"min": 0, "max": 2}, "idle_duration": 60},
            status="active",
            created_at=deps.store.now(),
        )
    )
    fields: dict[str, object] = {
        "fleet_id": fleet.id,
        "project_id": project.id,
        "name": "gpu-0",
        "status": "idle",
        "created_at": deps.store.now(),
        "hostname": "127.0.0.1",
        "ssh_port": 1,  # nothing listens: the agent is unreachable
        "ssh_user": "root",
        "agent_port": 10998,
        "backend": "ssh",
    }
    fields.update(values)
    return str(deps.store.add(Instance(**fields)).id)  # type: ignore[arg-type]


async def test_an_unreachable_agent_gets_a_grace_window_before_instance_unreachable(
    deps: WorkerDeps, clock: Clock
) -> None:
    instance_id = _instance(deps)
    process = instances.make_process(deps)

    lease = _lease(deps, Instance, "instances")
    await process(lease.row_id, lease.token)
    row = deps.store.get(Instance, instance_id)
    assert row is not None and row.unreachable_since is not None
    assert row.status == "idle"
    assert row.status_message.startswith("agent unreachable since")
    deps.store.leases.release(Instance, instance_id, lease.token)

    clock.now += 121
    lease = _lease(deps, Instance, "instances")
    await process(lease.row_id, lease.token)
    row = deps.store.get(Instance, instance_id)
    assert row is not None
    assert row.status_message.startswith("instance_unreachable: agent unreachable for 121s")
    events = [e.message for e in deps.store.list_events(target_type="instance")]
    assert sum("instance_unreachable" in m for m in events) == 1


async def test_a_terminating_instance_ends_terminated(deps: WorkerDeps) -> None:
    instance_id = _instance(deps, status="terminating", termination_reason="idle_timeout")
    lease = _lease(deps, Instance, "instances")
    assert await instances.make_process(deps)(lease.row_id, lease.token) is None
    row = deps.store.get(Instance, instance_id)
    assert row is not None and row.status == "terminated"


def test_idle_instances_above_the_minimum_shrink_after_idle_duration(
    deps: WorkerDeps, clock: Clock
) -> None:
    instance_id = _instance(deps)
    (fleet,) = deps.store.fleet_records(deps.store.get_or_create_project("main").id)
    assert fleets.idle_victims(deps, fleet) == []  # idle for 0 s
    clock.now += 61
    victims = fleets.idle_victims(deps, fleet)
    assert [v.id for v in victims] == [instance_id]
    fleets.terminate_instances(deps, victims, "idle_timeout")
    row = deps.store.get(Instance, instance_id)
    assert row is not None and (row.status, row.termination_reason) == (
        "terminating",
        "idle_timeout",
    )


def test_blocks_of_the_local_fleet_default_to_a_shared_host() -> None:
    assert fleets.blocks_of({"blocks": 1}, "local") == fleets.LOCAL_BLOCKS
    assert fleets.blocks_of({"blocks": 4}, "local") == 4
    assert fleets.blocks_of({"blocks": 1}, "ssh") == 1
    assert fleets.blocks_of({"blocks": "auto"}, "ssh") == 1
    assert instances.auto_blocks({"cpus": 8, "gpus": [{}, {}]}) == 2
    assert instances.auto_blocks({"cpus": 8, "gpus": []}) == 8


def _is_dir(path: str) -> bool:
    return Path(path).is_dir()


async def test_a_terminating_fleet_terminates_its_instances_first(deps: WorkerDeps) -> None:
    instance_id = _instance(deps)
    fleet_id = deps.store.get(Instance, instance_id).fleet_id  # type: ignore[union-attr]
    assert fleet_id is not None
    deps.store.update(Fleet, fleet_id, status="terminating")
    process = fleets.make_process(deps)

    lease = _lease(deps, Fleet, "fleets")
    assert await process(lease.row_id, lease.token) == 1.0
    row = deps.store.get(Instance, instance_id)
    assert row is not None and row.status == "terminating"
    deps.store.leases.release(Fleet, fleet_id, lease.token)

    lease = _lease(deps, Instance, "instances")
    await instances.make_process(deps)(lease.row_id, lease.token)
    deps.store.leases.release(Instance, instance_id, lease.token)
    lease = _lease(deps, Fleet, "fleets")
    assert await process(lease.row_id, lease.token) is None
    fleet = deps.store.get(Fleet, fleet_id)
    assert fleet is not None and (fleet.status, fleet.deleted) == ("terminated", True)
