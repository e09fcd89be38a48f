"""An upgraded server replaces the agent of an SSH host whose build differs from its own, and
the job running there carries on (re-adopted by the new agent, its log whole). Real OpenSSH
host on loopback, real bundles, the real instances worker."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from agent.bundle import Bundle
from agent.client import AgentClient
from agent.deploy import deploy_agent, stop_agent
from agent.protocol import JobSpec, JobStatus
from agent.tunnel import SSHTarget, TunnelPool
from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Fleet, Instance
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.workers import WorkerDeps
from reconciler.engine.workers.instances import InstancesProcessor
from tests.services.sshd import SSHHost
from tests.tunnel.conftest import free_port, unique_id, wait_job

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(180)]


def _older(bundle: Bundle, root: Path) -> Bundle:
    """The same bundle with one agent file changed: an agent of another build."""
    path = root / "older.tar.gz"
    with tarfile.open(bundle.path) as source, tarfile.open(path, "w:gz") as target:
        for member in source.getmembers():
            handle = source.extractfile(member) if member.isfile() else None
            data = handle.read() if handle is not None else None
            if data is not None and member.name.endswith("site/agent/__init__.py"):
                data += b"\n# an older build\n"
                member.size = len(data)
            target.addfile(member, io.BytesIO(data) if data is not None else None)
    return dataclasses.replace(bundle, path=path, bundle_id="1" * 16)


def _build_of(bundle: Bundle) -> str:
    """`agent_build()` of the agent code in `bundle` (the tree here may change meanwhile)."""
    digest = hashlib.sha256()
    with tarfile.open(bundle.path) as tar:
        files = {
            m.name.removeprefix("site/agent/"): m
            for m in tar.getmembers()
            if m.name.startswith("site/agent/") and m.name.endswith(".py")
        }
        for name in sorted(files, key=Path):
            handle = tar.extractfile(files[name])
            assert handle is not None
            digest.update(name.encode() + b"\0" + handle.read())
    return digest.hexdigest()[:16]


async def test_an_ssh_hosts_agent_of_another_build_is_replaced_and_its_job_survives(
    sshd_hosts: list[SSHHost], bundle: Bundle, tmp_path: Path
) -> None:
    host = sshd_hosts[0]
    target = SSHTarget(
        "127.0.0.1", host.port, user=host.user, identity_file=str(host.identity_file)
    )
    remote_dir, port = str(tmp_path / "agent-home"), free_port()
    pool = TunnelPool()
    expected = _build_of(bundle)

    async def deploy(to: SSHTarget) -> int:
        deployed = await deploy_agent(pool, to, bundle, agent_port=port, remote_dir=remote_dir)
        return deployed.agent_port

    await deploy_agent(
        pool, target, _older(bundle, tmp_path), agent_port=port, remote_dir=remote_dir
    )
    client = AgentClient.over_tunnel(pool, target, port)
    try:
        assert (await client.healthcheck()).build != expected
        job = JobSpec(id=unique_id("survivor"), run_name="survivor",
                      commands=["for i in $(seq 1 40); do echo $i; sleep 0.1; done"])  # fmt: skip
        await client.submit(job)
        await wait_job(client, job.id, lambda s: s.status == JobStatus.RUNNING)

        store = Store.from_url(f"sqlite:///{tmp_path / 'd.db'}", migrate=True)
        project = store.get_or_create_project("main")
        now = store.now()
        fleet = store.add(Fleet(project_id=project.id, name="hosts", spec={"type": "fleet"},
                                status="active", created_at=now))  # fmt: skip
        store.add(Instance(fleet_id=fleet.id, project_id=project.id, name="hosts-0",
                                 status="busy", created_at=now, hostname="127.0.0.1",
                                 ssh_port=host.port, ssh_user=host.user, agent_port=port,
                                 backend="ssh", busy_blocks=1,
                                 resources={"identity_file": str(host.identity_file)}))  # fmt: skip
        deps = WorkerDeps(store=store, clock=store.clock, hint=lambda kind: None,
                          agents=AgentDirectory(pool, identity_file=str(host.identity_file)),
                          data_dir=tmp_path, ssh_deployer=deploy,
                          agent_build=expected)  # fmt: skip
        worker = InstancesProcessor(deps)
        [(row_id, token)] = store.leases.claim_due(Instance, owner="t", limit=1, lease_seconds=60)
        assert await worker.process(row_id, token) == 0.0  # replaced: look again at once
        assert (await client.healthcheck()).build == expected
        [event] = [e for e in store.list_events() if "agent replaced" in e.message]
        assert event.target_name == "hosts-0"

        store.leases.release(Instance, row_id, token)
        pid = (Path(remote_dir) / "agent.pid").read_text()
        [(row_id, token)] = store.leases.claim_due(Instance, owner="t", limit=1, lease_seconds=60)
        assert await worker.process(row_id, token) != 0.0  # current now: a plain check
        assert (Path(remote_dir) / "agent.pid").read_text() == pid

        data = b"".join([c.data async for c in client.iter_logs(job.id, poll_interval=0.05)])
        final = await client.job(job.id)
        assert final.status == JobStatus.EXITED and final.exit_status == 0, final
        assert data.decode().split() == [str(i) for i in range(1, 41)]
        store.close()
    finally:
        await client.aclose()
        await stop_agent(pool, target, remote_dir)
        await pool.close()
