"""The local fleet's capacity: blocks sized from the host, taken by what each job asks for.

The local fleet is the server's own host, shared by small jobs. When its fleet sets no
`blocks` (or `blocks: 1`), its one instance is split into blocks by the host's facts (the
agent's `GET /host`), and a job takes as many blocks as its `resources` minimums need:

- a block is about `BLOCK_MIB` of the host's memory, less `reserved_mib` kept for the
  server, the agent and the system: `(memory_mib - reserved_mib) // BLOCK_MIB`, rounded
  down to a multiple of the CPU shares;
- CPUs are shared: up to `CPU_SHARE` jobs' CPU minimums per CPU, spread over the same
  blocks (`block_cpus = cpus * CPU_SHARE / total`);
- a job takes `max(1, ceil(cpu.min / block_cpus), ceil(memory.min / block_memory))`
  blocks; a job that states neither takes one block.

So a 2-CPU, 24 GB host has 1,440 blocks: `cpu: 1..` jobs run 16 at once (CPU-bound),
`cpu: 2..` (dstack's default) 8, and `cpu: 0..`, `memory: 10MB..` jobs 1,440. A
fleet that sets `blocks: N` (N > 1) or `auto` keeps dstack's meaning (one job per block
unless it asks for GPUs). Called by the instances worker (the total, from host facts) and
the store's placement candidates (the block size); `scheduling` counts a job's blocks.
Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BLOCK_MIB = 16
"""Memory per block (MiB): the smallest memory a job on the local host is counted for."""
CPU_SHARE = 8
"""How many jobs' CPU minimums one CPU of the local host takes."""


@dataclass(frozen=True, slots=True)
class BlockSize:
    """What one block of a host-sized instance stands for."""

    cpus: float
    memory_gb: float


def host_sized(backend: str, fleet_blocks: object) -> bool:
    """Whether the instance's blocks follow its host (the local fleet without `blocks`)."""
    return backend == "local" and fleet_blocks in (None, 1)


def reserved_mib(memory_mib: int) -> int:
    """Memory kept out of the blocks: a quarter of the host, at most 1 GiB."""
    return min(1024, memory_mib // 4)


def total_blocks(host_info: Mapping[str, Any]) -> int:
    """The host's blocks from its facts (`memory_mib`, `cpus`); at least one. Rounded down
    to a multiple of the CPU shares, so a CPU share is a whole number of blocks."""
    memory = int(host_info.get("memory_mib") or 0)
    blocks = max(1, (memory - reserved_mib(memory)) // BLOCK_MIB)
    shares = max(1, int(host_info.get("cpus") or 1) * CPU_SHARE)
    return blocks - blocks % shares if blocks >= shares else blocks


def block_size(host_info: Mapping[str, Any], total: int) -> BlockSize:
    """The CPUs and memory one of `total` blocks stands for (`total_blocks(host_info)`
    blocks are `BLOCK_MIB` each; an instance not resized yet has bigger ones)."""
    cpus = float(host_info.get("cpus") or 1)
    memory = int(host_info.get("memory_mib") or 0)
    usable_gb = max(BLOCK_MIB, memory - reserved_mib(memory)) / 1024
    return BlockSize(cpus=cpus * CPU_SHARE / max(1, total), memory_gb=usable_gb / max(1, total))


def blocks_for(cpu_min: float | None, memory_min_gb: float | None, size: BlockSize) -> int:
    """Blocks a job with these minimums takes on a host-sized instance."""
    need = 1
    if cpu_min and size.cpus > 0:
        need = max(need, math.ceil(cpu_min / size.cpus - 1e-9))
    if memory_min_gb and size.memory_gb > 0:
        need = max(need, math.ceil(memory_min_gb / size.memory_gb - 1e-9))
    return need
