"""From a fleet's ``ssh_config`` to the `SSHTarget` of each host (pure).

dstack's rules: a host is a hostname or a mapping; its ``user``, ``port``,
``identity_file`` and ``proxy_jump`` override the fleet-level ones; the port defaults to
22; a user and a key must be resolvable for every host. ``~`` in key paths is the server
user's home. Inline ``ssh_key`` contents are not handled here: the server writes them to
a file first and passes its path as ``identity_file``.
"""

from __future__ import annotations

import os

from agent.tunnel import SSHTarget
from schemas.fleets import SSHHostParams, SSHParams, SSHProxyParams


class SSHConfigError(ValueError):
    """A host of ``ssh_config`` cannot be reached as configured (names the host)."""


def _jump(params: SSHProxyParams) -> SSHTarget:
    return SSHTarget(
        params.hostname,
        params.port or 22,
        user=params.user,
        identity_file=os.path.expanduser(params.identity_file),
    )


def to_target(host: str | SSHHostParams, fleet: SSHParams) -> SSHTarget:
    """The target of one host of `fleet` (per-host fields win over the fleet's)."""
    params = host if isinstance(host, SSHHostParams) else SSHHostParams(hostname=str(host))
    user = params.user or fleet.user
    identity = params.identity_file or fleet.identity_file
    if not user:
        raise SSHConfigError(f"host {params.hostname}: no user (set ssh_config.user or the host's)")
    if not identity:
        raise SSHConfigError(
            f"host {params.hostname}: no identity_file (set ssh_config.identity_file or the host's)"
        )
    jump = params.proxy_jump or fleet.proxy_jump
    return SSHTarget(
        params.hostname,
        params.port or fleet.port or 22,
        user=user,
        identity_file=os.path.expanduser(identity),
        proxy_jump=_jump(jump) if jump else None,
    )


def to_targets(fleet: SSHParams) -> list[SSHTarget]:
    """Every host's target, in the config's order."""
    return [to_target(host, fleet) for host in fleet.hosts]
