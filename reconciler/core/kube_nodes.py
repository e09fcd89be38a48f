"""What a Kubernetes cluster has, read from its Node objects (pure, no I/O).

`reconciler.adapters.kubeapi` lists the cluster's nodes (`GET /api/v1/nodes`, in pages)
and hands each node's JSON here, one at a time, to a `NodeTally`, which keeps only one
counter per node shape (never the nodes), so a cluster of 10,000 nodes costs as much
memory as its few shapes:

- `node_shape`: a node's allocatable CPUs (whole cores: `7910m` → 7), memory (MiB) and
  GPUs (`nvidia.com/gpu`, `amd.com/gpu`), its GPU model from the labels NVIDIA's GPU
  operator sets (`nvidia.com/gpu.product` such as `NVIDIA-H100-80GB-HBM3` → `H100`, with
  the catalog's GPU names; `nvidia.com/gpu.memory`: MiB per GPU), its node pool (the
  managed clouds' pool labels, else `nodes`) and whether it takes a pod now (Ready, not
  cordoned);
- `NodeTally.offers`: one `KubeOffer` per (pool, shape), with how many nodes have that
  shape and how many of them can take a pod now.

A quantity Kubernetes would not print raises `KubeParseError` naming the node and field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

GPU_RESOURCES = {"nvidia.com/gpu": "nvidia", "amd.com/gpu": "amd"}
PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per GPU, as the GPU operator sets it
POOL_LABELS = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
    "karpenter.sh/nodepool",
    "node.kubernetes.io/instance-type",
)
DEFAULT_POOL = "nodes"
_SUFFIXES = {
    "Ki": Decimal(1024), "Mi": Decimal(1024**2), "Gi": Decimal(1024**3),
    "Ti": Decimal(1024**4), "Pi": Decimal(1024**5), "Ei": Decimal(1024**6),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
    "P": Decimal(10**15), "E": Decimal(10**18),
}  # fmt: skip
_QUANTITY = re.compile(
    r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_MAX_QUANTITY = Decimal(10**21)


class KubeParseError(ValueError):
    """A node's JSON was not what Kubernetes prints; the message names the node and field."""


