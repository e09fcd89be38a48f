"""The proxy's guard: a replica's port is dialled only while its job holds it.

`reconciler.web.proxy.ServiceProxy` calls `PortGuard.before_open` before it opens a
connection to a replica's port, and `refused` when a channel was refused:

- on the loopback path (the local fleet's replicas, dialled by the server itself) the
  guard asks `port_check` (`agent.server.portholders.PortHolders.problem`, in a thread);
- through a host's own sshd (SSH fleets: `Upstream.agent_port` is set) it asks the host's
  agent (`GET /ports/{port}/holder`, one call over the host's SSH connection; an agent that
  cannot answer counts as a refusal);
- through the local agent's SSH server the agent refuses the channel itself, and the
  guard only notes the refusal.

A refusal raises `PortNotTheJobsError` (a refused connection: the proxy tries another
replica, then answers `502` with the reason) and the job gets an event (`JobNotes`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

from agent.client import AgentClient, AgentError
from agent.tunnel import AgentUnreachable, SSHTarget, TunnelPool
from reconciler.engine.service_routes import Upstream
from reconciler.web.jobnotes import JobNotes, is_port_refusal

PortCheck = Callable[[int, str], str | None]
"""`check(port, job_id)`: why a loopback connection to `port` would not reach the job, or
None (`agent.server.portholders.PortHolders.problem`); blocking, run in a thread."""


class PortNotTheJobsError(ConnectionRefusedError):
    """The port of a replica is held by another process than its job."""


class PortGuard:
    """See the module docstring; one per proxy (it keeps the agents' clients)."""

    def __init__(
        self,
        pool: TunnelPool,
        port_check: PortCheck | None = None,
        notes: JobNotes | None = None,
    ) -> None:
        self._pool = pool
        self._port_check = port_check  # None: loopback replicas are dialled unchecked
        self._notes = notes
        self._agents: dict[tuple[SSHTarget, int], AgentClient] = {}  # hosts reached via sshd

    async def before_open(self, upstream: Upstream) -> None:
        """Raise `PortNotTheJobsError` unless the replica's port is its job's, as far as
        this path lets the server ask."""
        problem = None
        if upstream.direct and self._port_check is not None:
            check = partial(self._port_check, upstream.port, upstream.job_id)
            problem = await asyncio.to_thread(check)
        elif not upstream.direct and upstream.agent_port is not None:
            problem = await self._agent_problem(upstream, upstream.agent_port)
        if problem is not None:
            await self._note(upstream.job_id, problem)
            raise PortNotTheJobsError(problem)

    async def refused(self, upstream: Upstream, error: AgentUnreachable) -> None:
        """A channel to the replica was refused: note it when the port was not the job's."""
        if is_port_refusal(error.detail):
            await self._note(upstream.job_id, error.detail)

    async def aclose(self) -> None:
        for client in self._agents.values():
            await client.aclose()
        self._agents.clear()

    async def _agent_problem(self, upstream: Upstream, agent_port: int) -> str | None:
        key = (upstream.target, agent_port)
        client = self._agents.get(key)
        if client is None:
            client = AgentClient.over_tunnel(self._pool, upstream.target, agent_port)
            self._agents[key] = client
        try:
            return await client.port_problem(upstream.port)
        except AgentError as exc:  # an agent too old to tell: not the job's, as far as known
            where = f"port {upstream.port} of job {upstream.job_id}"
            return f"{where}: the host's agent cannot tell who holds it ({exc})"

    async def _note(self, job_id: str, problem: str) -> None:
        if self._notes is not None:
            await self._notes.job(job_id, f"a connection to the service was refused: {problem}")
