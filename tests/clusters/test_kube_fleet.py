"""A `backends: [kubernetes]` fleet is pods (`reconciler.engine.kubeengine`), against the
Kubernetes API emulator on loopback (tests/services/kubeapi.py, real HTTP and lightkube):
created with the agent's spec, watched to Running, found again by a new engine (a restarted
server), deleted with the fleet; a pod the cluster ends frees its instance; an API server
that disappears mid-watch fails the `up` (retried), and nothing is duplicated when it is
back. The emulator runs no container: the agent inside is not reached here. Every wait
polls with a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconciler.adapters.backendsfile import load_server_backends
from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.dstack_wire import DEFAULT_IMAGE
from reconciler.core.policy import RepoPolicy
from reconciler.domain.plan import Action, ActionKind
from reconciler.domain.statuses import JobTerminationReason
from reconciler.engine.kubeengine import KubernetesEngine
from reconciler.engine.planning import plan_commit
from reconciler.engine.previewing import Previewer, to_stack_resource
from stacks.protocol import StackBusy, StackFailed, StackOutputs, StackResource, StackUnavailable
from tests.engine.cloud_double import CloudDouble
from tests.planning.factories import live, resource, state
from tests.services.kubeapi import KubeApi, kube_api

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk0 dockyard-server"
GPU_FLEET = """type: fleet
name: pods
backends: [kubernetes]
nodes: 2
resources:
  cpu: 4..
  memory: 16GB..
  gpu: H100:2
