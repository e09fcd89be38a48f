"""The hosts of an SSH fleet as the server reaches them: the one reader of `ssh_config`.

Pure. dstack's rules: a host is a hostname or a mapping; its ``user``, ``port``,
``identity_file`` and ``proxy_jump`` override the fleet-level ones; the port defaults to 22.
A user or a key left unset stays unset here (the agent side picks its defaults: user
``root``, the server's key). ``~`` in key paths is kept: whoever reads the key expands it.

Called by the local engine (`stacks.local`: a fleet's host items and the instances `up`
returns), the fleets worker (`reconciler.engine.workers.fleets`: where each host's agent is
deployed and reached, through `agent.ssh.hosts.to_target`) and the store's teardowns
(`reconciler.adapters.db.teardowns`: the hosts a fleet's spec names). A host's jump is
recorded on its instance as `JumpHost.as_record()` and read back with `JumpHost.from_record`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.fleets import Blocks, SSHHostParams, SSHParams, SSHProxyParams


@dataclass(frozen=True, slots=True)
class JumpHost:
    """The host an SSH fleet's host is reached through (``proxy_jump``)."""

    hostname: str
    port: int
    user: str
    identity_file: str

    @classmethod
    def of(cls, params: SSHProxyParams) -> JumpHost:
        return cls(params.hostname, params.port or 22, params.user, params.identity_file)

    def as_record(self) -> dict[str, Any]:
        """JSON-able, as a stack's items and an instance's `resources` hold it."""
        return {
            "hostname": self.hostname,
            "port": self.port,
            "user": self.user,
            "identity_file": self.identity_file,
        }

    @classmethod
    def from_record(cls, record: Any) -> JumpHost | None:
        """What `as_record` wrote (None for anything else: no jump recorded)."""
        if not isinstance(record, Mapping) or not record.get("hostname"):
            return None
        return cls(
            str(record["hostname"]),
            int(record.get("port") or 22),
            str(record.get("user") or "root"),
            str(record.get("identity_file") or ""),
        )


@dataclass(frozen=True, slots=True)
class FleetHost:
    """One host of an SSH fleet, the fleet's defaults applied."""

    index: int
    hostname: str
    port: int
    user: str | None
    identity_file: str | None
    proxy_jump: JumpHost | None
    internal_ip: str | None
    blocks: Blocks


def fleet_hosts(ssh: SSHParams) -> list[FleetHost]:
    """Every host of `ssh`, in the config's order."""
    found = []
    for index, host in enumerate(ssh.hosts):
        params = host if isinstance(host, SSHHostParams) else SSHHostParams(hostname=str(host))
        jump = params.proxy_jump or ssh.proxy_jump
        found.append(
            FleetHost(
                index=index,
                hostname=params.hostname,
                port=params.port or ssh.port or 22,
                user=params.user or ssh.user,
                identity_file=params.identity_file or ssh.identity_file,
                proxy_jump=JumpHost.of(jump) if jump is not None else None,
                internal_ip=params.internal_ip,
                blocks=params.blocks or 1,
            )
        )
    return found


def spec_fleet_hosts(spec: Mapping[str, Any]) -> list[FleetHost] | None:
    """The hosts of a stored fleet spec (`FleetConfiguration.normalized()`); None when it is
    not an SSH fleet. Raises pydantic's `ValidationError` for an `ssh_config` that is not
    one (a stored spec was validated before it was stored)."""
    ssh = spec.get("ssh_config")
    if ssh is None:
        return None
    return fleet_hosts(SSHParams.model_validate(ssh))
