"""Parsing nvidia-smi / amd-smi / ip outputs (in the formats those tools print)."""

from __future__ import annotations

from pathlib import Path

from agent.protocol import GpuInfo, GpuMetrics, GpuVendor
from agent.server.gpus import parse_amd_info, parse_nvidia_info, parse_nvidia_metrics
from agent.server.hostfacts import parse_ip_addresses, read_memory_mib

RECORDED = Path(__file__).parent / "recorded"


def test_nvidia_info() -> None:
    gpus = parse_nvidia_info((RECORDED / "nvidia-smi-info.csv").read_text())
    assert [gpu.index for gpu in gpus] == [0, 1, 2, 3]
    assert gpus[0] == GpuInfo(
        vendor=GpuVendor.NVIDIA, name="NVIDIA A100-SXM4-80GB", memory_mib=81920, index=0
    )


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
        GpuInfo(vendor=GpuVendor.AMD, name="AMD Instinct MI300X", memory_mib=196592, index=0),
        GpuInfo(vendor=GpuVendor.AMD, name="AMD Instinct MI300X", memory_mib=196592, index=1),
    ]


def test_amd_info_as_gpu_data_with_unit_sizes() -> None:
    gpus = parse_amd_info((RECORDED / "amd-smi-static-gpu-data.json").read_text())
    assert [(gpu.name, gpu.memory_mib) for gpu in gpus] == [
        ("AMD Instinct MI210", 65536),
        ("AMD Radeon PRO W7800", 32768),
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
