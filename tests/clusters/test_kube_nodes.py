"""What a Kubernetes cluster offers, from its Node objects' JSON as the API server writes it
(`reconciler.core.kube_nodes`, pure): allocatable quantities, the GPU operator's labels,
node pools, readiness, and quantities that are not Kubernetes'."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from reconciler.core.kube_nodes import (
    KubeParseError,
    NodeTally,
    describe_kube_offers,
    gpu_name_of,
    node_shape,
    parse_quantity,
)

KNOWN = ("H100", "A100", "A6000", "L4", "H200")


def _node(
    name: str,
    allocatable: dict[str, str],
    labels: dict[str, str] | None = None,
    ready: str = "True",
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": ready}]},
    }


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8),
        ("7910m", Decimal("7.91")),
        ("32Gi", 32 * 1024**3),
        ("1e3", 1000),
        ("32856636Ki", 32856636 * 1024),
        ("500M", 500 * 10**6),
        ("0", 0),
    ],
)
def test_quantities_are_read_as_kubernetes_writes_them(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "8 cores", "-1", "1Zi", "1e400", "x" * 100, "NaN"])
def test_what_is_not_a_quantity_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_a_node_with_an_unreadable_quantity_is_named_with_its_field() -> None:
    with pytest.raises(KubeParseError, match=r"node `gpu-1`: status.allocatable\[memory\]"):
        node_shape(_node("gpu-1", {"cpu": "8", "memory": "lots"}), KNOWN)


@pytest.mark.parametrize(
    ("product", "name"),
    [
        ("NVIDIA-H100-80GB-HBM3", "H100"),
        ("NVIDIA-A100-SXM4-40GB", "A100"),
        ("NVIDIA-RTX-A6000", "A6000"),
        ("NVIDIA-L4", "L4"),
        ("NVIDIA-Made-Up-9", "Made-Up-9"),
    ],
)
def test_the_gpu_operator_s_product_label_names_the_catalog_s_gpu(product: str, name: str) -> None:
    assert gpu_name_of(product, KNOWN) == name


def test_nodes_are_counted_per_pool_and_shape_with_what_takes_a_pod_now() -> None:
    gpu = {"cpu": "191900m", "memory": "2000Gi", "nvidia.com/gpu": "8"}
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "cloud.google.com/gke-nodepool": "h100-pool",
    }
    tally = NodeTally("prod", KNOWN)
    tally.add(_node("g1", gpu, labels))
    tally.add(_node("g2", gpu, labels, unschedulable=True))  # cordoned
    tally.add(_node("g3", gpu, labels, ready="False"))
    tally.add(_node("c1", {"cpu": "4", "memory": "16Gi"}))
    h100, cpu = tally.offers()
    assert (h100.cluster, h100.pool, h100.gpu_vendor, h100.gpu_name, h100.gpu_count) == (
        "prod",
        "h100-pool",
        "nvidia",
        "H100",
        8,
    )
    assert (h100.gpu_memory_mib, h100.cpus, h100.memory_mib) == (81559, 191, 2000 * 1024)
    assert (h100.nodes, h100.available) == (3, 1)
    assert (cpu.pool, cpu.gpu_count, cpu.gpu_name, cpu.cpus, cpu.nodes, cpu.available) == (
        "nodes",
        0,
        None,
        4,
        1,
        1,
    )
    assert describe_kube_offers(tally.offers(), ["cluster `b`: down"]) == (
        "prod/h100-pool: 3 nodes of 8xH100, 191 CPUs, 2048000 MiB (1 ready now); "
        "prod/nodes: 1 node of 4 CPUs, 16384 MiB (1 ready now); cluster `b`: down"
    )


def test_a_tally_keeps_one_counter_per_shape_not_the_nodes() -> None:
    tally = NodeTally("big", KNOWN)
    for index in range(5000):
        tally.add(_node(f"n{index}", {"cpu": "8", "memory": "32Gi"}))
    assert len(tally.counts) == 1 and tally.seen == 5000
    (offer,) = tally.offers()
    assert offer.nodes == 5000


def test_an_amd_node_offers_its_gpus_without_a_name_label() -> None:
    shape = node_shape(_node("m", {"cpu": "8", "memory": "8Gi", "amd.com/gpu": "2"}), KNOWN)
    assert (shape.gpu_vendor, shape.gpu_count, shape.gpu_name) == ("amd", 2, None)
