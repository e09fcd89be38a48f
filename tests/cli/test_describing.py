"""`reconciler.cli.describing`: the table cells of ps/fleet, from either resources shape."""

from __future__ import annotations

from reconciler.cli.describing import (
    backend_label,
    describe_resources,
    nodes_label,
    price_label,
    requested_gpu,
)

DSTACK = {
    "cpus": 8,
    "memory_mib": 32768,
    "disk": {"size_mib": 102400},
    "gpus": [{"name": "A100", "memory_mib": 81920, "vendor": "nvidia"}] * 2,
    "spot": False,
}
OURS = {
    "cpus": 8,
    "memory_gb": 32,
    "disk_gb": 100,
    "gpus": [{"name": "A100", "memory_gb": 80}] * 2,
}


def test_both_resource_shapes_read_the_same() -> None:
    line = "cpu=8 mem=32GB disk=100GB gpu=A100:80GB:2"
    assert describe_resources(DSTACK) == describe_resources(OURS) == line
    assert describe_resources(DSTACK, gpu_only=True) == "A100:80GB:2"
    assert describe_resources({"cpus": 2, "gpus": ["T4"]}) == "cpu=2 gpu=T4:1"
    assert describe_resources(None) == describe_resources({}) == "-"
    assert describe_resources({"cpus": 4}, gpu_only=True) == "-"


def test_backend_price_nodes() -> None:
    assert backend_label("local", "remote", "local") == "local (local)"
    assert backend_label(None, "remote", None) == "ssh"
    assert backend_label(None, "aws", "us-east-1") == "aws (us-east-1)"
    assert backend_label(None, None, None) == "-"
    assert price_label(1.25) == "$1.25" and price_label(0.5, spot=True) == "$0.5 (spot)"
    assert price_label(None) == "-"
    assert nodes_label({"min": 0, "target": 0, "max": 4}) == "0..4"
    assert nodes_label({"min": 2, "max": 2}) == "2" and nodes_label({"min": 1}) == "1.."


def test_requested_gpu_of_a_normalized_fleet_spec() -> None:
    gpu = {"name": ["A100"], "count": {"min": 2, "max": 2}, "memory": {"min": 80.0, "max": 80.0}}
    assert requested_gpu({"gpu": gpu}) == "A100:80GB:2"
    assert requested_gpu({"gpu": {"count": {"min": 0, "max": 0}}}) == ""
    assert requested_gpu(None) == ""
