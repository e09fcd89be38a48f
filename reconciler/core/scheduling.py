"""Pure placement of jobs on fleet instances, as dstack's server places them, and why
nothing fits.

The jobs worker loads the candidate instances with their free capacity, calls
`place_job` (or `place_cluster` for multi-node tasks) and writes the chosen instance and
GPU indices; the reconcile preview calls the same functions to show where a run would
land. No I/O, no clock.

A job that could fit an instance once it is free *waits*; a job that no instance could
ever hold fails with `failed_to_start_due_to_no_capacity` and a message naming the
requirement that failed on each instance.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from reconciler.core.hostblocks import BlockSize, blocks_for
from schemas.requirements import Range

DEFAULT_CPU = Range(2, None)  # dstack's defaults when a spec says nothing
DEFAULT_MEMORY = Range(8, None)
ANY_GPUS = Range(0, None)


@dataclass(frozen=True, slots=True)
class Requirements:
    """What one job needs, from the run's `resources` and profile fields."""

    cpu: Range = DEFAULT_CPU
    cpu_arch: str | None = None  # "x86" | "arm"
    memory_gb: Range = DEFAULT_MEMORY
    disk_gb: Range | None = None
    gpu_count: Range = ANY_GPUS
    gpu_names: tuple[str, ...] = ()
    gpu_vendor: str | None = None
    gpu_memory_gb: Range | None = None
    spot_policy: str = "on-demand"  # spot | on-demand | auto
    max_price: float | None = None
    fleets: tuple[str, ...] = ()  # empty: any fleet of the project
    instances: tuple[str, ...] = ()  # empty: any instance of the chosen fleets
    host_ports: frozenset[int] = frozenset()  # ports the job binds on the host itself

    @property
    def wants_gpu(self) -> bool:
        return self.gpu_count.min is not None and self.gpu_count.min > 0


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    name: str
    vendor: str
    memory_gb: float


@dataclass(frozen=True, slots=True)
class Candidate:
    """An instance able to take jobs, with what is already taken on it."""

    instance_id: str
    instance_name: str
    fleet_name: str
    cpus: int
    arch: str  # uname -m
    memory_gb: float
    disk_gb: float
    gpus: tuple[Gpu, ...] = ()
    spot: bool = False
    price: float = 0.0
    total_blocks: int = 1
    busy_blocks: int = 0
    busy_gpus: frozenset[int] = frozenset()
    busy_ports: frozenset[int] = frozenset()  # host ports held by jobs running there
    cluster: bool = False
    block_size: BlockSize | None = None  # set: blocks follow the host (`hostblocks`)


@dataclass(frozen=True, slots=True)
class Placement:
    instance_id: str
    instance_name: str
    gpus: tuple[int, ...]
    blocks: int


@dataclass(frozen=True, slots=True)
class NoFit:
    """Why a job was not placed. `wait` is True when only busy capacity stood in the way."""

    wait: bool
    message: str
    reasons: tuple[str, ...] = field(default=())


def _arch_matches(wanted: str | None, arch: str) -> bool:
    if wanted is None:
        return True
    is_arm = arch in ("aarch64", "arm64")
    return is_arm if wanted == "arm" else not is_arm


def _matching_gpus(req: Requirements, gpus: Sequence[Gpu]) -> list[Gpu]:
    names = {n.lower() for n in req.gpu_names}
    found = []
    for gpu in gpus:
        if names and gpu.name.lower() not in names:
            continue
        if req.gpu_vendor and gpu.vendor.lower() != req.gpu_vendor.lower():
            continue
        if req.gpu_memory_gb and not req.gpu_memory_gb.contains(gpu.memory_gb):
            continue
        found.append(gpu)
    return found


