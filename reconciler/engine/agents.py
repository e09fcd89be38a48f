"""Which agent serves an instance, and one cached `AgentClient` per host.

The jobs worker, the instances worker and the service proxy's route source ask the
`AgentDirectory` for the client (or the SSH target) of an instance (an `AgentHost`: an
`InstanceRecord` from the store); all share one
`TunnelPool`, so every host has one SSH connection however many callers there are.
Each time a client is handed out, `on_client` (the controller's `JobEventFollower.follow`)
is told, so every agent the server speaks to has its job events followed; `events` (that
follower too) tells the jobs worker what those events said (`AgentEvents`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from agent.client import AgentClient
from agent.jobevents import JobEnd
from agent.ssh.hosts import jump_target
from agent.tunnel import SSHTarget, TunnelPool
from reconciler.domain.inventory import AgentHost
from schemas.sshhosts import JumpHost


class AgentEvents(Protocol):
    """What the jobs worker asks of the agents' job events (`JobEventFollower`): a job's
    end as its event told it, and the events' side of a submit."""

    def ended(self, instance_id: str, agent_job_id: str) -> JobEnd | None: ...

    def submitting(self, instance_id: str, agent_job_id: str) -> None: ...

    def submitted(self, instance_id: str, agent_job_id: str, *, started: bool) -> bool: ...


class _NoEvents:
    """No events followed: nothing to tell."""

    def ended(self, instance_id: str, agent_job_id: str) -> JobEnd | None:
        return None

    def submitting(self, instance_id: str, agent_job_id: str) -> None:
        return None

    def submitted(self, instance_id: str, agent_job_id: str, *, started: bool) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class AgentAddress:
    target: SSHTarget
    agent_port: int


class AgentDirectory:
    """Maps instances to SSH targets and cached agent clients."""

    def __init__(self, pool: TunnelPool, *, identity_file: str | None) -> None:
        self.pool = pool
        self._identity_file = identity_file
        self._clients: dict[AgentAddress, AgentClient] = {}
        self.on_client: Callable[[str, AgentClient], None] | None = None
        self.following: Callable[[str], bool] = lambda instance_id: False
        """Whether the instance's agent events are followed now (its jobs may sleep)."""
        self.events: AgentEvents = _NoEvents()
        """What the agents' job events told (`JobEventFollower`; set by the controller)."""
        self.unsettled: set[str] = set()
        """Instances whose agent missed a finished job's removal (it did not answer): the
        instances worker settles them with the store at their next check (`agent_sync`)."""

    @property
    def default_key(self) -> str | None:
        """The key a host is logged in to with when its fleet names none (the server's)."""
        return self._identity_file

    def address(self, instance: AgentHost) -> AgentAddress:
        """The SSH endpoint and agent port recorded on the instance.

        Per-host SSH details the fleet worker recorded in `instances.resources`
        (`identity_file`, `proxy_jump`, `known_hosts` — the local agent's pinned host key)
        win over the server's defaults.
        """
        extra = instance.resources if isinstance(instance.resources, Mapping) else {}
        jump = JumpHost.from_record(extra.get("proxy_jump"))
        target = SSHTarget(
            hostname=instance.hostname or "127.0.0.1",
            port=instance.ssh_port or 22,
            user=instance.ssh_user or "root",
            identity_file=str(extra.get("identity_file") or self._identity_file or "") or None,
            proxy_jump=self._jump(jump) if jump is not None else None,
            known_hosts=str(extra["known_hosts"]) if extra.get("known_hosts") else None,
        )
        return AgentAddress(target, instance.agent_port or 10998)

    def _jump(self, jump: JumpHost) -> SSHTarget:
        target = jump_target(jump)
        if target.identity_file is None:
            return dataclasses.replace(target, identity_file=self._identity_file)
        return target

    def client(self, instance: AgentHost) -> AgentClient:
        address = self.address(instance)
        client = self._clients.get(address)
        if client is None:
            client = AgentClient.over_tunnel(self.pool, address.target, address.agent_port)
            self._clients[address] = client
        if self.on_client is not None:
            self.on_client(instance.id, client)
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
