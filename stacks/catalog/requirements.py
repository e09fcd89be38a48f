"""What a fleet asks for, reduced to the numbers an offers search filters on.

`requirements_from_spec` reads the `resources` and profile fields (`backends`, `regions`,
`instance_types`, `spot_policy`, `max_price`) of a fleet's spec. It accepts dstack's
written forms (`A100:40GB:2`, `24GB..`, `8..`, `{min, max}`) as well as the normalized
mapping forms of `schemas`, so a spec dict from either side gives the same result.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GPU_VENDORS = frozenset({"nvidia", "amd", "google", "tpu", "intel", "tt"})
DEFAULT_DISK_GIB = 100.0
_MEMORY_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(MB|GB|TB)?\s*$", re.IGNORECASE)
_UNIT_GIB = {"MB": 1 / 1024, "GB": 1.0, "TB": 1024.0}


@dataclass(frozen=True, slots=True)
class Range:
    """A closed numeric range; `None` ends are open."""

    min: float | None = None
    max: float | None = None

    def contains(self, value: float) -> bool:
        if self.min is not None and value < self.min:
            return False
        return not (self.max is not None and value > self.max)

    def __str__(self) -> str:
        lo = "" if self.min is None else f"{self.min:g}"
        hi = "" if self.max is None else f"{self.max:g}"
        return lo if lo == hi else f"{lo}..{hi}"


ANY = Range()


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


def parse_memory(value: Any) -> float:
    """`24GB`, `512MB`, `1TB`, `24` (GB) → GiB."""
    if isinstance(value, int | float):
        return float(value)
    match = _MEMORY_RE.match(str(value))
    if match is None:
        raise ValueError(f"not a memory size: {value!r}")
    return float(match.group(1)) * _UNIT_GIB[(match.group(2) or "GB").upper()]


def parse_range(value: Any, *, memory: bool = False) -> Range:
    """`8`, `8..`, `..16`, `2..8`, `{min, max}` (memory sizes when `memory`)."""
    conv = parse_memory if memory else float
    if value is None:
        return ANY
    if isinstance(value, Range):
        return value
    if isinstance(value, Mapping):
        lo, hi = value.get("min"), value.get("max")
        return Range(None if lo is None else conv(lo), None if hi is None else conv(hi))
    if isinstance(value, int | float):
        return Range(float(value), float(value))
    text = str(value).strip()
    if ".." in text:
        lo_text, hi_text = text.split("..", 1)
        lo_v = conv(lo_text) if lo_text.strip() else None
        hi_v = conv(hi_text) if hi_text.strip() else None
        return Range(lo_v, hi_v)
    single = conv(text)
    return Range(single, single)


def _gpu_from_text(text: str) -> dict[str, Any]:
    gpu: dict[str, Any] = {}
    for token in (t.strip() for t in text.split(":") if t.strip()):
        low = token.lower()
        if low in GPU_VENDORS:
            gpu["vendor"] = low
        elif re.search(r"[0-9](MB|GB|TB)", token, re.IGNORECASE):
            gpu["memory"] = token
        elif token[0].isdigit() or token.startswith(".."):
            gpu["count"] = token
        else:
            gpu["name"] = [n.strip() for n in token.split(",") if n.strip()]
    return gpu


def _gpu_fields(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, int):
        return {"count": value}
    if isinstance(value, Mapping):
        return dict(value)
    return _gpu_from_text(str(value))


def _gpu_requirements(value: Any) -> dict[str, Any]:
    gpu = _gpu_fields(value)
    names = gpu.get("name") or ()
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    has_spec = bool(names or gpu.get("memory") or gpu.get("vendor"))
    count = gpu.get("count")
    count_range = parse_range(count) if count is not None else ANY
    if count is None and has_spec:
        count_range = Range(1, None)
    vendor = gpu.get("vendor")
    return {
        "gpu_vendor": str(vendor).lower() if vendor else None,
        "gpu_names": tuple(str(n).upper() for n in names),
        "gpu_count": count_range,
        "gpu_memory_gib": parse_range(gpu.get("memory"), memory=True),
        "gpu_total_memory_gib": parse_range(gpu.get("total_memory"), memory=True),
    }


def _cpu_range(value: Any) -> Range:
    if isinstance(value, Mapping):
        return parse_range(value.get("count"))
    if isinstance(value, str) and ":" in value:
        value = value.split(":", 1)[1]
    if isinstance(value, str) and value.strip().lower() in {"x86", "arm"}:
        return ANY
    return parse_range(value)


def _disk_range(value: Any) -> Range:
    if isinstance(value, Mapping) and "size" in value:
        value = value["size"]
    return parse_range(value, memory=True)


def _strings(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    if isinstance(value, str):
        return (value.lower(),)
    return tuple(str(v).lower() for v in value)


def requirements_from_spec(spec: Mapping[str, Any]) -> Requirements:
    """Pure: the offers filters of a fleet (or run) spec; raises ValueError on bad forms."""
    resources = spec.get("resources") or {}
    return Requirements(
        **_gpu_requirements(resources.get("gpu")),
        cpus=_cpu_range(resources.get("cpu")),
        memory_gib=parse_range(resources.get("memory"), memory=True),
        disk_gib=_disk_range(resources.get("disk")),
        backends=_strings(spec.get("backends")),
        regions=_strings(spec.get("regions")),
        instance_types=_strings(spec.get("instance_types")),
        spot_policy=str(spec.get("spot_policy") or "on-demand"),
        max_price=float(spec["max_price"]) if spec.get("max_price") is not None else None,
    )
