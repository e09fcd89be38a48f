"""One purchasable machine: the value an offers search returns and a cloud program consumes.

An `Offer` is a catalog row (a GPU instance type in a region of a cloud) priced for one
market: on-demand or spot. The catalog (`stacks.catalog`) produces them; a cloud fleet's
`StackResource.offers` carries the chosen ones, cheapest first, into the Pulumi programs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Offer:
    """An instance type in one region of one backend, priced for one market."""

    backend: str
    region: str
    instance_type: str
    gpu_vendor: str
    gpu_name: str
    gpu_count: int
    gpu_memory_gib: float
    cpus: int
    memory_gib: float
    spot: bool
    price: float
    zones: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (the `--json` shape of `dockyard offer` and of plan entries)."""
        return {
            "backend": self.backend,
            "region": self.region,
            "instance_type": self.instance_type,
            "gpu": {
                "vendor": self.gpu_vendor,
                "name": self.gpu_name,
                "count": self.gpu_count,
                "memory_gib": self.gpu_memory_gib,
            },
            "cpus": self.cpus,
            "memory_gib": self.memory_gib,
            "spot": self.spot,
            "price": self.price,
            "zones": list(self.zones),
        }
