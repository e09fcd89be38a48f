"""Frozen copies of the inventory rows the shell works with: instances and capacity.

The store (`reconciler.adapters.db`) reads `instances`, `fleets`, `volumes` and `gateways`
rows and hands out these values, so the engine and the web never hold an ORM row:
`InstanceRecord` (an instance as the store recorded it) and `CapacityRecord` (a fleet, a
volume or a gateway: one stack each). `AgentHost` is what finding an instance's agent needs
(`engine.agents.AgentDirectory`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

CapacityKind = Literal["fleet", "volume", "gateway"]


class AgentHost(Protocol):
    """Where an instance's agent is reached (the columns `AgentDirectory.address` reads)."""

    @property
    def id(self) -> str: ...

    @property
    def hostname(self) -> str | None: ...

    @property
    def ssh_port(self) -> int | None: ...

    @property
    def ssh_user(self) -> str | None: ...

    @property
    def agent_port(self) -> int | None: ...

    @property
    def resources(self) -> Any: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceRecord:
    """One `instances` row (without its lease stamps)."""

    id: str
    fleet_id: str | None
    project_id: str
    name: str
    status: str
    created_at: datetime
    instance_num: int = 0
    hostname: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None
    agent_port: int | None = None
    backend: str | None = None
    region: str | None = None
    instance_type: str | None = None
    price: float | None = None
    resources: Any = None
    """Per-host details the fleets worker recorded (`identity_file`, `proxy_jump`, …)."""
    host_info: Any = None
    """The agent's `/host` answer."""
    busy_blocks: int = 0
    total_blocks: int = 1
    termination_reason: str | None = None
    status_message: str = ""
    last_job_processed_at: datetime | None = None
    unreachable_since: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityRecord:
    """One `fleets`, `volumes` or `gateways` row (without its lease stamps)."""

    kind: CapacityKind
    id: str
    project_id: str
    name: str
    spec: Mapping[str, Any]
    status: str
    created_at: datetime
    resource_id: str | None = None
    status_message: str = ""
    outputs: Any = None
    """The stack's outputs (volumes and gateways; None for fleets)."""
    deleted: bool = False
    project: str = ""
    """The project's name (where the store read it with the row)."""
    path: str | None = None
    """The config path of its resource (where the store read it with the row)."""


@dataclass(frozen=True, slots=True)
class LeasedInstance:
    """An instance the instances worker holds the lease of, with its fleet (None when it
    has none or the fleet row is gone)."""

    instance: InstanceRecord
    fleet: CapacityRecord | None
