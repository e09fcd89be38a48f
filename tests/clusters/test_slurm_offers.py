"""`dockyard offer` lists what a project's Slurm cluster really has: a real server on
loopback whose backends file names a real one-node Slurm (tests/services/slurm.py) behind a
real sshd login node; a cluster that cannot be read is a warning, not a failure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.backendsfile import load_server_backends
from tests.cli.conftest import Cli
from tests.services.missing import skip_or_fail
from tests.services.slurm import SlurmCluster, slurm_cluster
from tests.services.sshd import SSHHost, make_client_key, sshd_unavailable_reason, start_sshd
from tests.web.fakes import FakeController
from tests.web.serving import running_server


@pytest.fixture(scope="module")
def login(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmCluster, SSHHost]]:
    reason = sshd_unavailable_reason()
    if reason:
        skip_or_fail(reason)
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        root = tmp_path_factory.mktemp("login")
        key = make_client_key(root / "client")
        host = start_sshd(root / "sshd", key, extra_config=cluster.login_config())
        yield cluster, host
        host.stop()


def _file(tmp_path: Path, host: SSHHost, closed_port: int) -> Path:
    path = tmp_path / "backends.yml"
    path.write_text(
        "projects:\n- name: main\n  backends:\n  - type: slurm\n    clusters:\n"
        f"    - name: hpc\n      hostname: 127.0.0.1\n      port: {host.port}\n"
        f"      user: root\n      private_key: {{path: {host.identity_file}}}\n"
        "      gpu_partitions: [{gpu: H200, partitions: [gpu]}]\n"
        "      cpu_partitions: [cpu]\n      price: 0.5\n"
        f"    - name: gone\n      hostname: 127.0.0.1\n      port: {closed_port}\n"
        f"      user: root\n      private_key: {{path: {host.identity_file}}}\n"
        "      cpu_partitions: [cpu]\n"
    )
    return path


@pytest.fixture
def cli(tmp_path: Path, login: tuple[SlurmCluster, SSHHost]) -> Iterator[Cli]:
    _, host = login
    closed = start_sshd(tmp_path / "closed", host.identity_file)
    closed.stop()  # a login node that is down: its port refuses
    path = _file(tmp_path, host, closed.port)
    factory = lambda _s, store: FakeController(store)  # noqa: E731
    with running_server(tmp_path, factory, backends_config=path) as server:
        env = {
            "DOCKYARD_CONFIG": str(server.settings.cli_config),
            "HOME": str(tmp_path / "home"),
            "DOCKYARD_PROJECT": "",
            "COLUMNS": "200",
        }
        yield Cli(server, env)


def _slurm(stdout: str) -> list[tuple[object, ...]]:
    return [
        (o["region"], o["zones"], o["gpu"]["name"], o["gpu"]["count"], o["price"], o["spot"])
        for o in json.loads(stdout)
        if o["backend"] == "slurm"
    ]


def test_offer_lists_the_cluster_s_partitions_as_slurm_reports_them(cli: Cli) -> None:
    shown = cli("offer", "--json")
    assert shown.exit_code == 0, shown.stderr
    assert _slurm(shown.stdout) == [  # cheapest first, then by instance type
        ("hpc", ["cpu"], "", 0, 0.5, False),
        ("hpc", ["gpu"], "H200", 1, 0.5, False),
    ]
    assert "warning: Slurm cluster `gone` (login node root@127.0.0.1:" in shown.stderr
    assert "cannot log in" in shown.stderr
    assert _slurm(cli("offer", "--json", "--gpu", "H200").stdout) == [
        ("hpc", ["gpu"], "H200", 1, 0.5, False)
    ]
    assert _slurm(cli("offer", "--json", "--gpu", "H100").stdout) == []
    assert _slurm(cli("offer", "--json", "--spot-policy", "spot").stdout) == []  # no spot
    assert _slurm(cli("offer", "--json", "-b", "aws").stdout) == []
    table = cli("offer")
    assert table.exit_code == 0 and "slurm" in table.stdout and "hpc" in table.stdout


def test_the_offers_follow_the_cluster_s_state(
    cli: Cli, login: tuple[SlurmCluster, SSHHost]
) -> None:
    cluster, _ = login
    cluster.run("scontrol", "update", "partitionname=gpu", "state=down")
    try:
        assert _slurm(cli("offer", "--json").stdout) == [("hpc", ["cpu"], "", 0, 0.5, False)]
    finally:
        cluster.run("scontrol", "update", "partitionname=gpu", "state=up")


async def test_the_plan_of_a_slurm_fleet_allocates_from_a_cluster_that_answers(
    tmp_path: Path, login: tuple[SlurmCluster, SSHHost]
) -> None:
    """Of two clusters, one whose login node is gone: the plan allocates from the other."""
    from agent.deploy import AgentOptions
    from agent.tunnel import TunnelPool
    from reconciler.core.policy import RepoPolicy
    from reconciler.domain.plan import ActionKind
    from reconciler.engine.planning import plan_commit
    from reconciler.engine.previewing import Previewer
    from reconciler.engine.slurmengine import SlurmEngine
    from tests.planning.factories import live, resource, state

    _, host = login
    closed = start_sshd(tmp_path / "closed", host.identity_file)
    closed.stop()
    clusters = load_server_backends(_file(tmp_path, host, closed.port), tmp_path)
    fleet = resource("type: fleet\nname: hpc\nbackends: [slurm]\nnodes: 1\n")

    async def no_bundle() -> Any:
        raise AssertionError("planning installs nothing")

    engine = SlurmEngine(
        clusters, TunnelPool(), tmp_path, tmp_path / "k", no_bundle, AgentOptions()
    )
    previewer = Previewer({"slurm": engine}, clusters=clusters)
    planned = await plan_commit(state(fleet), RepoPolicy(), live(), base=None, previewer=previewer)
    (action,) = planned.plan.actions
    assert action.action is ActionKind.CREATE, action.reason
    assert action.preview is not None
    (step,) = action.preview.steps
    # no resources asked: the partition without GPUs, with Slurm's defaults
    assert step.diffs == ("hpc/cpu", "--partition=cpu", "--nodes=1", "--ntasks=1")
