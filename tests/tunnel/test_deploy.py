"""SSH fleets: deploying the agent to OpenSSH hosts on loopback, and how deploys fail.

The two sshd hosts share this machine's filesystem, so each gets its own agent directory
and agent port (on real hosts both default to ``~/.dockyard/agent`` and 10998).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from agent.bundle import Bundle
from agent.client import AgentClient
from agent.deploy import DeployedAgent, DeployError, DeployFailure, deploy_agent, stop_agent
from agent.protocol import JobSpec, JobStatus
from agent.server.jobaccount import WORK_ROOT
from agent.tunnel import SSHTarget, TunnelPool
from tests.services.missing import skip_or_fail
from tests.services.sshd import SSHHost, make_client_key, start_sshd
from tests.tunnel.conftest import free_port, unique_id, wait_job

pytestmark = [pytest.mark.sshd, pytest.mark.asyncio(loop_scope="module")]


def target_of(host: SSHHost) -> SSHTarget:
    return SSHTarget("127.0.0.1", host.port, user=host.user, identity_file=str(host.identity_file))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[TunnelPool]:
    pool = TunnelPool()
    yield pool
    await pool.close()


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fleet")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fleet(
    sshd_hosts: list[SSHHost], bundle: Bundle, pool: TunnelPool, fleet_dir: Path
) -> AsyncIterator[list[DeployedAgent]]:
    """The agent deployed to both hosts at once (once for this module)."""
    dirs = [str(fleet_dir / f"host{i}") for i in range(len(sshd_hosts))]
    deployed = await asyncio.gather(
        *(
            deploy_agent(pool, target_of(h), bundle, agent_port=free_port(), remote_dir=d)
            for h, d in zip(sshd_hosts, dirs, strict=True)
        )
    )
    yield list(deployed)
    await asyncio.gather(
        *(stop_agent(pool, a.target, d) for a, d in zip(deployed, dirs, strict=True))
    )


async def test_fleet_of_two_hosts_runs_jobs(fleet: list[DeployedAgent], pool: TunnelPool) -> None:
    for number, agent in enumerate(fleet):
        assert not agent.reused
        assert "/.venv/" not in agent.python  # a Python of the host, not the server venv
        async with AgentClient.over_tunnel(pool, agent.target, agent.agent_port) as client:
            await client.check_version()
            job = JobSpec(
                id=unique_id(f"hello{number}"),
                run_name="hello",
                commands=["echo hi from $PWD as $(id -u)"],
            )
            await client.submit(job)
            data = b"".join([c.data async for c in client.iter_logs(job.id, poll_interval=0.05)])
            # the agent runs as root here: the job in its sandbox as a uid of its own, in
            # its own dir outside the agent's data dir (docs/security.md, "Jobs and the host")
            said = data.decode().rstrip()
            assert said.startswith(f"hi from {WORK_ROOT}/"), said
            place, uid = said.rsplit(" as ", 1)
            assert place.endswith(f"/{job.id}") and int(uid) >= 2_000_000_000, said


async def test_deploy_is_idempotent_and_redeploys_a_changed_bundle(
    fleet: list[DeployedAgent], pool: TunnelPool, bundle: Bundle, fleet_dir: Path
) -> None:
    agent = fleet[0]
    remote_dir = str(fleet_dir / "host0")
    pid_file = Path(remote_dir) / "agent.pid"
    first_pid = pid_file.read_text().strip()
    client = AgentClient.over_tunnel(pool, agent.target, agent.agent_port)
    printing = "for i in $(seq 1 40); do echo $i; sleep 0.1; done"
    survivor = JobSpec(id=unique_id("survivor"), run_name="survivor", commands=[printing])
    await client.submit(survivor)
    await wait_job(client, survivor.id, lambda s: s.status == JobStatus.RUNNING)
    again = await deploy_agent(
        pool, agent.target, bundle, agent_port=agent.agent_port, remote_dir=remote_dir
    )
    assert again.reused and pid_file.read_text().strip() == first_pid

    changed = dataclasses.replace(bundle, bundle_id="0" * 16)
    redeployed = await deploy_agent(
        pool, agent.target, changed, agent_port=agent.agent_port, remote_dir=remote_dir
    )
    assert not redeployed.reused
    assert pid_file.read_text().strip() != first_pid
    assert os.readlink(Path(remote_dir) / "current") == f"bundle-{'0' * 16}"
    bundles = sorted(name for name in os.listdir(remote_dir) if name.startswith("bundle-"))
    assert bundles == ["bundle-" + "0" * 16]

    # the job ran on across the agent's replacement and its log is whole
    data = b"".join([c.data async for c in client.iter_logs(survivor.id, poll_interval=0.05)])
    final = await client.job(survivor.id)
    assert final.status == JobStatus.EXITED and final.exit_status == 0, final
    assert data.decode().split() == [str(i) for i in range(1, 41)]
    await client.aclose()


async def test_refused_key_says_auth_refused(
    sshd_hosts: list[SSHHost], bundle: Bundle, pool: TunnelPool, tmp_path: Path
) -> None:
    stranger = make_client_key(tmp_path / "stranger")
    target = dataclasses.replace(target_of(sshd_hosts[0]), identity_file=str(stranger))
    with pytest.raises(DeployError) as info:
        await deploy_agent(
            pool, target, bundle, agent_port=free_port(), remote_dir=str(tmp_path / "x")
        )
    assert info.value.failure is DeployFailure.auth_refused
    assert str(target) in str(info.value) and "authorized_keys" in str(info.value)


@pytest.fixture
def host_without_python(sshd_hosts: list[SSHHost], tmp_path: Path) -> Iterator[SSHHost]:
    """A third sshd whose sessions have a PATH with the usual tools but no Python."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("sh", "mkdir", "readlink", "cat", "kill", "df", "awk", "echo"):
        found = shutil.which(tool)
        if found:
            (tools / tool).symlink_to(found)
    host = start_sshd(
        tmp_path / "nopython", sshd_hosts[0].identity_file, extra_config=f"SetEnv PATH={tools}\n"
    )
    yield host
    host.stop()


