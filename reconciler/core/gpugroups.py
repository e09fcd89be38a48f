"""dstack's `gpus/list` answer from the project's instances (pure).

dstack groups the GPUs a run could get by name, memory and vendor (and, when asked, by
backend and count); Dockyard's answer is the GPUs of the project's fleets' instances, the
capacity a run is placed on. Local and SSH hosts are dstack's `remote` backend. Per group:
how many of that GPU an instance has (`count` range), the price per GPU (`price` range, the
instance's $/h divided by its GPUs), the whole instance's price (`offer_price`) and whether
an instance with a free GPU exists (`idle`) or all are taken (`busy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.core.scheduling import Candidate

REMOTE = "remote"


@dataclass
class _Group:
    name: str
    memory_mib: int
    vendor: str
    counts: list[int] = field(default_factory=list)
    prices: list[float] = field(default_factory=list)
    offer_prices: list[float] = field(default_factory=list)
    availability: set[str] = field(default_factory=set)

    def as_dict(self, group_by: Sequence[str]) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "name": self.name,
            "memory_mib": self.memory_mib,
            "vendor": self.vendor,
            "availability": sorted(self.availability),
            "spot": ["on-demand"],
            "count": {"min": min(self.counts), "max": max(self.counts)},
            "price": {"min": min(self.prices), "max": max(self.prices)},
            "offer_price": {"min": min(self.offer_prices), "max": max(self.offer_prices)},
        }
        if "backend" in group_by:
            answer["backend"] = REMOTE
        else:
            answer["backends"] = [REMOTE]
        return answer


def gpu_groups(
    candidates: Sequence[Candidate], group_by: Sequence[str] = ()
) -> list[dict[str, Any]]:
    groups: dict[tuple[Any, ...], _Group] = {}
    for cand in candidates:
        kinds: dict[tuple[str, int, str], int] = {}
        for gpu in cand.gpus:
            key = (gpu.name, round(gpu.memory_gb * 1024), gpu.vendor or "nvidia")
            kinds[key] = kinds.get(key, 0) + 1
        free = {g.index for g in cand.gpus} - set(cand.busy_gpus)
        for (name, memory_mib, vendor), count in kinds.items():
            group_key = (name, memory_mib, vendor, count if "count" in group_by else None)
            group = groups.setdefault(group_key, _Group(name, memory_mib, vendor))
            group.counts.append(count)
            group.prices.append(round(cand.price / max(len(cand.gpus), 1), 4))
            group.offer_prices.append(cand.price)
            group.availability.add("idle" if free else "busy")
    ordered = sorted(groups.values(), key=lambda g: (g.name, g.memory_mib, min(g.counts)))
    return [group.as_dict(group_by) for group in ordered]
