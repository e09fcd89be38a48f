"""Parsing nvidia-smi / amd-smi / ip outputs (in the formats those tools print)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.protocol import GpuInfo, GpuMetrics, GpuVendor
from agent.server.gpus import parse_amd_info, parse_nvidia_info, parse_nvidia_metrics
from agent.server.hostfacts import parse_ip_addresses, read_memory_mib

RECORDED = Path(__file__).parent / "recorded"


def test_nvidia_info() -> None:
    gpus = parse_nvidia_info((RECORDED / "nvidia-smi-info.csv").read_text())
    assert [gpu.index for gpu in gpus] == [0, 1, 2, 3]
    assert gpus[0] == GpuInfo(vendor=GpuVendor.NVIDIA, name="A100", memory_mib=81920, index=0)


def test_nvidia_info_skips_garbage() -> None:
    text = "NVIDIA-SMI has failed because it couldn't communicate with the driver\n0, T4, [N/A]\n"
    assert parse_nvidia_info(text) == []


def test_nvidia_metrics_with_unavailable_values() -> None:
    metrics = parse_nvidia_metrics((RECORDED / "nvidia-smi-metrics.csv").read_text())
    assert metrics[0] == GpuMetrics(index=0, utilization=87.0, memory_used_mib=40960)
    assert metrics[2] == GpuMetrics(index=2, utilization=0.0, memory_used_mib=0)
    assert len(metrics) == 4


def test_amd_info_as_a_list_with_string_sizes() -> None:
    gpus = parse_amd_info((RECORDED / "amd-smi-static-list.json").read_text())
    assert gpus == [
        GpuInfo(vendor=GpuVendor.AMD, name="MI300X", memory_mib=196608, index=0),
        GpuInfo(vendor=GpuVendor.AMD, name="MI300X", memory_mib=196608, index=1),
    ]


def test_amd_info_as_gpu_data_with_unit_sizes() -> None:
    gpus = parse_amd_info((RECORDED / "amd-smi-static-gpu-data.json").read_text())
    assert [(gpu.name, gpu.memory_mib) for gpu in gpus] == [
        ("MI210", 65536),
        ("PROW7800", 32768),
    ]


def test_amd_info_not_json() -> None:
    assert parse_amd_info("amd-smi: command failed") == []


def test_ip_addresses_global_only() -> None:
    assert parse_ip_addresses((RECORDED / "ip-addr.json").read_text()) == ["10.0.3.15"]


def test_memory_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683520 kB\nMemFree:         1000 kB\n")
    assert read_memory_mib(meminfo) == 24105
    assert read_memory_mib(tmp_path / "missing") == 0


@pytest.mark.parametrize(
    ("tool_name", "memory_mib", "name", "memory_gb"),
    [
        ("NVIDIA H200", 143771, "H200", 141),
        ("NVIDIA H100 80GB HBM3", 81559, "H100", 80),
        ("NVIDIA H100 NVL", 95830, "H100NVL", 94),
        ("NVIDIA A100-SXM4-40GB", 40960, "A100", 40),
        ("NVIDIA A100 80GB PCIe", 81920, "A100", 80),
        ("Tesla T4", 15360, "T4", 16),
        ("Tesla V100-SXM2-16GB", 16384, "V100", 16),
        ("NVIDIA A10G", 23028, "A10G", 24),
        ("NVIDIA L40S", 46068, "L40S", 48),
        ("NVIDIA GeForce RTX 4090", 24564, "RTX4090", 24),
        ("NVIDIA RTX A6000", 49140, "A6000", 48),
        ("NVIDIA RTX 6000 Ada Generation", 49140, "RTX6000Ada", 47.98828125),
    ],
)
def test_nvidia_names_and_sizes_as_dstack_says_them(
    tool_name: str, memory_mib: int, name: str, memory_gb: float
) -> None:
    [gpu] = parse_nvidia_info(f"0, {tool_name}, {memory_mib}\n")
    assert (gpu.name, gpu.memory_mib / 1024) == (name, memory_gb)


def test_a_size_far_from_the_nominal_one_is_kept() -> None:
    # A MIG slice or a capped board: never round a 20 GB A100 up to 40.
    [gpu] = parse_nvidia_info("0, NVIDIA A100-SXM4-40GB, 20480\n")
    assert (gpu.name, gpu.memory_mib) == ("A100", 20480)
