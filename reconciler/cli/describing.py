"""How the CLI's tables describe runs, fleets and instances, in dstack's words.

Pure text helpers over the API's JSON (dicts): the resources of an instance type
(`cpu=8 mem=32GB disk=100GB gpu=A100:80GB:2`), a backend and region (`aws (us-east-1)`,
SSH hosts as `ssh`, this host as `local`), prices (`$1.25`), node ranges (`0..4`) and a
fleet's requested GPU. Called by `cli.ps` and `cli.resources`; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MIB_PER_GB = 1024


def _gb(mib: Any) -> str:
    return f"{float(mib) / MIB_PER_GB:g}GB"


def _mib(item: Mapping[str, Any], key: str) -> float:
    """`<key>_mib`, or `<key>_gb` in MiB (our stored resources use GB, dstack's MiB)."""
    if item.get(f"{key}_mib"):
        return float(item[f"{key}_mib"])
    return float(item.get(f"{key}_gb") or 0) * MIB_PER_GB


def _gpu_part(gpus: list[Any]) -> str:
    """`A100:80GB:2` for a list of GPUs (dicts with a name and memory, or bare names)."""
    if not gpus:
        return ""
    first = gpus[0]
    if not isinstance(first, Mapping):
        return f"{first}:{len(gpus)}"
    memory = _mib(first, "memory")
    parts = [str(first.get("name") or "gpu"), *([_gb(memory)] if memory else [])]
    return ":".join([*parts, str(len(gpus))])


def describe_resources(resources: Any, *, gpu_only: bool = False) -> str:
    """An instance's resources in one line: `cpu=8 mem=32GB disk=100GB gpu=A100:80GB:2`.

    Reads dstack's `Resources` (`memory_mib`, `disk {size_mib}`, `gpus [{name,
    memory_mib}]`) and our stored form (`memory_gb`, `disk_gb`). `gpu_only` gives just the
    GPU part; `-` when there is nothing to say.
    """
    if not isinstance(resources, Mapping):
        return "-"
    gpu = _gpu_part(list(resources.get("gpus") or []))
    if gpu_only:
        return gpu or "-"
    parts = []
    if resources.get("cpus"):
        parts.append(f"cpu={resources['cpus']}")
    if _mib(resources, "memory"):
        parts.append(f"mem={_gb(_mib(resources, 'memory'))}")
    disk = resources.get("disk")
    disk_mib = _mib(disk, "size") if isinstance(disk, Mapping) else _mib(resources, "disk")
    if disk_mib:
        parts.append(f"disk={_gb(disk_mib)}")
    if gpu:
        parts.append(f"gpu={gpu}")
    return " ".join(parts) or "-"


def instance_resources(instance_type: Any) -> Any:
    """The `resources` of dstack's `InstanceType {name, resources}` (None if absent)."""
    return instance_type.get("resources") if isinstance(instance_type, Mapping) else None


def instance_type_name(instance_type: Any) -> str:
    if isinstance(instance_type, Mapping):
        return str(instance_type.get("name") or "-")
    return str(instance_type or "-")


def backend_label(ours: str | None, dstacks: str | None, region: str | None) -> str:
    """Our backend name when the server gives it, else dstack's (`remote` shown as `ssh`)."""
    name = ours or ("ssh" if dstacks == "remote" else dstacks)
    if not name:
        return "-"
    return f"{name} ({region})" if region else name


def price_label(price: Any, *, spot: bool = False) -> str:
    if price is None:
        return "-"
    text = f"${float(price):.4f}".rstrip("0").rstrip(".")
    return f"{text} (spot)" if spot else text


def nodes_label(nodes: Any) -> str:
    """A fleet's `nodes` (`{min, target, max}` or a number) as `2`, `0..4` or `1..`."""
    if isinstance(nodes, int):
        return str(nodes)
    if not isinstance(nodes, Mapping):
        return ""
    low, high = nodes.get("min"), nodes.get("max")
    if low == high:
        return str(low)
    return f"{low}.." if high is None else f"{low}..{high}"


def requested_gpu(resources: Any) -> str:
    """A fleet's requested GPU (normalized `resources.gpu`) as `A100:80GB:2`, or ``."""
    gpu = resources.get("gpu") if isinstance(resources, Mapping) else None
    if not isinstance(gpu, Mapping):
        return ""
    count = gpu.get("count") if isinstance(gpu.get("count"), Mapping) else {}
    if not count or not count.get("max", count.get("min")):
        return ""
    names = gpu.get("name") or [gpu.get("vendor") or "gpu"]
    parts = [",".join(str(n) for n in names)] if isinstance(names, list) else [str(names)]
    memory = gpu.get("memory") if isinstance(gpu.get("memory"), Mapping) else None
    if memory and memory.get("min") is not None:
        parts.append(_range(memory.get("min"), memory.get("max"), "GB"))
    parts.append(_range(count.get("min"), count.get("max"), ""))
    return ":".join(parts)


def _range(low: Any, high: Any, unit: str) -> str:
    def one(value: Any) -> str:
        return "" if value is None else f"{float(value):g}{unit}"

    return one(low) if low == high else f"{one(low)}..{one(high)}"
