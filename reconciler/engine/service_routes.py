"""What the service proxy needs to know of a service: its route and ready replicas.

The types shared by the proxy (`reconciler.web.proxy`, which asks for a route on each
request) and the store-backed `RouteSource` of the engine (`reconciler.engine.routes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agent.tunnel import SSHTarget


@dataclass(frozen=True, slots=True)
class Upstream:
    """One ready replica: the SSH endpoint of its host and the job's port there.

    `direct`: the host is this one (the local fleet), so the port is dialled on loopback.
    """

    target: SSHTarget
    port: int
    job_id: str
    direct: bool = False
    # the agent's API port on the host when the channel goes through the host's own sshd
    # (SSH fleets): the proxy asks the agent who holds `port` first; None: the local
    # agent's SSH server checks the channel itself, or `direct`
    agent_port: int | None = None


@dataclass(frozen=True, slots=True)
class ServiceRoute:
    project: str
    run_name: str
    auth: bool
    strip_prefix: bool
    upstreams: tuple[Upstream, ...]


class RouteSource(Protocol):
    async def route(self, project: str, run_name: str) -> ServiceRoute | None:
        """The service's route, or None when no such running service exists."""