async def test_host_without_python_says_no_python(
    host_without_python: SSHHost, bundle: Bundle, pool: TunnelPool, tmp_path: Path
) -> None:
    with pytest.raises(DeployError) as info:
        await deploy_agent(
            pool,
            target_of(host_without_python),
            bundle,
            agent_port=free_port(),
            remote_dir=str(tmp_path / "a"),
        )
    assert info.value.failure is DeployFailure.no_python
    assert "Python ≥ 3.11" in str(info.value)


async def test_taken_port_says_port_in_use(
    sshd_hosts: list[SSHHost], bundle: Bundle, pool: TunnelPool, tmp_path: Path
) -> None:
    async def not_an_agent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(not_an_agent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(DeployError) as info:
            await deploy_agent(
                pool, target_of(sshd_hosts[1]), bundle, agent_port=port, remote_dir=str(tmp_path)
            )
    finally:
        server.close()
    assert info.value.failure is DeployFailure.port_in_use
    assert f"127.0.0.1:{port}" in str(info.value)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        skip_or_fail(f"cannot mount a small tmpfs (needs root): {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_full_disk_says_disk_full(
    sshd_hosts: list[SSHHost], bundle: Bundle, pool: TunnelPool, tiny_disk: Path
) -> None:
    with pytest.raises(DeployError) as info:
        await deploy_agent(
            pool,
            target_of(sshd_hosts[0]),
            bundle,
            agent_port=free_port(),
            remote_dir=str(tiny_disk / "agent"),
        )
    assert info.value.failure is DeployFailure.disk_full
    assert "MiB free" in str(info.value)


async def test_proxy_jump_reaches_a_host_through_another(
    sshd_hosts: list[SSHHost], pool: TunnelPool
) -> None:
    jump = target_of(sshd_hosts[0])
    target = dataclasses.replace(target_of(sshd_hosts[1]), proxy_jump=jump)
    conn = await pool.connection(target)
    result = await conn.run("echo $SSH_CONNECTION", check=True)
    assert str(result.stdout).split()[3] == str(sshd_hosts[1].port)
    assert pool.state(jump).connected  # the jump connection is pooled too
    assert str(target).endswith(f"via root@127.0.0.1:{sshd_hosts[0].port}")


async def test_a_host_without_sftp_gets_the_bundle_through_cat(
    sshd_hosts: list[SSHHost], bundle: Bundle, pool: TunnelPool, tmp_path: Path
) -> None:
    host = start_sshd(tmp_path / "nosftp", sshd_hosts[0].identity_file, sftp=False)
    target, remote_dir = target_of(host), str(tmp_path / "agent")
    try:
        deployed = await deploy_agent(
            pool, target, bundle, agent_port=free_port(), remote_dir=remote_dir
        )
        async with AgentClient.over_tunnel(pool, target, deployed.agent_port) as client:
            await client.check_version()
    finally:
        await stop_agent(pool, target, remote_dir)
        host.stop()


async def test_ssh_run_on_an_ssh_fleet_host_goes_through_its_sshd(
    sshd_hosts: list[SSHHost], bundle: Bundle, pool: TunnelPool, tmp_path: Path
) -> None:
    host = target_of(sshd_hosts[1])
    remote_dir = str(tmp_path / "agent")
    deployed = await deploy_agent(
        pool, host, bundle, agent_port=free_port(), remote_dir=remote_dir, session_port=free_port()
    )
    assert deployed.session_port is not None
    client = AgentClient.over_tunnel(pool, host, deployed.agent_port)
    job = JobSpec(
        id=unique_id("shell"), run_name="shell", env={"FOO": "bar"}, commands=["sleep 60"]
    )
    try:
        await client.submit(job)
        await wait_job(client, job.id, lambda s: s.status == JobStatus.RUNNING)
        # what `dockyard attach` writes: Host shell / Port <session> / ProxyJump <host>
        user = SSHTarget(
            "127.0.0.1",
            deployed.session_port,
            user="shell",
            identity_file=host.identity_file,
            proxy_jump=host,
        )
        conn = await pool.connection(user)
        result = await conn.run("echo $FOO; basename $PWD; id -u", check=True)
        foo, where, uid = str(result.stdout).split()
        assert (foo, where) == ("bar", job.id), result.stdout
        assert int(uid) >= 2_000_000_000, "the job's own uid, in its sandbox"
    finally:
        await client.stop(job.id, force=True)
        await client.aclose()
        await stop_agent(pool, host, remote_dir)
