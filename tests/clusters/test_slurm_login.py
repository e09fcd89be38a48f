"""Offers read from a real one-node Slurm cluster through a real sshd "login node".

The cluster (tests/services/slurm.py: munged, slurmctld, slurmd; GPUs as GRES on
/dev/null) and the sshd (tests/services/sshd.py, `SetEnv SLURM_CONF` so its sessions reach
the cluster as a login node's do) run on this machine; `read_cluster` logs in with the
backends file's cluster entry and runs Slurm's commands there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.slurm_login import SlurmUnavailable, read_cluster
from schemas.serverbackends import SlurmCluster
from tests.services.missing import skip_or_fail
from tests.services.slurm import SlurmCluster as RunningSlurm
from tests.services.slurm import slurm_cluster
from tests.services.sshd import SSHHost, make_client_key, sshd_unavailable_reason, start_sshd


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSlurm]:
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def login(tmp_path_factory: pytest.TempPathFactory, slurm: RunningSlurm) -> Iterator[SSHHost]:
    reason = sshd_unavailable_reason()
    if reason:
        skip_or_fail(reason)
    root = tmp_path_factory.mktemp("login")
    host = start_sshd(
        root / "sshd", make_client_key(root / "client"), extra_config=slurm.login_config()
    )
    yield host
    host.stop()


def _entry(host: SSHHost, **changes: object) -> SlurmCluster:
    data: dict[str, object] = {
        "name": "hpc",
        "hostname": "127.0.0.1",
        "port": host.port,
        "user": host.user,
        "private_key": {"path": str(host.identity_file)},
        "gpu_partitions": [{"gpu": "H200", "partitions": ["gpu"]}],
        "cpu_partitions": ["cpu"],
    }
    return SlurmCluster.model_validate({**data, **changes})


def _shapes(offers: object) -> list[tuple[object, ...]]:
    assert isinstance(offers, tuple)
    return [
        (o.partition, o.gpu_name, o.gpu_count, o.cpus, o.nodes, o.available, o.price)
        for o in offers
    ]


def test_offers_come_from_the_cluster_through_its_login_node(
    slurm: RunningSlurm, login: SSHHost
) -> None:
    offers = asyncio.run(read_cluster(_entry(login, price=1.25)))
    cpus = int(
        slurm.run("scontrol", "show", "node", slurm.node, "--oneliner")
        .split("CPUTot=")[1]
        .split()[0]
    )
    assert _shapes(offers) == [
        ("gpu", "H200", 1, cpus, 1, 1, 1.25),
        ("cpu", None, 0, cpus, 1, 1, 1.25),
    ]
    assert offers[0].memory_mib == 1000 and offers[0].cluster == "hpc"


def test_a_drained_node_is_offered_as_not_available(slurm: RunningSlurm, login: SSHHost) -> None:
    slurm.run("scontrol", "update", f"nodename={slurm.node}", "state=drain", "reason=dockyard-test")
    try:
        offers = asyncio.run(read_cluster(_entry(login)))
        assert [(o.nodes, o.available) for o in offers] == [(1, 0), (1, 0)]
    finally:
        slurm.run("scontrol", "update", f"nodename={slurm.node}", "state=resume")
        slurm.wait_idle()
    assert [o.available for o in asyncio.run(read_cluster(_entry(login)))] == [1, 1]


def test_the_key_may_be_inline_and_a_wrong_key_is_refused_without_its_text(
    login: SSHHost, tmp_path: Path
) -> None:
    inline = login.identity_file.read_text()
    assert asyncio.run(read_cluster(_entry(login, private_key={"content": inline})))
    stranger = make_client_key(tmp_path / "stranger")
    with pytest.raises(SlurmUnavailable) as caught:
        asyncio.run(read_cluster(_entry(login, private_key={"content": stranger.read_text()})))
    message = str(caught.value)
    assert message.startswith(
        f"Slurm cluster `hpc` (login node root@127.0.0.1:{login.port}): cannot log in"
    )
    assert "PRIVATE KEY" not in message and stranger.read_text().splitlines()[1] not in message


def test_a_login_node_that_cannot_reach_slurm_says_which_command_failed(
    slurm: RunningSlurm, tmp_path: Path
) -> None:
    reason = sshd_unavailable_reason()
    if reason:
        skip_or_fail(reason)
    broken = tmp_path / "slurm.conf"
    broken.write_text("ClusterName=nowhere\n")  # a login node whose Slurm is misconfigured
    host = start_sshd(
        tmp_path / "sshd",
        make_client_key(tmp_path / "c"),
        extra_config=f"SetEnv SLURM_CONF={broken}\n",
    )
    try:
        with pytest.raises(
            SlurmUnavailable,
            match=r"`scontrol show node --oneliner` exited with 1: .*No SlurmctldHost defined",
        ):
            asyncio.run(read_cluster(_entry(host)))
    finally:
        host.stop()


def test_the_cluster_schedules_a_gpu_gres_job(slurm: RunningSlurm, tmp_path: Path) -> None:
    """What later slices rely on: the placeholder GRES is scheduled as a GPU."""
    out = tmp_path / "job.out"
    slurm.run(
        "sbatch",
        "--gres=gpu:h200:1",
        "-p",
        "gpu",
        "-o",
        str(out),
        "--wrap",
        "echo CVD=$CUDA_VISIBLE_DEVICES",
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "CVD=" not in (out.read_text() if out.exists() else ""):
        time.sleep(0.1)
    assert out.read_text().strip() == "CVD=0"


def test_the_login_node_is_reached_through_proxy_jump(login: SSHHost, tmp_path: Path) -> None:
    jump = start_sshd(tmp_path / "jump", login.identity_file)
    try:
        entry = _entry(login, proxy_jump={"hostname": "127.0.0.1", "port": jump.port})
        assert [o.partition for o in asyncio.run(read_cluster(entry))] == ["gpu", "cpu"]
    finally:
        jump.stop()
    # the jump host is really on the path: with it gone, the login node is not reached
    with pytest.raises(SlurmUnavailable, match="cannot log in"):
        asyncio.run(read_cluster(entry, limit_s=5))


def test_a_login_node_printing_without_end_is_cut_off_at_the_bound(tmp_path: Path) -> None:
    """The attack: a hostile or broken login node's `scontrol` never stops printing. The
    server keeps at most `max_output` bytes of it and closes the channel, instead of
    collecting it all (memory) until the time limit."""
    reason = sshd_unavailable_reason()
    if reason:
        skip_or_fail(reason)
    host = start_sshd(  # whatever the server runs there, the node answers without end
        tmp_path / "sshd",
        make_client_key(tmp_path / "c"),
        extra_config="ForceCommand exec yes NodeName=n1\n",
    )
    try:
        with pytest.raises(SlurmUnavailable, match=r"printed more than 1048576 bytes"):
            asyncio.run(read_cluster(_entry(host), max_output=1024 * 1024, limit_s=60))
    finally:
        host.stop()
