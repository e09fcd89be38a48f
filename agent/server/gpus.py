"""Parsing of ``nvidia-smi`` and ``amd-smi`` outputs into protocol models (pure).

``hostfacts.py`` runs the tools and hands their stdout here; tests feed recorded outputs.
Queries used (stable machine formats, not the human tables):

- ``nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits``
- ``nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,nounits``
- ``amd-smi static --asic --vram --json``: a list of GPUs, or ``{"gpu_data": [...]}`` on
  newer releases; ``vram.size`` is ``{"value", "unit"}`` or a string such as ``"65536 MB"``.

Unparseable lines are skipped: a GPU we cannot read is reported as absent, never guessed.
Names and sizes are reported as dstack says them (``gpunames.py``): ``H200``, 141 GB.
"""

from __future__ import annotations

import json
from typing import Any

from agent.protocol import GpuInfo, GpuMetrics, GpuVendor
from agent.server.gpunames import dstack_gpu_name, nominal_memory_mib

NVIDIA_INFO_ARGS = (
    "nvidia-smi",
    "--query-gpu=index,name,memory.total",
    "--format=csv,noheader,nounits",
)
NVIDIA_METRICS_ARGS = (
    "nvidia-smi",
    "--query-gpu=index,utilization.gpu,memory.used",
    "--format=csv,noheader,nounits",
)
AMD_INFO_ARGS = ("amd-smi", "static", "--asic", "--vram", "--json")

_MIB_PER_UNIT = {"B": 1 / 2**20, "KB": 1 / 1024, "KIB": 1 / 1024, "MB": 1, "MIB": 1}
_MIB_PER_UNIT |= {"GB": 1024, "GIB": 1024, "TB": 2**20, "TIB": 2**20}


def parse_nvidia_info(text: str) -> list[GpuInfo]:
    gpus = []
    for fields in _csv_rows(text, 3):
        index, name, memory = fields
        number = _to_number(memory)
        if not index.isdigit() or number is None:
            continue
        gpus.append(_gpu(GpuVendor.NVIDIA, name, int(number), int(index)))
    return gpus


def parse_nvidia_metrics(text: str) -> list[GpuMetrics]:
    metrics = []
    for index, utilization, memory in _csv_rows(text, 3):
        if not index.isdigit():
            continue
        metrics.append(
            GpuMetrics(
                index=int(index),
                utilization=_to_number(utilization) or 0.0,
                memory_used_mib=int(_to_number(memory) or 0),
            )
        )
    return metrics


def parse_amd_info(text: str) -> list[GpuInfo]:
    try:
        data: Any = json.loads(text)
    except ValueError:
        return []
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    if not isinstance(data, list):
        return []
    gpus = []
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            continue
        index = item.get("gpu", position)
        asic = item.get("asic") or {}
        vram = item.get("vram") or {}
        name = asic.get("market_name") if isinstance(asic, dict) else None
        memory = _to_mib(vram.get("size")) if isinstance(vram, dict) else None
        if not isinstance(index, int) or not isinstance(name, str) or memory is None:
            continue
        gpus.append(_gpu(GpuVendor.AMD, name, memory, index))
    return gpus


def _gpu(vendor: GpuVendor, tool_name: str, memory_mib: int, index: int) -> GpuInfo:
    name = dstack_gpu_name(tool_name)
    memory = nominal_memory_mib(name, memory_mib)
    return GpuInfo(vendor=vendor, name=name, memory_mib=memory, index=index)


def _csv_rows(text: str, width: int) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == width:
            rows.append(fields)
    return rows


def _to_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _to_mib(size: object) -> int | None:
    if isinstance(size, dict):
        value, unit = size.get("value"), str(size.get("unit", "MB"))
    elif isinstance(size, str) and size.split():
        words = [*size.split(), "MB"]
        value, unit = words[0], words[1]
    else:
        return None
    number = _to_number(str(value))
    factor = _MIB_PER_UNIT.get(unit.upper())
    if number is None or factor is None:
        return None
    return int(number * factor)
