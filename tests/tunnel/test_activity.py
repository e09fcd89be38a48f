"""Users' activity per job on the agent's SSH server: sessions and watched forwards count."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncssh
import pytest

from agent.client import AgentClient
from agent.protocol import JobSpec, JobState, JobStatus, PortRequest
from agent.tunnel import TunnelPool
from tests.tunnel.conftest import AgentOverSSH, free_port, unique_id, wait_job


@pytest.fixture
async def client(agent_over_ssh: AgentOverSSH) -> AsyncIterator[AgentClient]:
    pool = TunnelPool()
    agent_client = AgentClient.over_tunnel(pool, agent_over_ssh.target(), agent_over_ssh.http_port)
    yield agent_client
    await agent_client.aclose()
    await pool.close()


async def _web_job(client: AgentClient, *, watch: bool) -> tuple[str, int]:
    port = free_port()
    spec = JobSpec(
        id=unique_id("dev"),
        run_name=unique_id("run"),
        ports=[PortRequest(container_port=port)],
        commands=[f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1"],
        watch_connections=watch,
    )
    await client.submit(spec)
    await wait_job(client, spec.id, lambda s: s.status == JobStatus.RUNNING)
    return spec.id, port


def _connect(agent: AgentOverSSH, user: str = "dockyard") -> Any:
    return asyncssh.connect(
        "127.0.0.1",
        agent.ssh_port,
        username=user,
        client_keys=[str(agent.keys.private)],
        known_hosts=None,
        config=None,
    )


def _connections(n: int) -> Callable[[JobState], bool]:
    return lambda state: state.connections == n


async def _get_through(conn: asyncssh.SSHClientConnection, port: int) -> bytes:
    """An HTTP request through a forwarded channel, answered in full (b"" if refused: the
    job runs before its server listens)."""
    try:
        reader, writer = await conn.open_connection("127.0.0.1", port)
    except asyncssh.ChannelOpenError:
        return b""
    writer.write(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    writer.write_eof()
    data = await reader.read()
    writer.close()
    return data if isinstance(data, bytes) else data.encode()


async def test_watched_forwards_and_sessions_count_until_they_close(
    agent_over_ssh: AgentOverSSH, client: AgentClient
) -> None:
    job_id, port = await _web_job(client, watch=True)
    state = await client.job(job_id)
    assert state.connections == 0 and state.no_connections_secs is not None
    async with _connect(agent_over_ssh) as conn:
        while not (await _get_through(conn, port)).startswith(b"HTTP/1.0 200"):
            pass
        _reader, writer = await conn.open_connection("127.0.0.1", port)  # held open
        state = await wait_job(client, job_id, _connections(1))
        assert state.no_connections_secs == 0.0
        writer.close()
        state = await wait_job(client, job_id, _connections(0))
        assert state.last_connection_at is not None
    async with _connect(agent_over_ssh, user=job_id) as conn:
        session = await conn.create_process("cat")
        await wait_job(client, job_id, _connections(1))
        session.stdin.write_eof()
        await session.wait()
    await wait_job(client, job_id, _connections(0))
    await client.stop(job_id, force=True)


async def test_forwards_to_unwatched_jobs_do_not_count(
    agent_over_ssh: AgentOverSSH, client: AgentClient
) -> None:
    job_id, port = await _web_job(client, watch=False)
    async with _connect(agent_over_ssh) as conn:
        while not (await _get_through(conn, port)).startswith(b"HTTP/1.0 200"):
            pass
        _reader, writer = await conn.open_connection("127.0.0.1", port)
        assert (await client.job(job_id)).connections == 0
        writer.close()
    await client.stop(job_id, force=True)
