"""Users on the agent's SSH server: ``ssh <run>`` into the job, forwarding to job ports."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import httpx
import pytest

from agent.client import AgentClient
from agent.protocol import JobSpec, JobStatus, PortRequest
from agent.ssh.server import user_key_line
from agent.ssh.transport import SSHTransport
from agent.tunnel import AgentUnreachable, TunnelPool, UnreachableKind
from tests.services.missing import needs_ssh_client
from tests.tunnel.conftest import AgentOverSSH, free_port, unique_id, wait_job


@dataclasses.dataclass(frozen=True)
class RunningJob:
    agent: AgentOverSSH
    port: int
    job_id: str


@pytest.fixture
async def running_job(agent_over_ssh: AgentOverSSH) -> AsyncIterator[RunningJob]:
    """A running process job `web` (run `web`) serving HTTP on a job port."""
    port = free_port()
    pool = TunnelPool()
    client = AgentClient.over_tunnel(pool, agent_over_ssh.target(), agent_over_ssh.http_port)
    spec = JobSpec(
        id=unique_id("web"),
        run_name="web",
        env={"FOO": "bar"},
        ports=[PortRequest(container_port=port)],
        commands=[f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1"],
    )
    await client.submit(spec)
    await wait_job(client, spec.id, lambda s: s.status == JobStatus.RUNNING)
    yield RunningJob(agent_over_ssh, port, spec.id)
    await client.stop(spec.id, force=True)
    await client.aclose()
    await pool.close()


def connect_as(agent: AgentOverSSH, user: str) -> asyncssh.connection._ConnectionContext:  # type: ignore[name-defined]
    return asyncssh.connect(
        "127.0.0.1",
        agent.ssh_port,
        username=user,
        client_keys=[str(agent.keys.private)],
        known_hosts=None,
        config=None,
    )


async def test_ssh_run_gets_the_job_environment(running_job: RunningJob) -> None:
    agent = running_job.agent
    async with connect_as(agent, "web") as conn:
        result = await conn.run("pwd; echo $FOO $DOCKYARD_RUN_NAME; exit 3")
    lines = str(result.stdout).splitlines()
    assert lines[0].endswith(f"/jobs/{running_job.job_id}/work")
    assert lines[1] == "bar web"
    assert result.exit_status == 3
    async with connect_as(agent, running_job.job_id) as conn:  # the job id works as well
        assert (await conn.run("echo $FOO", check=True)).stdout == "bar\n"


async def test_interactive_session_has_a_terminal(running_job: RunningJob) -> None:
    agent = running_job.agent
    async with connect_as(agent, "web") as conn:
        process = await conn.create_process(term_type="xterm", term_size=(100, 40), encoding=None)
        process.stdin.write(b"tty; stty size; echo $FOO; exit 0\n")
        async with asyncio.timeout(20):
            output = await process.stdout.read()
            await process.wait()
    assert b"/dev/pts/" in output
    assert b"40 100" in output
    assert b"bar" in output


async def test_unknown_run_is_refused_with_a_reason(agent_over_ssh: AgentOverSSH) -> None:
    async with connect_as(agent_over_ssh, "nosuchrun") as conn:
        result = await conn.run("true")
    assert result.exit_status == 1
    assert "no job named 'nosuchrun'" in str(result.stderr)


async def test_forwarding_reaches_job_ports_only(running_job: RunningJob) -> None:
    agent, port = running_job.agent, running_job.port
    pool = TunnelPool()
    target = agent.target()

    async def open_stream(host: str, p: int):  # type: ignore[no-untyped-def]
        return await pool.open_stream(target, host, p)

    async with httpx.AsyncClient(transport=SSHTransport(open_stream)) as http:
        async with asyncio.timeout(20):
            while True:  # the job runs before its server listens
                try:
                    response = await http.get(f"http://127.0.0.1:{port}/")
                    break
                except AgentUnreachable as exc:
                    assert exc.kind is UnreachableKind.channel_refused
                    await asyncio.sleep(0.05)
    assert response.status_code == 200
    with pytest.raises(AgentUnreachable) as info:
        await pool.open_stream(target, "127.0.0.1", free_port())
    assert "not allowed" in info.value.detail
    await pool.close()


@needs_ssh_client()
async def test_openssh_client_can_ssh_into_the_run(running_job: RunningJob) -> None:
    agent = running_job.agent
    process = await asyncio.create_subprocess_exec(
        "ssh",
        "-i",
        str(agent.keys.private),
        "-p",
        str(agent.ssh_port),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "BatchMode=yes",
        "web@127.0.0.1",
        "echo $FOO from $(basename $PWD)",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(20):
        stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr
    assert stdout == b"bar from work\n"


async def test_user_keys_get_sessions_and_job_ports_but_not_the_agent_api(
    running_job: RunningJob, tmp_path: Path
) -> None:
    agent, port = running_job.agent, running_job.port
    user_key = asyncssh.generate_private_key("ssh-ed25519")
    user_key.write_private_key(str(tmp_path / "user"))
    public = user_key.export_public_key().decode()
    authorized = agent.keys.authorized_keys
    authorized.write_text(authorized.read_text() + user_key_line(public) + "\n")
    user = dataclasses.replace(agent.target(user="web"), identity_file=str(tmp_path / "user"))
    pool = TunnelPool()
    conn = await pool.connection(user)
    assert (await conn.run("echo $FOO", check=True)).stdout == "bar\n"
    with pytest.raises(AgentUnreachable) as info:
        await pool.open_stream(user, "127.0.0.1", agent.http_port)
    assert info.value.kind is UnreachableKind.channel_refused
    async with asyncio.timeout(20):
        while True:  # the job runs before its server listens
            try:
                _, writer = await pool.open_stream(user, "127.0.0.1", port)
                writer.close()
                break
            except AgentUnreachable:
                await asyncio.sleep(0.05)
    await pool.close()
