"""From a host of an SSH fleet (`schemas.sshhosts`) to the `SSHTarget` the server reaches
it at (pure).

The fleets worker deploys each host's agent to `to_target(host)`; the agent directory
(`reconciler.engine.agents`) builds the same target again from what the worker recorded on
the instance, the jump through `jump_target`. So a host behind a ``proxy_jump`` is deployed
to, and its agent tunnelled to, through its jump host (`agent.tunnel.TunnelPool`). A host
without a user is logged in to as ``root``; one without a key with the caller's
`default_key` (the server's), a jump host always with its own (the schema requires it).
"""

from __future__ import annotations

from agent.tunnel import SSHTarget
from schemas.sshhosts import FleetHost, JumpHost


def jump_target(jump: JumpHost) -> SSHTarget:
    return SSHTarget(
        jump.hostname, jump.port, user=jump.user, identity_file=jump.identity_file or None
    )


def to_target(host: FleetHost, *, default_key: str | None = None) -> SSHTarget:
    """The target of one host (its fields already carry the fleet's defaults)."""
    return SSHTarget(
        host.hostname,
        host.port,
        user=host.user or "root",
        identity_file=host.identity_file or default_key,
        proxy_jump=jump_target(host.proxy_jump) if host.proxy_jump is not None else None,
    )
