"""The Slurm engine itself on a real one-node cluster: an allocation that waits in the queue.

The cluster's one GPU is held by another job, so the fleet's allocation stays `PENDING`:
`up` says so (`StackBusy`, naming the job and Slurm's reason) and records it; once the GPU
is free, `up` again keeps that same allocation (no second `sbatch`) and returns its
instance; `destroy` cancels it. The engine is driven directly (no server), with the real
SSH pool to the tests' sshd "login node" and the agent's real bundle.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.bundle import Bundle, build_bundle
from agent.deploy import AgentOptions
from agent.tunnel import TunnelPool
from reconciler.core.clusterbackends import ServerBackends
from reconciler.engine.slurmengine import SlurmEngine
from schemas import parse_config
from schemas.serverbackends import parse_backends_config
from stacks.protocol import StackBusy, StackResource
from tests.clusters.test_slurm_fleet import GPU_FLEET, _backends
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


def _state(slurm: RunningSlurm, job_id: str) -> str:
    return slurm.run("sh", "-c", f"squeue -h -t all -j {job_id} -o %T 2>/dev/null; true").strip()


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


async def test_an_allocation_waiting_in_the_queue_is_kept_until_it_runs(
    slurm: RunningSlurm, login: SSHHost, tmp_path: Path
) -> None:
    text = _backends(login)
    clusters = ServerBackends("backends.yml", parse_backends_config(text, "backends.yml"))

    async def bundle() -> Bundle:
        return await asyncio.to_thread(build_bundle, tmp_path / "bundles")

    pool = TunnelPool()
    engine = SlurmEngine(
        clusters,
        pool,
        tmp_path / "data",
        login.identity_file,
        bundle,
        AgentOptions(),
        remote_dir=str(tmp_path / "slurm"),
        wait_s=2.0,
    )
    spec = parse_config(GPU_FLEET.format(name="queued"), "q.yml").normalized()
    resource = StackResource("main", "fleet", "queued", "q.yml", spec)
    blocker = slurm.run(
        "sbatch", "--parsable", "--gres=gpu:h200:1", "--mem=64M", "--chdir=/tmp",
        "--output=/dev/null", "--wrap", "sleep 300",
    ).strip()  # fmt: skip
    try:
        _wait(lambda: _state(slurm, blocker) == "RUNNING", 60, "the job holding the GPU")
        with pytest.raises(StackBusy, match=r"allocations not running yet: job \d+ PENDING \("):
            await engine.up(resource)
        (recorded,) = engine._load(resource)
        assert _state(slurm, recorded["job_id"]) == "PENDING"

        slurm.run("scancel", blocker)
        deadline = time.monotonic() + 120
        outputs: dict[str, Any] | None = None
        while outputs is None:  # the fleets worker retries `up` the same way
            try:
                outputs = await engine.up(resource)
            except StackBusy:
                assert time.monotonic() < deadline, "the queued allocation never ran"
        (instance,) = outputs["instances"]
        assert instance["slurm"]["job_id"] == recorded["job_id"]  # the same, no second sbatch
        assert [a["job_id"] for a in engine._load(resource)] == [recorded["job_id"]]
        assert _state(slurm, recorded["job_id"]) == "RUNNING"

        await engine.destroy(resource)
        _wait(lambda: _state(slurm, recorded["job_id"]) in ("", "CANCELLED"), 60, "the scancel")
        assert not list((tmp_path / "slurm" / "jobs").iterdir())
    finally:
        slurm.run("sh", "-c", f"scancel {blocker}; scancel --name dockyard-main-fleet-queued-0")
        await pool.close()
