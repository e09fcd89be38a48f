"""A `backends: [kubernetes]` fleet through a real server (the composition root's controller,
`running_server` with no factory) whose backends file names the Kubernetes API emulator
(tests/services/kubeapi.py): the fleet's pods are made, their instances are recorded in
the store with the pod and are still there after a restart (which makes no running pod
again), a pod deleted behind Dockyard's back ends its instance, and deleting the fleet
deletes its pods. The emulator runs no container: the pods' IP is a loopback address where
no agent listens, so the instances never become idle here. Every wait polls with a deadline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.domain.inventory import InstanceRecord
from tests.services.kubeapi import KubeApi, kube_api
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.web.serving import Running, running_server, wait_until

FLEET = """type: fleet
name: pods
backends: [kubernetes]
nodes: 2
resources:
  cpu: 2..
  memory: 4GB..
  gpu: H100:1
"""
NOBODY = "127.0.0.3"  # a loopback address where no agent listens: refused at once
LIVE = ("pending", "provisioning", "idle", "busy")


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store the server keeps the instances in: SQLite, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'dockyard.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


@pytest.fixture
def api() -> Iterator[KubeApi]:
    with kube_api() as emulator:
        for index in range(2):
            emulator.add_node(
                f"h100-{index}", gpus=8, product="NVIDIA-H100-80GB-HBM3", memory="500Gi"
            )
        yield emulator


def _backends(tmp_path: Path, api: KubeApi) -> Path:
    path = tmp_path / "backends.yml"
    path.write_text(
        "projects:\n- name: main\n  backends:\n  - type: kubernetes\n"
        f"    kubeconfig:\n      filename: {api.kubeconfig(tmp_path / 'kubeconfig')}\n"
    )
    return path


def _api(server: Running, path: str, body: dict[str, Any]) -> Any:
    with server.client(server.admin_token) as http:
        answer = http.post(f"/api/project/main/{path}", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _live(server: Running) -> list[InstanceRecord]:
    store = server.controller.runtime.store  # type: ignore[attr-defined]
    found: list[InstanceRecord] = store.instance_records(statuses=list(LIVE))
    return [i for i in found if i.name.startswith("pods-")]


def _run_pending_pods(api: KubeApi) -> bool:
    """Moves the pods the server made to Running (as the kubelet would); True once all run."""
    pods = api.pods()
    for name, pod in pods.items():
        if pod["status"]["phase"] == "Pending":
            api.set_phase(name, "Running", pod_ip=NOBODY, node=f"node-{name[-1]}")
    return bool(pods) and all(p["status"]["phase"] == "Running" for p in api.pods().values())


def test_a_kubernetes_fleet_is_pods_recorded_in_the_store(
    tmp_path: Path, api: KubeApi, db_url: str
) -> None:
    backends = _backends(tmp_path, api)
    with running_server(tmp_path, None, backends_config=backends, db=db_url) as server:
        _api(server, "fleets/apply", {"text": FLEET, "path": "pods.dstack.yml", "force": False})
        wait_until(lambda: len(api.pods()) == 2, timeout=60, what="the fleet's 2 pods")
        wait_until(
            lambda: _run_pending_pods(api) and len(_live(server)) == 2,
            timeout=60,
            what="2 instances recorded",
        )
        pods = api.pods()
        records = {i.name: i for i in _live(server)}
        assert sorted(records) == ["pods-0", "pods-1"]
        first = records["pods-0"]
        assert first.backend == "kubernetes"
        pod = first.resources["kubernetes"]
        assert pod["pod"] == "dockyard-main-fleet-pods-0" and pod["namespace"] == "default"
        assert pod["uid"] == pods["dockyard-main-fleet-pods-0"]["metadata"]["uid"]
        spec = pods["dockyard-main-fleet-pods-0"]["spec"]
        assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}

    with running_server(tmp_path, None, backends_config=backends, db=db_url) as server:  # restart
        assert {i.name for i in _live(server)} == {"pods-0", "pods-1"}
        api.remove_pod("dockyard-main-fleet-pods-1")  # deleted behind Dockyard's back

        def ended() -> bool:
            store = server.controller.runtime.store  # type: ignore[attr-defined]
            rows = store.instance_records(statuses=["terminated"])
            return any(
                r.resources and (r.resources.get("kubernetes") or {}).get("uid") == pod_uid
                for r in rows
            )

        pod_uid = records["pods-1"].resources["kubernetes"]["uid"]
        wait_until(ended, timeout=90, what="the deleted pod's instance to end")
        # the pod that runs was not made again by the restarted server
        assert api.pods()["dockyard-main-fleet-pods-0"]["metadata"]["uid"] == pod["uid"]
        _api(server, "fleets/delete", {"names": ["pods"]})
        wait_until(lambda: api.pods() == {}, timeout=60, what="the fleet's pods deleted")
        wait_until(lambda: not _live(server), timeout=60, what="no live instance left")
