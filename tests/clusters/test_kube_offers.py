"""`dockyard offer` and the plan show what a project's Kubernetes cluster has, read from its
nodes through lightkube from a Kubernetes API emulator on loopback (tests/services/kubeapi.py:
the real wire protocol, no real API server here); an API server that is gone, refuses the
server's token or answers without end is one line naming the cluster and the file's entry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.backendsfile import load_server_backends
from reconciler.adapters.kubeapi import (
    KubeUnavailable,
    kube_client,
    read_kube_cluster,
    read_project_kube,
)
from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.policy import RepoPolicy
from reconciler.engine.planning import plan_commit
from reconciler.engine.previewing import Previewer
from schemas.serverbackends import Kubeconfig, KubernetesBackend, parse_backends_config
from tests.cli.conftest import Cli
from tests.engine.cloud_double import CloudDouble
from tests.planning.factories import live, resource, state
from tests.services.kubeapi import KubeApi, kube_api
from tests.web.fakes import FakeController
from tests.web.serving import running_server

KNOWN = ("H100", "A100", "L4")


@pytest.fixture
def api() -> Iterator[KubeApi]:
    with kube_api() as emulator:
        for index in range(3):
            emulator.add_node(
                f"h100-{index}",
                cpu="95900m",
                memory="1000Gi",
                gpus=8,
                product="NVIDIA-H100-80GB-HBM3",
                gpu_memory_mib=81559,
                ready=index != 2,
            )
        emulator.add_node("cpu-0", cpu="16", memory="64Gi")
        yield emulator


def _backends(tmp_path: Path, api: KubeApi, *, token: str | None = None) -> Path:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig", token=token)
    path = tmp_path / "backends.yml"
    path.write_text(
        "projects:\n- name: main\n  backends:\n  - type: kubernetes\n"
        f"    kubeconfig:\n      filename: {kubeconfig}\n"
    )
    return path


def _kube(stdout: str) -> list[tuple[object, ...]]:
    return [
        (
            o["region"],
            o["zones"],
            o["gpu"]["name"],
            o["gpu"]["count"],
            o["gpu"]["memory_gib"],
            o["cpus"],
            o["memory_gib"],
            o["price"],
            o["spot"],
        )
        for o in json.loads(stdout)
        if o["backend"] == "kubernetes"
    ]


def test_offer_lists_the_cluster_s_nodes_by_shape(tmp_path: Path, api: KubeApi) -> None:
    factory = lambda _s, store: FakeController(store)  # noqa: E731
    with running_server(tmp_path, factory, backends_config=_backends(tmp_path, api)) as server:
        env = {
            "DOCKYARD_CONFIG": str(server.settings.cli_config),
            "HOME": str(tmp_path / "home"),
            "DOCKYARD_PROJECT": "",
            "COLUMNS": "200",
        }
        cli = Cli(server, env)
        shown = cli("offer", "--json")
        assert shown.exit_code == 0, shown.stderr
        assert _kube(shown.stdout) == [
            ("emulated", ["nodes"], "", 0, 0, 16, 64.0, 0.0, False),
            ("emulated", ["nodes"], "H100", 8, 79.6, 95, 1000.0, 0.0, False),
        ]
        assert _kube(cli("offer", "--json", "--gpu", "H100:8").stdout)[0][2:4] == ("H100", 8)
        assert _kube(cli("offer", "--json", "--gpu", "A100").stdout) == []
        assert _kube(cli("offer", "--json", "-b", "slurm").stdout) == []
        assert "GET /api/v1/nodes?limit=500" in api.requests
        api.go_down()
        gone = cli("offer", "--json")
        assert gone.exit_code == 0 and _kube(gone.stdout) == []
        assert "warning: Kubernetes cluster `emulated` (http://127.0.0.1:" in gone.stderr
        assert "cannot reach the API server" in gone.stderr
        assert f"(fix `kubeconfig` at {tmp_path / 'backends.yml'} (projects[0].backends[0]))" in (
            gone.stderr.replace("\n", "")
        )


async def test_the_nodes_are_read_in_pages(api: KubeApi, tmp_path: Path) -> None:
    for index in range(1200):
        api.add_node(f"extra-{index}", cpu="4", memory="8Gi")
    backend = KubernetesBackend(kubeconfig=Kubeconfig(filename=str(api.kubeconfig(tmp_path / "k"))))
    target = kube_client(backend, "backends.yml")
    try:
        offers, note = await read_kube_cluster(target, KNOWN)
        assert note is None and sum(o.nodes for o in offers) == 1204
        pages = [r for r in api.requests if r.startswith("GET /api/v1/nodes")]
        assert pages == [
            "GET /api/v1/nodes?limit=500",
            "GET /api/v1/nodes?limit=500&continue=500",
            "GET /api/v1/nodes?limit=500&continue=1000",
        ]
        offers, note = await read_kube_cluster(target, KNOWN, max_nodes=600)
        assert sum(o.nodes for o in offers) == 600
        assert (
            note == f"Kubernetes cluster `emulated` ({api.url}): only the first 600 nodes counted"
        )
    finally:
        await target.client.close()


async def test_an_answer_past_the_byte_bound_is_cut_off_while_read(
    api: KubeApi, tmp_path: Path
) -> None:
    """The attack: an API server (or a proxy in front) that ignores `limit` and sends one
    enormous page. Its body is counted as it arrives and refused past the bound."""
    for index in range(400):
        api.add_node(f"big-{index}", labels={f"label-{n}": "x" * 50 for n in range(20)})
    backend = KubernetesBackend(kubeconfig=Kubeconfig(filename=str(api.kubeconfig(tmp_path / "k"))))
    target = kube_client(backend, "backends.yml", max_bytes=64 * 1024)
    try:
        with pytest.raises(KubeUnavailable, match="answered more than 65536 bytes"):
            await read_kube_cluster(target, KNOWN)
    finally:
        await target.client.close()


async def test_a_refused_token_and_a_bad_kubeconfig_say_where(api: KubeApi, tmp_path: Path) -> None:
    clusters = load_server_backends(_backends(tmp_path, api, token="stolen"), tmp_path)
    offers, errors = await read_project_kube(clusters, "main", KNOWN)
    assert offers == ()
    (line,) = errors
    assert "Kubernetes cluster `emulated`" in line
    assert "the API server refused (401 Unauthorized)" in line
    assert "stolen" not in line and api.token not in line  # no credential in the message
    text = (
        "projects:\n- name: main\n  backends:\n  - {type: kubernetes, kubeconfig: {data: '[1]'}}\n"
    )
    bad = ServerBackends("/etc/dockyard/backends.yml", parse_backends_config(text, "b"))
    _, (line,) = await read_project_kube(bad, "main", KNOWN)
    assert line.startswith(
        "/etc/dockyard/backends.yml (projects[0].backends[0]): `kubeconfig.data`: not a usable "
        "kubeconfig"
    )


async def test_the_plan_of_a_kubernetes_fleet_says_what_the_cluster_has(
    api: KubeApi, tmp_path: Path
) -> None:
    clusters = load_server_backends(_backends(tmp_path, api), tmp_path)
    fleet = resource("type: fleet\nname: pods\nbackends: [kubernetes]\nnodes: 1\n")
    previewer = Previewer({"pulumi": CloudDouble()}, clusters=clusters)

    async def reason() -> str:
        planned = await plan_commit(
            state(fleet), RepoPolicy(), live(), base=None, previewer=previewer
        )
        (action,) = planned.plan.actions
        return action.reason or ""

    assert (
        "; the cluster has: emulated/nodes: 3 nodes of 8xH100, 95 CPUs, 1024000 MiB (2 ready now); "
        "emulated/nodes: 1 node of 16 CPUs, 65536 MiB (1 ready now)"
    ) in await reason()
    api.go_down()
    gone = await reason()
    assert gone.startswith("blocked: ")
    assert (
        f"; the cluster has: no node; Kubernetes cluster `emulated` ({api.url}): cannot reach"
        in gone
    )
    assert f"(fix `kubeconfig` at {tmp_path / 'backends.yml'} (projects[0].backends[0]))" in gone
