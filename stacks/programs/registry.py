"""Which program builds a resource, with the stack config it needs (imports Pulumi).

`build_program` validates the resource (raising `StackProgramError` before anything
runs) and returns a `Program`: the inline function the Automation API runs (it calls the
pure program and exports every output) and the stack config (`aws:region`, `gcp:project`,
`gcp:region`, `gcp:zone`) the engine sets on the stack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi

from stacks.programs import aws, gcp
from stacks.programs.config import (
    ProgramSettings,
    fleet_config,
    gateway_config,
    volume_config,
)
from stacks.protocol import StackResource


@dataclass(frozen=True, slots=True)
class Program:
    """An inline program and the stack config it reads."""

    run: Callable[[], None]
    config: dict[str, str] = field(default_factory=dict)
    backend: str = ""


def _inline(fn: Callable[[Any], dict[str, Any]], cfg: Any) -> Callable[[], None]:
    def program() -> None:
        for key, value in fn(cfg).items():
            pulumi.export(key, value)

    return program


def _stack_config(
    backend: str, region: str, zone: str | None, settings: ProgramSettings
) -> dict[str, str]:
    if backend == "aws":
        return {"aws:region": region}
    config = {"gcp:region": region}
    if zone:
        config["gcp:zone"] = zone
    if settings.gcp_project:
        config["gcp:project"] = settings.gcp_project
    return config


def build_program(
    resource: StackResource, settings: ProgramSettings, *, nodes: int | None = None
) -> Program:
    """Pure: the program for a cloud fleet, volume or gateway; raises StackProgramError."""
    if resource.kind == "fleet":
        fleet = fleet_config(resource, settings, nodes)
        backend = fleet.offer.backend
        fn = aws.aws_fleet if backend == "aws" else gcp.gcp_fleet
        config = _stack_config(backend, fleet.region, fleet.zone, settings)
        return Program(_inline(fn, fleet), config, backend)
    if resource.kind == "volume":
        volume = volume_config(resource)
        fn_v = aws.aws_volume if volume.backend == "aws" else gcp.gcp_volume
        config = _stack_config(volume.backend, volume.region, volume.zone, settings)
        return Program(_inline(fn_v, volume), config, volume.backend)
    gateway = gateway_config(resource, settings)
    fn_g = aws.aws_gateway if gateway.backend == "aws" else gcp.gcp_gateway
    config = _stack_config(gateway.backend, gateway.region, gateway.zone, settings)
    return Program(_inline(fn_g, gateway), config, gateway.backend)