def parse_quantity(text: str) -> Decimal:
    """Kubernetes' resource quantity (`500m`, `32Gi`, `1e3`) as a number of units."""
    match = _QUANTITY.match(text.strip())
    if match is None or len(text) > 64:
        raise ValueError(f"`{text[:64]}` is not a Kubernetes quantity")
    try:
        value = Decimal(match.group(1)) * _SUFFIXES[match.group(2) or ""]
    except InvalidOperation:
        raise ValueError(f"`{text[:64]}` is not a Kubernetes quantity") from None
    if not value.is_finite() or value < 0 or value > _MAX_QUANTITY:
        raise ValueError(f"`{text[:64]}` is out of range")
    return value


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What one node offers a pod (allocatable, not capacity: the kubelet's reserve is off)."""

    pool: str
    gpu_vendor: str
    gpu_name: str | None
    gpu_count: int
    gpu_memory_mib: int | None
    cpus: int
    memory_mib: int
    product: str | None  # the `nvidia.com/gpu.product` label as the node has it


@dataclass(frozen=True, slots=True)
class KubeOffer:
    """One node shape in one node pool of one cluster (a dstack region)."""

    cluster: str
    pool: str
    gpu_vendor: str
    gpu_name: str | None
    gpu_count: int
    gpu_memory_mib: int | None
    cpus: int
    memory_mib: int
    nodes: int
    available: int
    product: str | None = None

    @property
    def instance_type(self) -> str:
        return f"{self.pool}:{self.cpus}xCPU:{self.memory_mib}MiB" + (
            f":{self.gpu_count}x{self.gpu_name}" if self.gpu_count else ""
        )


def gpu_name_of(product: str, known: Iterable[str]) -> str:
    """The catalog's name of the GPU model a product label names: `NVIDIA-H100-80GB-HBM3`
    → `H100`, `NVIDIA-RTX-A6000` → `A6000`; the label without its vendor prefix when no
    catalog name is one of its words."""
    words = [w.upper() for w in re.split(r"[-_ ]+", product) if w]
    names = {name.upper(): name for name in known}
    for word in words:
        if word in names and word != "NVIDIA":
            return names[word]
    stripped = re.sub(r"^(NVIDIA|AMD)[-_ ]+", "", product, flags=re.IGNORECASE)
    return stripped or product


def _labels(node: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = node.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _name(node: Mapping[str, Any]) -> str:
    metadata = node.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return str(name)[:253] if name else "?"


def _quantity(node: Mapping[str, Any], values: Mapping[str, Any], key: str) -> Decimal:
    raw = values.get(key, "0")
    try:
        return parse_quantity(str(raw))
    except ValueError as exc:
        raise KubeParseError(f"node `{_name(node)}`: status.allocatable[{key}]: {exc}") from None


def node_shape(node: Mapping[str, Any], known_gpus: Iterable[str]) -> NodeShape:
    """The shape of one Node object (see the module docstring)."""
    status = node.get("status")
    allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(allocatable, Mapping):
        raise KubeParseError(f"node `{_name(node)}`: no status.allocatable")
    labels = _labels(node)
    vendor, count = "", 0
    for resource, kind in GPU_RESOURCES.items():
        found = int(_quantity(node, allocatable, resource))
        if found:
            vendor, count = kind, found
            break
    product = labels.get(PRODUCT_LABEL)
    product = str(product)[:128] if product else None
    name = gpu_name_of(product, known_gpus) if count and product else None
    memory = labels.get(GPU_MEMORY_LABEL)
    gpu_memory = int(str(memory)) if count and memory and str(memory).isdigit() else None
    pool = next((str(labels[k])[:63] for k in POOL_LABELS if labels.get(k)), DEFAULT_POOL)
    return NodeShape(
        pool=pool,
        gpu_vendor=vendor,
        gpu_name=name if count else None,
        gpu_count=count,
        gpu_memory_mib=gpu_memory,
        cpus=int(_quantity(node, allocatable, "cpu")),
        memory_mib=int(_quantity(node, allocatable, "memory") / (1024 * 1024)),
        product=product if count else None,
    )


def node_usable(node: Mapping[str, Any]) -> bool:
    """Whether the node takes a new pod now: Ready and not cordoned."""
    spec = node.get("spec")
    if isinstance(spec, Mapping) and spec.get("unschedulable"):
        return False
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


@dataclass(slots=True)
class NodeTally:
    """Counts nodes per (shape): `add` one node at a time, `offers` at the end."""

    cluster: str
    known_gpus: Sequence[str]
    counts: dict[NodeShape, list[int]] = field(default_factory=dict)
    seen: int = 0

    def add(self, node: Mapping[str, Any]) -> None:
        shape = node_shape(node, self.known_gpus)
        entry = self.counts.setdefault(shape, [0, 0])
        entry[0] += 1
        entry[1] += 1 if node_usable(node) else 0
        self.seen += 1

    def offers(self) -> tuple[KubeOffer, ...]:
        return tuple(
            KubeOffer(
                cluster=self.cluster,
                pool=shape.pool,
                gpu_vendor=shape.gpu_vendor,
                gpu_name=shape.gpu_name,
                gpu_count=shape.gpu_count,
                gpu_memory_mib=shape.gpu_memory_mib,
                cpus=shape.cpus,
                memory_mib=shape.memory_mib,
                nodes=total,
                available=usable,
                product=shape.product,
            )
            for shape, (total, usable) in sorted(
                self.counts.items(), key=lambda item: (item[0].pool, -item[0].gpu_count)
            )
        )


def describe_kube_offers(offers: Sequence[KubeOffer], errors: Sequence[str]) -> str:
    """What the clusters have, in one line for a plan (`cluster/pool: N nodes of …`)."""
    parts = [
        f"{o.cluster}/{o.pool}: {o.nodes} node{'s' if o.nodes != 1 else ''} of "
        + (f"{o.gpu_count}x{o.gpu_name or o.gpu_vendor}, " if o.gpu_count else "")
        + f"{o.cpus} CPUs, {o.memory_mib} MiB ({o.available} ready now)"
        for o in offers
    ]
    text = "; ".join(parts) if parts else "no node"
    return text + "".join(f"; {line}" for line in errors)
