"""AgentClient against the real agent, reached through its embedded SSH server."""

from __future__ import annotations

import pytest

from agent.client import AgentClient, AgentError, AgentVersionError
from agent.protocol import ErrorCode, JobSpec, JobStatus
from agent.tunnel import AgentUnreachable, TunnelPool, UnreachableKind
from tests.tunnel.conftest import AgentOverSSH, unique_id


async def test_healthcheck_version_and_host(agent_over_ssh: AgentOverSSH) -> None:
    pool = TunnelPool()
    async with AgentClient.over_tunnel(
        pool, agent_over_ssh.target(), agent_over_ssh.http_port
    ) as c:
        health = await c.check_version()
        assert health.service == "dockyard-agent"
        host = await c.host_info()
        assert host.cpus >= 1
        assert "process" in host.executors
        with pytest.raises(AgentVersionError) as info:
            await c.check_version(expected="99.0.0")
        assert info.value.found.version == health.version
    await pool.close()


async def test_job_logs_arrive_once_and_in_order(agent_over_ssh: AgentOverSSH) -> None:
    pool = TunnelPool()
    async with AgentClient.over_tunnel(
        pool, agent_over_ssh.target(), agent_over_ssh.http_port
    ) as c:
        spec = JobSpec(
            id=unique_id("count"),
            run_name="count",
            commands=["for i in $(seq 1 500); do echo line $i; done"],
        )
        state = await c.submit(spec)
        assert (await c.submit(spec)).id == state.id  # idempotent
        data = b""
        offsets = []
        async for chunk in c.iter_logs(spec.id, limit=777, poll_interval=0.05):
            assert chunk.offset == len(data)
            offsets.append(chunk.next_offset)
            data += chunk.data
        assert data.decode().splitlines() == [f"line {i}" for i in range(1, 501)]
        assert len(offsets) > 1
        final = await c.job(spec.id)
        assert final.status == JobStatus.EXITED and final.exit_status == 0
        assert [j.id for j in await c.jobs()] == [spec.id]
    await pool.close()


async def test_agent_errors_are_typed(agent_over_ssh: AgentOverSSH) -> None:
    pool = TunnelPool()
    async with AgentClient.over_tunnel(
        pool, agent_over_ssh.target(), agent_over_ssh.http_port
    ) as c:
        with pytest.raises(AgentError) as info:
            await c.job("nope")
        assert info.value.code == ErrorCode.NOT_FOUND
        assert info.value.status_code == 404
        with pytest.raises(AgentError) as info:
            await c.submit(
                JobSpec(id=unique_id("gpu"), run_name="gpu", commands=["true"], gpus=[7])
            )
        assert info.value.code == ErrorCode.NO_CAPACITY
        assert "GPU" in info.value.message
    await pool.close()


async def test_refused_channel_is_unreachable_not_an_agent_error(
    agent_over_ssh: AgentOverSSH,
) -> None:
    pool = TunnelPool()
    target = agent_over_ssh.target(port=agent_over_ssh.ssh_port)
    async with AgentClient.over_tunnel(pool, target, agent_over_ssh.http_port + 1) as c:
        with pytest.raises(AgentUnreachable) as info:
            await c.healthcheck()
        assert info.value.kind is UnreachableKind.channel_refused
    await pool.close()
