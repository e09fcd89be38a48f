"""Which agent serves an instance, and one cached `AgentClient` per host.

The jobs worker, the instances worker and the service proxy's route source ask the
`AgentDirectory` for the client (or the SSH target) of an instance row; all share one
`TunnelPool`, so every host has one SSH connection however many callers there are.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.client import AgentClient
from agent.tunnel import SSHTarget, TunnelPool
from reconciler.adapters.db.models import Instance


@dataclass(frozen=True, slots=True)
class AgentAddress:
    target: SSHTarget
    agent_port: int


class AgentDirectory:
    """Maps instance rows to SSH targets and cached agent clients."""

    def __init__(self, pool: TunnelPool, *, identity_file: str | None) -> None:
        self.pool = pool
        self._identity_file = identity_file
        self._clients: dict[AgentAddress, AgentClient] = {}

    def address(self, instance: Instance) -> AgentAddress:
        """The SSH endpoint and agent port recorded on the instance row."""
        target = SSHTarget(
            hostname=instance.hostname or "127.0.0.1",
            port=instance.ssh_port or 22,
            user=instance.ssh_user or "root",
            identity_file=self._identity_file,
        )
        return AgentAddress(target, instance.agent_port or 10998)

    def client(self, instance: Instance) -> AgentClient:
        address = self.address(instance)
        client = self._clients.get(address)
        if client is None:
            client = AgentClient.over_tunnel(self.pool, address.target, address.agent_port)
            self._clients[address] = client
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
