"""The dstack resource grammar as numbers: one typed `Resources`, parsed once.

`resources_of(spec["resources"])` reads a run's or fleet's `resources` in any form dstack
accepts — written (`A100:40GB:2`, `24GB..`, `8..`, `arm:4..`, `{min, max}`) or as
`normalized()` stores it — into `Resources`, whose ranges are GiB and counts. A field the
spec does not set is `None`, so each consumer applies its own default: the scheduler
(`reconciler.core.jobspecs.requirements_of`, placement on instances that exist) and the
offers catalog (`stacks.catalog.requirements`, sizing new instances) read the same object.
`Range`, `parse_range` and `memory_gib` are the grammar's pieces. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.resources import parse_gpu
from schemas.scalars import parse_memory

CPU_ARCHES = frozenset({"x86", "arm"})


@dataclass(frozen=True, slots=True)
class Range:
    """An inclusive numeric range; `None` ends are open."""

    min: float | None = None
    max: float | None = None

    def contains(self, value: float) -> bool:
        if self.min is not None and value < self.min:
            return False
        return not (self.max is not None and value > self.max)

    def describe(self, unit: str = "") -> str:
        """`2..8`, `24GB..`, `4` (one end when both are equal)."""
        lo = "" if self.min is None else f"{_num(self.min)}{unit}"
        hi = "" if self.max is None else f"{_num(self.max)}{unit}"
        return lo if lo == hi else f"{lo}..{hi}"

    def __str__(self) -> str:
        return self.describe()


ANY = Range()


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def memory_gib(value: Any) -> float:
    """`24GB`, `512MB`, `1TB`, `24` (GB) → GiB; ValueError otherwise."""
    parsed = parse_memory(value)
    if not isinstance(parsed, float):
        raise ValueError(f"not a memory size: {value!r}")
    return parsed


def parse_range(value: Any, *, memory: bool = False) -> Range:
    """`8`, `8..`, `..16`, `2..8`, `{min, max}` (memory sizes in GiB when `memory`)."""
    conv = memory_gib if memory else float
    if value is None:
        return ANY
    if isinstance(value, Range):
        return value
    if isinstance(value, Mapping):
        lo, hi = value.get("min"), value.get("max")
        return Range(None if lo is None else conv(lo), None if hi is None else conv(hi))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Range(float(value), float(value))
    text = str(value).strip()
    if ".." in text:
        lo_text, hi_text = text.split("..", 1)
        lo_v = conv(lo_text) if lo_text.strip() else None
        hi_v = conv(hi_text) if hi_text.strip() else None
        return Range(lo_v, hi_v)
    single = conv(text)
    return Range(single, single)


@dataclass(frozen=True, slots=True)
class Resources:
    """A spec's `resources`; `None`/empty = not set (the consumer's default applies)."""

    cpu: Range | None = None
    cpu_arch: str | None = None
    memory_gib: Range | None = None
    disk_gib: Range | None = None
    gpu: bool = False  # a `gpu` entry is present (a mapping, or a written form)
    gpu_count: Range | None = None
    gpu_names: tuple[str, ...] = ()
    gpu_vendor: str | None = None
    gpu_memory_gib: Range | None = None
    gpu_total_memory_gib: Range | None = None

    @property
    def gpu_specified(self) -> bool:
        """Whether a GPU name, memory or vendor was asked for (then one GPU at least)."""
        return bool(self.gpu_names or self.gpu_memory_gib or self.gpu_vendor)


def resources_of(resources: Any) -> Resources:
    """Parse `resources` once (see the module docstring); ValueError on a bad form."""
    res = resources if isinstance(resources, Mapping) else {}
    cpu, arch = _cpu(res.get("cpu"))
    gpu = _gpu_fields(res.get("gpu"))
    names = gpu.get("name") or ()
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    vendor = gpu.get("vendor")
    disk = res.get("disk")
    if isinstance(disk, Mapping) and "size" in disk:
        disk = disk["size"]
    return Resources(
        cpu=cpu,
        cpu_arch=arch,
        memory_gib=_optional(res.get("memory"), memory=True),
        disk_gib=_optional(disk, memory=True),
        gpu=res.get("gpu") is not None,
        gpu_count=_optional(gpu.get("count")),
        gpu_names=tuple(str(n) for n in names),
        gpu_vendor=str(vendor).lower() if vendor else None,
        gpu_memory_gib=_optional(gpu.get("memory"), memory=True),
        gpu_total_memory_gib=_optional(gpu.get("total_memory"), memory=True),
    )


def _optional(value: Any, *, memory: bool = False) -> Range | None:
    return None if value is None else parse_range(value, memory=memory)


def _cpu(value: Any) -> tuple[Range | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, Mapping):
        arch = value.get("arch")
        return _optional(value.get("count")), str(arch) if arch else None
    text = str(value).strip() if isinstance(value, str) else value
    if isinstance(text, str):
        head, sep, tail = text.partition(":")
        if head.strip().lower() in CPU_ARCHES:
            return (_optional(tail) if sep and tail.strip() else None), head.strip().lower()
    return parse_range(text), None


def _gpu_fields(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    parsed = parse_gpu(value)  # the written form, by the models' own token grammar
    return dict(parsed) if isinstance(parsed, Mapping) else {}
