"""Faults on the tunnel: a 30 s outage while a job prints loses and duplicates nothing.

The network between the server and the agent is a `CuttableProxy`. Time is a fake clock
that the client's sleeps advance, sixty times faster than the real sleeps they make, so
the pool's backoff sees 30 s pass in half a real second. The outage ends only when 30 fake
seconds have passed *and* the job has written more lines meanwhile (read from its log file
on disk), so the job provably kept running.

A silently dead route (bytes swallowed, nothing closed) is noticed by SSH keepalives.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from agent.client import AgentClient
from agent.protocol import JobSpec, JobStatus
from agent.tunnel import (
    AgentUnreachable,
    BackoffPolicy,
    SSHOptions,
    TunnelPool,
    UnreachableKind,
    ssh_connector,
)
from tests.tunnel.conftest import AgentOverSSH, unique_id
from tests.tunnel.proxy import CuttableProxy

LINES = 300
OUTAGE = 30.0
TIME_SCALE = 60.0


@dataclass
class Outage:
    proxy: CuttableProxy
    agent: AgentOverSSH
    job_id: str
    now: float = 1000.0
    cut_at: float | None = None
    lines_at_cut: int = 0
    lines_at_restore: int = 0
    restored_at: float | None = None
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def lines_on_disk(self) -> int:
        return self.agent.log_file(self.job_id).read_bytes().count(b"\n")

    def cut(self) -> None:
        self.proxy.cut()
        self.cut_at = self.now
        self.lines_at_cut = self.lines_on_disk()

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.proxy.is_cut and self.cut_at is not None:
            grown = self.lines_on_disk() - self.lines_at_cut
            if self.now - self.cut_at >= OUTAGE and (grown >= 20 or self.lines_on_disk() >= LINES):
                self.lines_at_restore = self.lines_on_disk()
                self.restored_at = self.now
                self.proxy.restore()
        await asyncio.sleep(seconds / TIME_SCALE)


async def test_tunnel_cut_for_30s_while_a_job_prints(agent_over_ssh: AgentOverSSH) -> None:
    proxy = await CuttableProxy(agent_over_ssh.ssh_port).start()
    job = JobSpec(
        id=unique_id("printer"),
        run_name="printer",
        commands=[f"for i in $(seq 1 {LINES}); do echo line $i; sleep 0.01; done"],
    )
    outage = Outage(proxy, agent_over_ssh, job.id)
    pool = TunnelPool(clock=outage.clock, backoff=BackoffPolicy(0.5, 2.0, 4.0))
    target = agent_over_ssh.target(port=proxy.port)
    client = AgentClient.over_tunnel(
        pool, target, agent_over_ssh.http_port, clock=outage.clock, sleep=outage.sleep
    )
    received = b""
    async with client:
        await client.submit(job)
        async for chunk in client.iter_logs(
            job.id, limit=200, poll_interval=0.2, unreachable_timeout=3600
        ):
            assert chunk.offset == len(received)
            received += chunk.data
            if outage.cut_at is None and received.count(b"\n") >= 40:
                outage.cut()
        state = await client.job(job.id)
    await pool.close()
    await proxy.close()

    assert received.decode().splitlines() == [f"line {i}" for i in range(1, LINES + 1)]
    assert outage.cut_at is not None and outage.restored_at is not None
    assert outage.restored_at - outage.cut_at >= OUTAGE
    assert outage.lines_at_restore - outage.lines_at_cut >= 20 or outage.lines_at_restore == LINES
    assert proxy.accepted > 2  # reconnect attempts were refused, then one got through
    assert state.status == JobStatus.EXITED and state.exit_status == 0


async def test_keepalives_notice_a_silently_dead_route(agent_over_ssh: AgentOverSSH) -> None:
    proxy = await CuttableProxy(agent_over_ssh.ssh_port).start()
    # connect_timeout bounds the healthy handshakes too: 1 s failed the first one in CI on a
    # loaded 2-core machine (asyncssh's key exchange is Python); the blackholed one waits it
    options = SSHOptions(connect_timeout=5.0, keepalive_interval=0.2, keepalive_count_max=2)
    now = 0.0
    pool = TunnelPool(connect=ssh_connector(options), clock=lambda: now)
    target = agent_over_ssh.target(port=proxy.port)
    async with AgentClient.over_tunnel(pool, target, agent_over_ssh.http_port) as client:
        await client.healthcheck()
        proxy.blackhole()
        async with asyncio.timeout(10):  # keepalives: 2 x 0.2 s unanswered
            while True:
                if not pool.state(target).connected:
                    break
                await asyncio.sleep(0.05)
        with pytest.raises(AgentUnreachable) as info:
            await client.healthcheck()  # the handshake itself times out now
        assert info.value.kind is UnreachableKind.connect_failed
        proxy.restore()
        now += 60.0  # past any backoff
        assert (await client.healthcheck()).service == "dockyard-agent"
    await pool.close()
    await proxy.close()
