"""The `resources` grammar: cpu (with arch), memory, shm_size, disk and the GPU tokens.

GPU strings are `:`-joined tokens in any order, each kind at most once: a vendor
(`nvidia`, `amd`, `google`/`tpu`, `intel`, `tenstorrent`/`tt`), names (`H100,A100`, start
with a letter), a memory (has a unit: `24GB`, `24GB..`) and a count (`2`, `2..8`).
`A100:40GB:2` -> name [A100], memory 40..40, count 2. A spec without a count means `1..`;
no `gpu` at all means `0..`. Used by run, group and fleet models.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from schemas.base import StrictModel
from schemas.problems import excerpt
from schemas.scalars import IntRange, Memory, MemoryRange

GpuVendor = Literal["nvidia", "amd", "google", "intel", "tenstorrent"]
CpuArch = Literal["x86", "arm"]
_VENDOR_ALIASES: Mapping[str, str] = MappingProxyType({"tpu": "google", "tt": "tenstorrent"})
_VENDORS = ("nvidia", "amd", "google", "intel", "tenstorrent")


def to_vendor(token: str) -> str | None:
    """The canonical vendor for a token, or None when the token is not a vendor."""
    lowered = token.lower()
    lowered = _VENDOR_ALIASES.get(lowered, lowered)
    return lowered if lowered in _VENDORS else None


def _parse_cpu(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        spec: dict[str, Any] = {}
        for token in value.replace(" ", "").split(":"):
            if not token:
                raise ValueError(f"CPU spec contains an empty token: {excerpt(value)}")
            if ".." in token or token.isdigit():
                if "count" in spec:
                    raise ValueError(f"CPU spec has two counts: {excerpt(value)}")
                spec["count"] = token
            elif token.lower() in ("x86", "arm"):
                if "arch" in spec:
                    raise ValueError(f"CPU spec has two architectures: {excerpt(value)}")
                spec["arch"] = token.lower()
            else:
                raise ValueError(
                    f"invalid CPU architecture in {excerpt(value)}: use `x86` or `arm`"
                )
        return spec
    if isinstance(value, dict) and value and set(value) <= {"min", "max"}:
        return {"count": value}
    return value


class CPUSpec(StrictModel):
    """`8`, `8..`, `arm:8..`, `x86`, `{arch, count}`."""

    json_shorthands = ("string", "integer")

    arch: CpuArch | None = None
    """`x86` or `arm`."""
    count: IntRange = IntRange(min=2)
    """Number of CPUs: `8`, `8..`, `4..16`."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return _parse_cpu(value)

    @field_validator("arch", mode="before")
    @classmethod
    def _lower_arch(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


def _parse_gpu_token(spec: dict[str, Any], token: str, text: str) -> None:
    vendor = to_vendor(token)
    item: str | list[str]
    if vendor is not None:
        kind, item = "vendor", vendor
    elif token[0].isalpha():
        names = token.split(",")
        if any(not name for name in names):
            raise ValueError(f"GPU name cannot be empty: {excerpt(text)}")
        kind, item = "name", names
    elif any(char.isalpha() for char in token):
        kind, item = "memory", token
    else:
        kind, item = "count", token
    if kind in spec:
        raise ValueError(f"GPU spec has two {kind} tokens: {excerpt(text)}")
    spec[kind] = item


def parse_gpu(value: Any) -> Any:
    """A written GPU spec (`A100:40GB:2`, `2`) as its fields (`name`, `memory`, `count`,
    `vendor`: canonical); other values as they are. The one GPU token grammar: the models
    here and `schemas.requirements.resources_of` both read through it."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        spec: dict[str, Any] = {}
        for token in value.replace(" ", "").split(":"):
            if not token:
                raise ValueError(f"GPU spec contains an empty token: {excerpt(value)}")
            _parse_gpu_token(spec, token, value)
        return spec
    return value


def _parse_compute_capability(value: Any) -> Any:
    if isinstance(value, float):
        value = str(value)
    if isinstance(value, str):
        value = value.strip().split(".")
    if isinstance(value, list | tuple):
        if len(value) != 2:
            raise ValueError(f"invalid compute capability {excerpt(value)}: use e.g. `8.0`")
        try:
            return (int(value[0]), int(value[1]))
        except (TypeError, ValueError):
            raise ValueError(
                f"invalid compute capability {excerpt(value)}: use e.g. `8.0`"
            ) from None
    raise ValueError(f"invalid compute capability {excerpt(value)}: use e.g. `8.0`")


ComputeCapability = Annotated[
    tuple[int, int],
    BeforeValidator(_parse_compute_capability, json_schema_input_type=float | str | list[int]),
]


class GPUSpec(StrictModel):
    """A GPU requirement: tokens string, count, range, or the mapping form."""

    json_shorthands = ("string", "integer")

    vendor: GpuVendor | None = None
    """`nvidia`, `amd`, `google` (`tpu`), `intel`, `tenstorrent` (`tt`)."""
    name: list[str] | None = None
    """GPU names, e.g. `[H100, A100]`."""
    count: IntRange = IntRange(min=1)
    """Number of GPUs: `2`, `2..8`."""
    memory: MemoryRange | None = None
    """Memory per GPU: `40GB`, `24GB..`."""
    total_memory: MemoryRange | None = None
    """Total GPU memory."""
    compute_capability: ComputeCapability | None = None
    """Minimum compute capability, e.g. `8.0`."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return parse_gpu(value)

    @field_validator("vendor", mode="before")
    @classmethod
    def _vendor(cls, value: Any) -> Any:
        if isinstance(value, str):
            return to_vendor(value) or value
        return value

    @field_validator("name", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if value is None:
            return None
        names = value if isinstance(value, list) else [value]
        return [n[4:] if isinstance(n, str) and n.startswith("tpu-") else n for n in names]


class DiskSpec(StrictModel):
    """`200GB..1TB`, `100GB` or `{size}`."""

    json_shorthands = ("string", "number")

    size: MemoryRange
    """Disk size: `100GB`, `200GB..1TB`."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return {"size": value}
        return value


class ResourcesSpec(StrictModel):
    """`resources`: defaults `cpu: 2..`, `memory: 8GB..`, `disk: 100GB..`, `gpu: 0..`."""

    cpu: CPUSpec = CPUSpec()
    """CPUs: `8`, `4..`, `arm:8..` (default `2..`)."""
    memory: MemoryRange = MemoryRange(min=8.0)
    """RAM: `64GB`, `32GB..` (default `8GB..`)."""
    shm_size: Memory | None = None
    """Shared memory size, e.g. `16GB`."""
    gpu: GPUSpec | None = GPUSpec(count=IntRange(min=0))
    """GPUs: `A100:40GB:2`, `H100:8`, `24GB..`, `nvidia:2..4`, `0`, or a mapping."""
    disk: DiskSpec | None = DiskSpec(size=MemoryRange(min=100.0))
    """Disk: `200GB..` (default `100GB..`)."""


Resources = Annotated[ResourcesSpec, Field(default_factory=ResourcesSpec)]