def static_mismatch(req: Requirements, cand: Candidate) -> str | None:
    """The first requirement this instance can never meet, however idle; None if none."""
    if req.fleets and cand.fleet_name not in req.fleets:
        return f"fleet {cand.fleet_name} is not in fleets {list(req.fleets)}"
    if req.instances and cand.instance_name not in req.instances:
        return f"instance {cand.instance_name} is not in instances {list(req.instances)}"
    if not req.cpu.contains(cand.cpus):
        return f"cpu {req.cpu.describe()} not met: the instance has {cand.cpus}"
    if not _arch_matches(req.cpu_arch, cand.arch):
        return f"cpu arch {req.cpu_arch} not met: the instance is {cand.arch}"
    if not req.memory_gb.contains(cand.memory_gb):
        have = f"{cand.memory_gb:.0f}GB"
        return f"memory {req.memory_gb.describe('GB')} not met: the instance has {have}"
    if req.disk_gb and not req.disk_gb.contains(cand.disk_gb):
        return (
            f"disk {req.disk_gb.describe('GB')} not met: the instance has {cand.disk_gb:.0f}GB free"
        )
    if req.spot_policy == "spot" and not cand.spot:
        return "spot_policy spot not met: the instance is on-demand"
    if req.spot_policy == "on-demand" and cand.spot:
        return "spot_policy on-demand not met: the instance is spot"
    if req.max_price is not None and cand.price > req.max_price:
        return f"max_price {req.max_price:g} not met: the instance costs {cand.price:g}/h"
    usable = _matching_gpus(req, cand.gpus)
    if req.wants_gpu and len(usable) < (req.gpu_count.min or 0):
        detail = ", ".join(f"{g.name}:{g.memory_gb:.0f}GB" for g in cand.gpus) or "no GPUs"
        return f"gpu {_describe_gpu(req)} not met: the instance has {detail}"
    if cand.block_size is not None:
        need = blocks_for(req.cpu.min, req.memory_gb.min, cand.block_size)
        if need > cand.total_blocks:
            return f"needs {need} blocks for its cpu and memory: the host has {cand.total_blocks}"
    return None


def _describe_gpu(req: Requirements) -> str:
    parts = [",".join(req.gpu_names)] if req.gpu_names else []
    if req.gpu_vendor:
        parts.insert(0, req.gpu_vendor)
    if req.gpu_memory_gb:
        parts.append(req.gpu_memory_gb.describe("GB"))
    parts.append(req.gpu_count.describe())
    return ":".join(p for p in parts if p)


