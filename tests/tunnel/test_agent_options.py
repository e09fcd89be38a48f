"""The server's options for the agents it deploys to SSH hosts (`--ssh-job-isolation` …) reach
the agent's command line, and a changed option replaces the agent on its host (the
instances worker, once per server process) while its running job carries on. Real OpenSSH
host on loopback, real bundle, the real instances worker and the server's own deployer."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from agent.bundle import Bundle
from agent.client import AgentClient, AgentError
from agent.deploy import AgentOptions, deploy_agent, stop_agent
from agent.protocol import ExecutorKind, JobSpec, JobStatus
from agent.tunnel import AgentUnreachable, SSHTarget, TunnelPool
from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Fleet, Instance
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.controller import ssh_agent_options
from reconciler.engine.workers import WorkerDeps
from reconciler.engine.workers.instances import InstancesProcessor
from reconciler.settings import Settings
from tests.services.sshd import SSHHost
from tests.tunnel.conftest import free_port, unique_id, wait_job

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(180)]

NO_IMAGE = "127.0.0.1:1/dockyard-no-such-image:latest"  # never pulled: nothing listens


def _cmdline(remote_dir: str) -> list[str]:
    """The running agent's argv (the sshd host shares this machine's /proc)."""
    pid = (Path(remote_dir) / "agent.pid").read_text().strip()
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def _instance_row(store: Store, host: SSHHost, port: int) -> str:
    project = store.get_or_create_project("main")
    now = store.now()
    fleet = store.add(Fleet(project_id=project.id, name="hosts", spec={"type": "fleet"},
                            status="active", created_at=now))  # fmt: skip
    row = store.add(Instance(fleet_id=fleet.id, project_id=project.id, name="hosts-0",
                             status="busy", created_at=now, hostname="127.0.0.1",
                             ssh_port=host.port, ssh_user=host.user, agent_port=port,
                             backend="ssh", busy_blocks=1,
                             resources={"identity_file": str(host.identity_file)}))  # fmt: skip
    return str(row.id)


async def wait_healthy(client: AgentClient) -> None:
    async with asyncio.timeout(30):
        while True:
            try:
                await client.healthcheck()
                return
            except (AgentUnreachable, AgentError):
                await asyncio.sleep(0.1)


async def _check(worker: InstancesProcessor, store: Store) -> float | None:
    [(row_id, token)] = store.leases.claim_due(Instance, owner="t", limit=1, lease_seconds=60)
    try:
        return await worker.process(row_id, token)
    finally:
        store.leases.release(Instance, row_id, token)


async def test_a_changed_ssh_agent_option_replaces_the_agent_and_its_job_survives(
    sshd_hosts: list[SSHHost], bundle: Bundle, tmp_path: Path
) -> None:
    host = sshd_hosts[0]
    target = SSHTarget(
        "127.0.0.1", host.port, user=host.user, identity_file=str(host.identity_file)
    )
    remote_dir, port = str(tmp_path / "agent-home"), free_port()
    pool = TunnelPool()
    env = {
        "DOCKYARD_SSH_JOB_ISOLATION": "container",
        "DOCKYARD_SSH_DEFAULT_IMAGE": NO_IMAGE,
        "DOCKYARD_SSH_JOB_USER": "self",
    }
    wanted = ssh_agent_options(Settings.from_env(env))

    async def refresh(to: SSHTarget) -> bool:
        deployed = await deploy_agent(
            pool, to, bundle, agent_port=port, remote_dir=remote_dir, options=wanted
        )
        return not deployed.reused

    async def deploy(to: SSHTarget) -> int:
        return port

    # deployed by the server before the operator changed its settings: process jobs
    before = AgentOptions(job_isolation="process", job_user="self")
    await deploy_agent(pool, target, bundle, agent_port=port, remote_dir=remote_dir, options=before)
    client = AgentClient.over_tunnel(pool, target, port)
    store = Store.from_url(f"sqlite:///{tmp_path / 'd.db'}", migrate=True)
    try:
        argv = _cmdline(remote_dir)
        assert argv[argv.index("--job-isolation") + 1] == "process"
        printing = "for i in $(seq 1 40); do echo $i; sleep 0.1; done"
        survivor = JobSpec(id=unique_id("survivor"), run_name="survivor", commands=[printing])
        await client.submit(survivor)
        state = await wait_job(client, survivor.id, lambda s: s.status == JobStatus.RUNNING)
        assert state.executor == ExecutorKind.PROCESS and not state.notice, state

        row = store.get(Instance, _instance_row(store, host, port))
        assert row is not None
        deps = WorkerDeps(store=store, clock=store.clock, hint=lambda kind: None,
                          agents=AgentDirectory(pool, identity_file=str(host.identity_file)),
                          data_dir=tmp_path, ssh_deployer=deploy,
                          ssh_refresher=refresh)  # fmt: skip
        worker = InstancesProcessor(deps)
        pid = (Path(remote_dir) / "agent.pid").read_text()
        assert await _check(worker, store) == 0.0, "replaced: look again at once"
        assert (Path(remote_dir) / "agent.pid").read_text() != pid
        argv = _cmdline(remote_dir)
        assert argv[argv.index("--job-isolation") + 1] == "container"
        assert argv[argv.index("--default-image") + 1] == NO_IMAGE
        [event] = [e for e in store.list_events() if "agent replaced" in e.message]
        assert event.target_name == "hosts-0" and "options" in event.message

        # the new agent runs no job without an image as a process on the host
        plain = JobSpec(id=unique_id("plain"), run_name="plain", commands=["echo hi"])
        try:
            await client.submit(plain)
        except AgentError as exc:
            assert exc.status_code == 409, exc  # no Docker engine on the host
        else:
            state = await wait_job(client, plain.id, lambda s: s.status.is_finished())
            assert state.status == JobStatus.FAILED and NO_IMAGE in state.message, state

        # the job started before the replacement ran on, re-adopted, its log whole
        data = b"".join([c.data async for c in client.iter_logs(survivor.id, poll_interval=0.05)])
        final = await client.job(survivor.id)
        assert final.status == JobStatus.EXITED and final.exit_status == 0, final
        assert data.decode().split() == [str(i) for i in range(1, 41)]

        # checked once per server process: a second pass leaves the agent alone ...
        pid = (Path(remote_dir) / "agent.pid").read_text()
        assert await _check(worker, store) != 0.0
        # ... and so does a restarted server with the same options (it only compares)
        assert await _check(InstancesProcessor(deps), store) == 0.0
        assert (Path(remote_dir) / "agent.pid").read_text() == pid
        assert len([e for e in store.list_events() if "agent replaced" in e.message]) == 1

        # a replacement that fails is rolled back and stops the rollout: the next host is
        # left alone
        async def failing(to: SSHTarget) -> bool:
            other = AgentOptions(job_isolation="process", job_user="self")
            await deploy_agent(pool, to, bundle, agent_port=port, remote_dir=remote_dir,
                               options=other, start_timeout=0.0)  # fmt: skip
            return True

        second = Instance(fleet_id=row.fleet_id, project_id=row.project_id, name="hosts-1",
                          status="idle", created_at=store.now(), hostname="127.0.0.1",
                          ssh_port=host.port, ssh_user=host.user, agent_port=port,
                          backend="ssh", resources=row.resources)  # fmt: skip
        store.add(second)
        breaking = InstancesProcessor(dataclasses.replace(deps, ssh_refresher=failing))
        assert (await _check(breaking, store) or 0) > 0, "failed: tried again later"
        [first] = [e for e in store.list_events() if "not applied" in e.message]
        assert "no healthcheck answer" in first.message, first.message
        assert "runs again with its previous options" in first.message, first.message
        await wait_healthy(client)  # rolled back: the host keeps an agent, as it was
        argv = _cmdline(remote_dir)
        assert argv[argv.index("--job-isolation") + 1] == "container"
        assert argv[argv.index("--default-image") + 1] == NO_IMAGE
        names = {first.target_name}
        for _ in range(4):  # the other host: left alone, saying why
            await wait_healthy(client)
            await _check(breaking, store)
            events = [e for e in store.list_events() if "they failed on" in e.message]
            names |= {e.target_name for e in events}
            if names == {"hosts-0", "hosts-1"}:
                break
        assert names == {"hosts-0", "hosts-1"}, names
        assert f"they failed on instance {first.target_name}" in events[-1].message
        assert len([e for e in store.list_events() if "no healthcheck" in e.message]) == 1
    finally:
        store.close()
        await client.aclose()
        await stop_agent(pool, target, remote_dir)
        await pool.close()


async def test_an_ssh_hosts_agent_gets_the_servers_job_user_list_and_holds_it(
    sshd_hosts: list[SSHHost], bundle: Bundle, tmp_path: Path
) -> None:
    """`--ssh-allow-job-users` and `--ssh-unsandboxed-process-jobs` reach a deployed
    agent's command line, and the agent refuses a process job's `user:` it does not list."""
    host = sshd_hosts[0]
    target = SSHTarget(
        "127.0.0.1", host.port, user=host.user, identity_file=str(host.identity_file)
    )
    remote_dir, port = str(tmp_path / "agent-home"), free_port()
    env = {
        "DOCKYARD_SSH_JOB_ISOLATION": "process",
        "DOCKYARD_SSH_ALLOW_JOB_USERS": "nobody",
        "DOCKYARD_SSH_UNSANDBOXED_PROCESS_JOBS": "true",
    }
    options = ssh_agent_options(Settings.from_env(env))
    pool = TunnelPool()
    await deploy_agent(pool, target, bundle, agent_port=port, remote_dir=remote_dir,
                       options=options)  # fmt: skip
    client = AgentClient.over_tunnel(pool, target, port)
    try:
        argv = _cmdline(remote_dir)
        assert argv[argv.index("--allow-job-user") + 1] == "nobody"
        assert argv.count("--allow-job-user") == 1
        assert "--unsandboxed-process-jobs" in argv
        spec = JobSpec(id=unique_id("other"), run_name="other", commands=["id"], user="daemon")
        with pytest.raises(AgentError) as refused:
            await client.submit(spec)
        assert refused.value.status_code == 422, refused.value
        assert "--allow-job-user; listed: nobody" in str(refused.value), refused.value
    finally:
        await client.aclose()
        await stop_agent(pool, target, remote_dir)
        await pool.close()
