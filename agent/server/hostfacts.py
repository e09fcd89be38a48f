"""Facts about this host: CPUs, arch, memory, disk, GPUs, addresses, executors.

Tools are run through a ``ToolRunner`` (passed in, so tests feed recorded outputs);
a missing tool or a failing one means "no such GPUs here", never an error. Parsing
lives in ``gpus.py`` (pure) and ``parse_ip_addresses`` below.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import socket
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from agent.protocol import GpuInfo, GpuMetrics, HostInfo
from agent.server import gpus
from agent.server.allocation import Capacity
from agent.server.executors.base import Executor

ToolRunner = Callable[[tuple[str, ...]], Awaitable[str | None]]
TOOL_TIMEOUT = 10.0


async def run_tool(argv: tuple[str, ...]) -> str | None:
    """stdout of ``argv``, or None when the tool is missing, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
    except OSError:
        return None
    try:
        stdout, _ = await asyncio.wait_for(process.communicate(), TOOL_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        return None
    return stdout.decode(errors="replace") if process.returncode == 0 else None


async def detect_gpus(runner: ToolRunner) -> list[GpuInfo]:
    nvidia = await runner(gpus.NVIDIA_INFO_ARGS)
    found = gpus.parse_nvidia_info(nvidia) if nvidia else []
    amd = await runner(gpus.AMD_INFO_ARGS)
    if amd:
        found += gpus.parse_amd_info(amd)
    return found


async def sample_gpus(runner: ToolRunner) -> list[GpuMetrics]:
    output = await runner(gpus.NVIDIA_METRICS_ARGS)
    return gpus.parse_nvidia_metrics(output) if output else []


def parse_ip_addresses(text: str) -> list[str]:
    """Global addresses from ``ip -j addr show`` (loopback and link-local left out)."""
    try:
        interfaces: Any = json.loads(text)
    except ValueError:
        return []
    addresses = []
    for interface in interfaces if isinstance(interfaces, list) else []:
        for info in interface.get("addr_info", []) if isinstance(interface, dict) else []:
            if isinstance(info, dict) and info.get("scope") == "global" and info.get("local"):
                addresses.append(str(info["local"]))
    return addresses


def read_memory_mib(meminfo: Path = Path("/proc/meminfo")) -> int:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


async def detect_host(
    *, data_dir: Path, executors: Iterable[Executor], runner: ToolRunner
) -> HostInfo:
    ip_output = await runner(("ip", "-j", "addr", "show"))
    available = [executor.kind for executor in executors if await executor.is_available()]
    return HostInfo(
        hostname=socket.gethostname(),
        cpus=len(os.sched_getaffinity(0)),
        arch=platform.machine(),
        memory_mib=read_memory_mib(),
        disk_mib=shutil.disk_usage(data_dir).free // 2**20,
        gpus=await detect_gpus(runner),
        executors=available,
        addresses=parse_ip_addresses(ip_output) if ip_output else [],
    )


def to_capacity(host: HostInfo) -> Capacity:
    return Capacity(
        gpus=frozenset(gpu.index for gpu in host.gpus),
        cpus=float(host.cpus),
        memory_mib=host.memory_mib,
    )
