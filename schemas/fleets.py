"""`type: fleet`: cloud fleets (`nodes`) and SSH fleets (`ssh_config`), exactly one of them.

Field names and defaults are dstack 0.22.5's. `nodes: 2`, `nodes: 0..4`
and `{min, target, max}` normalize to `{min, target, max}` (target defaults to min).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from schemas.base import ConfigModel, FieldConflict, StrictModel, fill_field
from schemas.defaulting import NO_GPU_DEFAULT
from schemas.mounts import Env
from schemas.profile import ProvisioningParams
from schemas.resources import ResourcesSpec
from schemas.scalars import ResourceName, split_range

Blocks = Literal["auto"] | Annotated[int, Field(ge=1)]


class SSHKey(StrictModel):
    public: str
    private: str | None = None


class SSHProxyParams(StrictModel):
    """A jump host."""

    hostname: str
    port: int | None = None
    user: str
    identity_file: str
    ssh_key: SSHKey | None = None


class SSHHostParams(StrictModel):
    """One host of an SSH fleet, when it needs more than a hostname."""

    hostname: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    proxy_jump: SSHProxyParams | None = None
    internal_ip: str | None = None
    ssh_key: SSHKey | None = None
    blocks: Blocks | None = None

    @field_validator("internal_ip")
    @classmethod
    def _private_ip(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"invalid IP address {value!r}") from None
        if not address.is_private:
            raise ValueError(f"{value} is not a private IP address")
        return value


def _host_kind(value: Any) -> str:
    is_name = isinstance(value, str | int | float) and not isinstance(value, bool)
    return "~hostname" if is_name else "~host"


SSHHost = Annotated[
    Annotated[str, Tag("~hostname")] | Annotated[SSHHostParams, Tag("~host")],
    Discriminator(_host_kind),
]


class SSHParams(StrictModel):
    """`ssh_config`: defaults for all hosts, and the hosts."""

    user: str | None = None
    """SSH user for all hosts."""
    port: int | None = None
    """SSH port for all hosts."""
    identity_file: str | None = None
    """Private key file for all hosts."""
    ssh_key: SSHKey | None = None
    proxy_jump: SSHProxyParams | None = None
    """Jump host for all hosts."""
    hosts: list[SSHHost]
    """Hosts: hostnames/IPs or `{hostname, port, user, identity_file, ...}`."""
    network: str | None = None
    """Private network (CIDR) the hosts talk over."""

    @field_validator("network")
    @classmethod
    def _private_network(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            network = ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise ValueError(f"failed to parse network {value!r}") from None
        if not network.is_private:
            raise ValueError("a private network is required")
        return value


class FleetNodesSpec(StrictModel):
    """How many instances: `min` kept, `target` provisioned at first, up to `max`."""

    json_shorthands = ("string", "integer")

    min: int = 0
    """Instances kept at all times (default 0)."""
    target: int
    """Instances provisioned when the fleet is applied (default `min`)."""
    max: int | None = None
    """Most instances the fleet may grow to (unset: no limit)."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        value = split_range(value)
        if isinstance(value, dict):
            value = dict(value)
            if value.get("min") is None:
                value["min"] = 0
            if value.get("target") is None:
                value["target"] = value["min"]
        return value

    @field_validator("min")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("min cannot be negative")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> FleetNodesSpec:
        if self.target < self.min:
            raise FieldConflict("target", "target must not be less than min")
        if self.max is not None and self.max < self.min:
            raise FieldConflict("max", "max must not be less than min")
        if self.max is not None and self.max < self.target:
            raise FieldConflict("max", "max must not be less than target")
        return self


class FleetConfiguration(ProvisioningParams, ConfigModel):
    """`type: fleet`."""

    type: Literal["fleet"] = "fleet"
    name: ResourceName | None = None
    """The fleet name."""
    placement: Literal["any", "cluster"] | None = None
    """`any` or `cluster` (interconnected instances for multi-node tasks)."""
    blocks: Blocks = 1
    """Split each instance into this many blocks, or `auto`."""
    nodes: FleetNodesSpec | None = None
    """Cloud fleet: `2`, `0..4` or `{min, target, max}`. Not with `ssh_config`."""
    resources: ResourcesSpec | None = None
    """Resources of each instance (cloud fleets)."""
    ssh_config: SSHParams | None = None
    """SSH fleet: the hosts to use. Not with `nodes`."""
    env: Env
    """Environment variables for SSH fleets."""

    @model_validator(mode="after")
    def _one_subtype(self) -> FleetConfiguration:
        if self.nodes is not None and self.ssh_config is not None:
            raise FieldConflict("ssh_config", "`nodes` and `ssh_config` are mutually exclusive")
        if self.nodes is None and self.ssh_config is None:
            raise ValueError("set `nodes` (cloud fleet) or `ssh_config` (SSH fleet)")
        if self.ssh_config is not None:
            for field in _BACKEND_ONLY:
                if getattr(self, field) is not None:
                    raise FieldConflict(field, f"an SSH fleet does not support `{field}`")
            check_internal_ips(self.ssh_config)
        elif self.env:
            raise FieldConflict("env", "`env` is for SSH fleets only")
        if self.resources is not None and self.resources.gpu is None:
            fill_field(self, "resources", self.resources.model_copy(update={"gpu": NO_GPU_DEFAULT}))
        return self


_BACKEND_ONLY = (*(f for f in ProvisioningParams.model_fields if f != "spot_policy"), "resources")
"""Refused on an SSH fleet. `spot_policy` is accepted and ignored (dstack 0.22.5 does the
same; `schemas.caveats` warns)."""


def check_internal_ips(ssh_config: SSHParams) -> None:
    """`internal_ip` on every host or on none, and not together with `network`."""
    with_ip = [
        index
        for index, host in enumerate(ssh_config.hosts)
        if not isinstance(host, str) and host.internal_ip is not None
    ]
    if with_ip and len(with_ip) != len(ssh_config.hosts):
        missing = next(i for i in range(len(ssh_config.hosts)) if i not in with_ip)
        raise FieldConflict(
            ("ssh_config", "hosts", missing), "set `internal_ip` on every host or on none"
        )
    if with_ip and ssh_config.network is not None:
        raise FieldConflict(
            ("ssh_config", "network"), "`internal_ip` and `network` are mutually exclusive"
        )
