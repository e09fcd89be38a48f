"""The server-side defaults dstack fills before it stores and diffs a run spec.

`priority` -> 0; a task without `groups` gets `nodes: 1`; `resources.gpu: null` -> `0..`;
the GPU `vendor` is inferred (nvidia for the default image when no names are given, else
from the names when they all belong to one vendor). Applied by the run models' validators,
so `normalized()` — what the planner diffs — carries them and parsing it again is a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from schemas.resources import GPUSpec, ResourcesSpec
from schemas.scalars import IntRange

_KNOWN: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "nvidia": frozenset(
            name.lower()
            for name in [
                "A10",
                "A100",
                "A10G",
                "A16",
                "A40",
                "A4000",
                "A4500",
                "A5000",
                "A6000",
                "B200",
                "B300",
                "GB200",
                "GB300",
                "GH200",
                "H100",
                "H100NVL",
                "H200",
                "H200NVL",
                "L4",
                "L40",
                "L40S",
                "P100",
                "RTX2000Ada",
                "RTX2060",
                "RTX2060SUPER",
                "RTX2070",
                "RTX2070SUPER",
                "RTX2080",
                "RTX2080SUPER",
                "RTX2080Ti",
                "RTX3050",
                "RTX3060",
                "RTX3060Ti",
                "RTX3070",
                "RTX3070Ti",
                "RTX3080",
                "RTX3080Ti",
                "RTX3090",
                "RTX3090Ti",
                "RTX4000Ada",
                "RTX4060",
                "RTX4060Ti",
                "RTX4070",
                "RTX4070SUPER",
                "RTX4070Ti",
                "RTX4070TiSUPER",
                "RTX4080",
                "RTX4080SUPER",
                "RTX4090",
                "RTX5060",
                "RTX5060Ti",
                "RTX5070",
                "RTX5070Ti",
                "RTX5080",
                "RTX5090",
                "RTX6000",
                "RTX6000Ada",
                "RTXPRO4500",
                "RTXPRO6000",
                "T4",
                "V100",
            ]
        ),
        "amd": frozenset(
            [
                "mi100",
                "mi210",
                "mi250",
                "mi250x",
                "mi300a",
                "mi300x",
                "mi308x",
                "mi325x",
                "mi350x",
                "mi355x",
            ]
        ),
        "intel": frozenset(("gaudi", "gaudi2", "gaudi3")),
        "tenstorrent": frozenset(
            ["n150", "n300", "p100a", "p150", "p300", "tt-galaxy-bh", "tt-galaxy-wh"]
        ),
    }
)
_TPU_VERSIONS = frozenset(("v2", "v3", "v4", "v5litepod", "v5p", "v6e"))
NO_GPU_DEFAULT = GPUSpec(count=IntRange(min=0))


def detect_vendors(name: str) -> set[str]:
    """Vendors that make an accelerator called `name` (case-insensitive; TPUs `v5p-8`)."""
    lowered = name.lower()
    vendors = {vendor for vendor, names in _KNOWN.items() if lowered in names}
    version, _, cores = lowered.partition("-")
    if cores.isdigit() and version in _TPU_VERSIONS:
        vendors.add("google")
    return vendors


def infer_vendor(gpu: GPUSpec, image: str | None, docker: bool | None) -> str | None:
    """The vendor dstack's server would fill in, or None when it cannot tell."""
    if gpu.vendor is not None:
        return gpu.vendor
    if gpu.count.max == 0:
        return None
    if not gpu.name:
        return "nvidia" if image is None and not docker else None
    vendors: set[str | None] = set()
    for name in gpu.name:
        vendors.update(detect_vendors(name) or {None})
    return vendors.pop() if len(vendors) == 1 else None


def with_server_defaults(
    resources: ResourcesSpec, image: str | None, docker: bool | None
) -> ResourcesSpec:
    """`resources` with the GPU default and vendor filled (the same object when unchanged)."""
    gpu = resources.gpu if resources.gpu is not None else NO_GPU_DEFAULT
    vendor = infer_vendor(gpu, image, docker)
    if vendor != gpu.vendor:
        gpu = gpu.model_copy(update={"vendor": vendor})
    if gpu is resources.gpu:
        return resources
    return resources.model_copy(update={"gpu": gpu})
