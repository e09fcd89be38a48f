"""What a fleet asks for, reduced to the numbers an offers search filters on.

`requirements_from_spec` reads the `resources` (through `schemas.requirements.resources_of`,
the one parser of dstack's resource grammar, which the scheduler uses too) and the profile
fields (`backends`, `regions`, `instance_types`, `spot_policy`, `max_price`) of a fleet's
spec; written forms (`A100:40GB:2`, `24GB..`) and normalized ones give the same result.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.requirements import ANY, Range, resources_of

DEFAULT_DISK_GIB = 100.0


@dataclass(frozen=True, slots=True)
class Requirements:
    """The filters of an offers search. Empty tuples mean "any"."""

    gpu_vendor: str | None = None
    gpu_names: tuple[str, ...] = ()
    gpu_count: Range = ANY
    gpu_memory_gib: Range = ANY
    gpu_total_memory_gib: Range = ANY
    cpus: Range = ANY
    memory_gib: Range = ANY
    disk_gib: Range = ANY
    backends: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    instance_types: tuple[str, ...] = ()
    spot_policy: str = "on-demand"
    max_price: float | None = None

    @property
    def disk_size_gib(self) -> float:
        """The disk a new instance gets: the smallest size the range allows."""
        return self.disk_gib.min if self.disk_gib.min is not None else DEFAULT_DISK_GIB


def _or_any(value: Range | None) -> Range:
    return ANY if value is None else value


def _strings(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    if isinstance(value, str):
        return (value.lower(),)
    return tuple(str(v).lower() for v in value)


def requirements_from_spec(spec: Mapping[str, Any]) -> Requirements:
    """Pure: the offers filters of a fleet (or run) spec; raises ValueError on bad forms."""
    res = resources_of(spec.get("resources"))
    count = res.gpu_count
    if count is None:
        count = Range(1, None) if res.gpu_specified else ANY
    return Requirements(
        gpu_vendor=res.gpu_vendor,
        gpu_names=tuple(n.upper() for n in res.gpu_names),
        gpu_count=count,
        gpu_memory_gib=_or_any(res.gpu_memory_gib),
        gpu_total_memory_gib=_or_any(res.gpu_total_memory_gib),
        cpus=_or_any(res.cpu),
        memory_gib=_or_any(res.memory_gib),
        disk_gib=_or_any(res.disk_gib),
        backends=_strings(spec.get("backends")),
        regions=_strings(spec.get("regions")),
        instance_types=_strings(spec.get("instance_types")),
        spot_policy=str(spec.get("spot_policy") or "on-demand"),
        max_price=float(spec["max_price"]) if spec.get("max_price") is not None else None,
    )
