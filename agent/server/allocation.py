"""GPU, CPU and memory bookkeeping for concurrent jobs on one host (pure).

The server's scheduler chooses GPU indices; the agent checks that a new job's request
fits beside the jobs it already runs: its GPUs exist on this host and are used by no
other active job, and the sums of requested CPUs and memory stay within the host's.
Jobs that request no CPUs or memory are not counted (they share what is left).

``detect_misfit`` is a pure function: no I/O, no clock. It returns the reason a request
does not fit, or ``None``; the job manager turns a reason into ``409 no_capacity``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Capacity:
    """What the host offers."""

    gpus: frozenset[int] = frozenset()
    cpus: float = 0.0
    memory_mib: int = 0


@dataclass(frozen=True)
class Claim:
    """What one job holds (or asks for)."""

    job_id: str
    gpus: frozenset[int] = field(default_factory=frozenset)
    cpus: float | None = None
    memory_mib: int | None = None


def detect_misfit(capacity: Capacity, held: Iterable[Claim], request: Claim) -> str | None:
    """The reason ``request`` does not fit beside ``held`` on ``capacity``, or None."""
    claims = [claim for claim in held if claim.job_id != request.job_id]
    unknown = sorted(request.gpus - capacity.gpus)
    if unknown:
        have = ", ".join(str(i) for i in sorted(capacity.gpus)) or "none"
        return f"GPU {_indices(unknown)} not on this host (GPUs here: {have})"
    taken = {gpu: claim.job_id for claim in claims for gpu in claim.gpus}
    busy = sorted(gpu for gpu in request.gpus if gpu in taken)
    if busy:
        owners = ", ".join(sorted({taken[gpu] for gpu in busy}))
        return f"GPU {_indices(busy)} already allocated to job {owners}"
    if request.cpus is not None:
        used = sum(claim.cpus or 0.0 for claim in claims)
        if used + request.cpus > capacity.cpus + 1e-9:
            return (
                f"{request.cpus:g} CPUs requested, {max(capacity.cpus - used, 0):g} of "
                f"{capacity.cpus:g} free"
            )
    if request.memory_mib is not None:
        used_mib = sum(claim.memory_mib or 0 for claim in claims)
        if used_mib + request.memory_mib > capacity.memory_mib:
            free = max(capacity.memory_mib - used_mib, 0)
            return (
                f"{request.memory_mib} MiB memory requested, {free} of "
                f"{capacity.memory_mib} MiB free"
            )
    return None


def _indices(indices: Iterable[int]) -> str:
    return ", ".join(str(i) for i in indices)