"""


@pytest.fixture
def api() -> Iterator[KubeApi]:
    with kube_api() as emulator:
        for index in range(2):
            emulator.add_node(
                f"h100-{index}",
                cpu="95900m",
                memory="1000Gi",
                gpus=8,
                product="NVIDIA-H100-80GB-HBM3",
                gpu_memory_mib=81559,
            )
        emulator.add_node("cpu-0", cpu="16", memory="64Gi")
        yield emulator


@pytest.fixture
def clusters(api: KubeApi, tmp_path: Path) -> ServerBackends:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    path = tmp_path / "backends.yml"
    path.write_text(
        "projects:\n- name: main\n  backends:\n  - type: kubernetes\n"
        f"    kubeconfig:\n      filename: {kubeconfig}\n"
    )
    return load_server_backends(path, tmp_path)


def _engine(clusters: ServerBackends, tmp_path: Path, wait_s: float = 60.0) -> KubernetesEngine:
    return KubernetesEngine(clusters, KEY, tmp_path / "server_key", ("H100", "A100"), wait_s=wait_s)


def _fleet(text: str = GPU_FLEET) -> StackResource:
    desired = resource(text)
    return to_stack_resource("main", "fleet", desired.name, desired.path, desired.spec)


async def _until(condition: Callable[[], bool], what: str, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def _up_with_pods_running(
    engine: KubernetesEngine, api: KubeApi, fleet: StackResource, count: int = 2
) -> StackOutputs:
    watches = _watches(api)
    task = asyncio.create_task(engine.up(fleet))
    await _until(lambda: _watches(api) > watches or task.done(), "the engine's watch")
    assert not task.done(), task.exception() if task.done() else None
    assert len(api.pods()) == count
    for name in api.pods():
        api.set_phase(name, "Running", node=name.replace("dockyard", "node"))
    return await asyncio.wait_for(task, 20)


def _watches(api: KubeApi) -> int:
    return sum(1 for r in api.requests if "watch=true" in r)


def _posts(api: KubeApi) -> int:
    return sum(1 for r in api.requests if r.startswith("POST "))


async def test_a_fleet_is_pods_watched_to_running(
    api: KubeApi, clusters: ServerBackends, tmp_path: Path
) -> None:
    engine, fleet = _engine(clusters, tmp_path), _fleet()
    outputs = await _up_with_pods_running(engine, api, fleet)
    pods = api.pods()
    assert sorted(pods) == ["dockyard-main-fleet-pods-0", "dockyard-main-fleet-pods-1"]
    spec = pods["dockyard-main-fleet-pods-0"]["spec"]
    (container,) = spec["containers"]
    assert container["image"] == DEFAULT_IMAGE
    assert container["resources"] == {
        "requests": {"cpu": "4", "memory": "16384Mi", "nvidia.com/gpu": "2"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False  # no cluster credential in the pod
    assert {"name": "DOCKYARD_AUTHORIZED_KEY", "value": KEY} in container["env"]
    assert "-m agent serve" in container["command"][-1] and KEY not in container["command"][-1]
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"  # one pod per node
    instances = outputs["instances"]
    assert [i["name"] for i in instances] == ["pods-0", "pods-1"]
    first = instances[0]
    assert (
        first["backend"] == "kubernetes"
        and first["hostname"] == pods["dockyard-main-fleet-pods-0"]["status"]["podIP"]
    )
    assert (first["port"], first["agent_port"]) == (10022, 10999)
    assert first["kubernetes"] == {
        "project": "main",
        "cluster": "emulated",
        "namespace": "default",
        "pod": "dockyard-main-fleet-pods-0",
        "uid": pods["dockyard-main-fleet-pods-0"]["metadata"]["uid"],
        "node": "node-main-fleet-pods-0",
    }


async def test_a_new_engine_finds_the_pods_and_deletes_them_with_the_fleet(
    api: KubeApi, clusters: ServerBackends, tmp_path: Path
) -> None:
    fleet = _fleet()
    first = await _up_with_pods_running(_engine(clusters, tmp_path), api, fleet)
    posts = _posts(api)
    restarted = _engine(clusters, tmp_path)  # a restarted server: no state but the cluster's
    again = await restarted.up(fleet)
    assert _posts(api) == posts and again == first  # nothing created twice
    plan = await restarted.preview_destroy(fleet)
    assert [s.name for s in plan.steps] == [
        "pod/dockyard-main-fleet-pods-0",
        "pod/dockyard-main-fleet-pods-1",
    ]
    await restarted.destroy(fleet)
    assert api.pods() == {}
    await restarted.destroy(fleet)  # destroying what is gone is a no-op


async def test_a_smaller_fleet_deletes_the_pods_past_its_nodes(
    api: KubeApi, clusters: ServerBackends, tmp_path: Path
) -> None:
    engine = _engine(clusters, tmp_path)
    await _up_with_pods_running(engine, api, _fleet())
    outputs = await engine.up(_fleet(GPU_FLEET.replace("nodes: 2", "nodes: 1")))
    assert [i["name"] for i in outputs["instances"]] == ["pods-0"]
    assert sorted(api.pods()) == ["dockyard-main-fleet-pods-0"]


async def test_a_pod_that_fails_before_running_fails_the_up_and_is_replaced_on_retry(
    api: KubeApi, clusters: ServerBackends, tmp_path: Path
) -> None:
    engine, fleet = _engine(clusters, tmp_path), _fleet()
    task = asyncio.create_task(engine.up(fleet))
    await _until(lambda: len(api.pods()) == 2, "2 pods")
    api.set_phase("dockyard-main-fleet-pods-1", "Failed", reason="Error", message="image pull")
    with pytest.raises(StackFailed, match=r"the pod dockyard-main-fleet-pods-1 ended: Failed"):
        await asyncio.wait_for(task, 20)
    assert sorted(api.pods()) == ["dockyard-main-fleet-pods-0"]  # the failed one is deleted
    outputs = await _up_with_pods_running(engine, api, fleet)
    assert len(outputs["instances"]) == 2


async def test_pods_still_pending_are_busy_not_failed(
    api: KubeApi, clusters: ServerBackends, tmp_path: Path
) -> None:
    engine = _engine(clusters, tmp_path, wait_s=0.5)
    with pytest.raises(
        StackBusy, match=r"pods not running after 0.5 s: dockyard-main-fleet-pods-0 Pending"
    ):
        await engine.up(_fleet())
    assert len(api.pods()) == 2  # kept for the retry


async def test_the_api_server_disappearing_mid_watch_fails_the_up_and_nothing_is_doubled(
    api: KubeApi, clusters: ServerBackends, tmp_path: Path
) -> None:
    engine, fleet = _engine(clusters, tmp_path), _fleet()
    task = asyncio.create_task(engine.up(fleet))
    await _until(lambda: len(api.pods()) == 2, "2 pods")
    await _until(lambda: any("watch=true" in r for r in api.requests), "the watch")
    await asyncio.to_thread(api.go_down)
    with pytest.raises(
        StackFailed, match=r"watching the fleet's pods .*cannot reach the API server"
    ):
        await asyncio.wait_for(task, 20)
    with pytest.raises(StackFailed, match="cannot reach the API server"):
        await engine.destroy(fleet)
    api.come_back()
    posts = _posts(api)
    outputs = await _up_with_pods_running(engine, api, fleet)
    assert _posts(api) == posts and len(outputs["instances"]) == 2


async def test_a_pod_the_cluster_ends_ends_its_instance(
    api: KubeApi, clusters: ServerBackends, tmp_path: Path
) -> None:
    engine = _engine(clusters, tmp_path)
    instances = (await _up_with_pods_running(engine, api, _fleet()))["instances"]
    first, second = ({"kubernetes": i["kubernetes"]} for i in instances)
    assert await engine.instance_ended(first) is None  # running
    api.remove_pod("dockyard-main-fleet-pods-0")  # deleted behind our back
    assert await engine.instance_ended(first) == (
        JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY,
        "the pod dockyard-main-fleet-pods-0 was deleted from the cluster",
    )
    api.set_phase("dockyard-main-fleet-pods-1", "Failed", reason="Evicted", message="low memory")
    assert await engine.instance_ended(second) == (
        JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY,
        "the pod dockyard-main-fleet-pods-1 ended: Failed (Evicted): low memory",
    )
    assert await engine.instance_ended({}) is None  # not a pod's instance
    api.go_down()
    assert await engine.instance_ended(second) is None  # the cluster cannot say now


async def test_a_new_pod_under_the_old_name_is_not_the_instance_s(
    api: KubeApi, clusters: ServerBackends, tmp_path: Path
) -> None:
    engine = _engine(clusters, tmp_path)
    old = (await _up_with_pods_running(engine, api, _fleet()))["instances"][0]
    api.remove_pod("dockyard-main-fleet-pods-0")
    await _up_with_pods_running(engine, api, _fleet(), count=2)  # the fleet makes it again
    ended = await engine.instance_ended({"kubernetes": old["kubernetes"]})
    assert ended is not None and "was deleted" in ended[1]


async def test_a_project_without_the_backend_is_unavailable_with_the_line_to_add(
    tmp_path: Path,
) -> None:
    clusters = ServerBackends(
        str(tmp_path / "backends.yml"), load_server_backends(None, tmp_path).config, found=False
    )
    engine = _engine(clusters, tmp_path)
    with pytest.raises(StackUnavailable, match="add `- type: kubernetes` with its `kubeconfig:`"):
        await engine.up(_fleet())


async def test_no_node_that_fits_fails_with_what_was_asked(
    api: KubeApi, clusters: ServerBackends, tmp_path: Path
) -> None:
    with pytest.raises(StackFailed, match=r"no node of Kubernetes cluster `emulated`.*fits"):
        await _engine(clusters, tmp_path).up(_fleet(GPU_FLEET.replace("H100:2", "A100:2")))
    assert api.pods() == {}


async def test_the_plan_shows_the_pods_it_would_make_or_why_the_cluster_cannot_answer(
    api: KubeApi, clusters: ServerBackends, tmp_path: Path
) -> None:
    engine = _engine(clusters, tmp_path)
    previewer = Previewer({"pulumi": CloudDouble(), "kubernetes": engine}, clusters=clusters)
    desired = resource(GPU_FLEET)

    async def planned() -> Action:
        done = await plan_commit(
            state(desired), RepoPolicy(), live(), base=None, previewer=previewer
        )
        (action,) = done.plan.actions
        return action

    action = await planned()
    assert action.action is ActionKind.CREATE and action.preview is not None
    assert [(s.op, s.name, s.diffs) for s in action.preview.steps] == [
        (
            "create",
            f"pod/dockyard-main-fleet-pods-{i}",
            ("emulated/nodes: nodes:95xCPU:1024000MiB:8xH100",),
        )
        for i in range(2)
    ]
    assert action.preview.per_hour == 0.0
    assert api.pods() == {}  # a plan makes nothing
    api.go_down()
    action = await planned()
    assert action.action is ActionKind.BLOCKED
    assert f"Kubernetes cluster `emulated` ({api.url}): cannot reach the API server" in (
        action.reason or ""
    )
    assert f"(fix `kubeconfig` at {clusters.path} (projects[0].backends[0]))" in (
        action.reason or ""
    )