def _blocks_needed(req: Requirements, cand: Candidate, gpu_count: int) -> int:
    if cand.block_size is not None:
        return blocks_for(req.cpu.min, req.memory_gb.min, cand.block_size)
    if cand.total_blocks <= 1:
        return 1
    if cand.gpus and gpu_count:
        return max(1, gpu_count * cand.total_blocks // len(cand.gpus))
    return 1


def fit_now(req: Requirements, cand: Candidate) -> Placement | None:
    """Place on `cand` with its current free capacity, or None if it is too busy now.

    Jobs that bind host ports (processes, host-network containers) cannot share an
    instance with a job holding the same port: such a job waits for another instance.
    """
    if req.host_ports & cand.busy_ports:
        return None
    usable = [g for g in _matching_gpus(req, cand.gpus) if g.index not in cand.busy_gpus]
    want = int(req.gpu_count.min or 0) if req.wants_gpu else 0
    if len(usable) < want:
        return None
    chosen = tuple(sorted(g.index for g in usable)[:want])
    blocks = _blocks_needed(req, cand, want)
    if cand.busy_blocks + blocks > cand.total_blocks:
        return None
    return Placement(cand.instance_id, cand.instance_name, chosen, blocks)


def wait_rank(run_type: str) -> int:
    """A waiting job's rank in the line for room, before the time it came: services and
    dev environments (0: someone waits on them) ahead of tasks (1), so a queue of batch
    tasks never holds them back."""
    return 1 if run_type == "task" else 0


def place_key(req: Requirements, nodes: int) -> str:
    """The same for two jobs exactly when placement cannot tell them apart: their
    requirements and node count (what the placer decides from, with the candidates).

    Stored with each new job (`jobs.place_key`): a job that finds no room anywhere parks
    the new jobs like it in the waiting line in the same write (`jobsteps.ParkLike`),
    instead of each spending a pass to learn the same."""
    canonical = replace(req, host_ports=frozenset())
    text = f"{canonical!r}|ports={sorted(req.host_ports)}|nodes={nodes}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def room_ask(req: Requirements, candidates: Sequence[Candidate]) -> int | None:
    """The fewest free blocks one instance must have before this job can fit there: the
    least it needs on any candidate that could hold it once idle; None if none could.

    Stored with a job that waits for busy capacity, so that blocks given back wake the
    first waiting job that could use them, not one too big for them (head-of-line
    blocking). A lower bound: GPUs, or ports held, can still keep it out.
    """
    want = int(req.gpu_count.min or 0) if req.wants_gpu else 0
    needs = [
        _blocks_needed(req, cand, want) for cand in candidates if static_mismatch(req, cand) is None
    ]
    return min(needs) if needs else None


def free_blocks(candidates: Sequence[Candidate]) -> int:
    """The most free blocks on any one candidate (0: every instance is full)."""
    return max((c.total_blocks - c.busy_blocks for c in candidates), default=0)


def _rank(cand: Candidate) -> tuple[int, float, str]:
    # Idle instances first, then cheaper, then by name for a deterministic choice.
    return (0 if cand.busy_blocks == 0 else 1, cand.price, cand.instance_name)


def place_job(req: Requirements, candidates: Sequence[Candidate]) -> Placement | NoFit:
    """Choose an instance for one job: idle first, then cheapest, then by name."""
    reasons: list[str] = []
    fitting: list[Candidate] = []
    for cand in sorted(candidates, key=_rank):
        mismatch = static_mismatch(req, cand)
        if mismatch is not None:
            reasons.append(f"{cand.fleet_name}/{cand.instance_name}: {mismatch}")
            continue
        fitting.append(cand)
        placement = fit_now(req, cand)
        if placement is not None:
            return placement
    if fitting:
        names = ", ".join(c.instance_name for c in fitting)
        return NoFit(True, f"waiting for capacity: matching instances are busy ({names})")
    if not candidates:
        return NoFit(False, "no fleets: no instance is available in the project's fleets")
    return NoFit(False, "no offers: " + "; ".join(reasons), tuple(reasons))


def place_cluster(
    req: Requirements, nodes: int, candidates: Sequence[Candidate]
) -> tuple[Placement, ...] | NoFit:
    """Place `nodes` jobs of one multi-node task on distinct instances of one cluster fleet.

    The first placement is the master (rank 0). Only `placement: cluster` fleets qualify.
    """
    by_fleet: dict[str, list[Candidate]] = {}
    for cand in candidates:
        if cand.cluster:
            by_fleet.setdefault(cand.fleet_name, []).append(cand)
    if not by_fleet:
        return NoFit(False, "no fleets: multi-node tasks need a fleet with placement: cluster")
    wait = False
    messages: list[str] = []
    for fleet_name in sorted(by_fleet):
        members = [c for c in by_fleet[fleet_name] if static_mismatch(req, c) is None]
        if len(members) < nodes:
            messages.append(f"{fleet_name}: {len(members)} of {nodes} instances match")
            continue
        placed = [p for c in sorted(members, key=_rank) if (p := fit_now(req, c)) is not None]
        if len(placed) >= nodes:
            return tuple(placed[:nodes])
        wait = True
        messages.append(f"{fleet_name}: {len(placed)} of {nodes} matching instances free")
    prefix = "waiting for capacity: " if wait else "no offers: "
    return NoFit(wait, prefix + "; ".join(messages), tuple(messages))
