"""A job's resource usage at one moment, as the agent sampled it (typed, no I/O).

The server asks the job's agent (`GET /jobs/{id}/metrics`) when a client reads a run's
metrics; `reconciler.core.jobmetrics` turns samples into dstack's `JobMetrics` shape.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One of the job's GPUs, in the job's own order (its `gpu0`, `gpu1`, …)."""

    utilization_percent: float
    memory_used_bytes: int
    host_index: int = -1  # the GPU's index on its host (-1: not known)


@dataclass(frozen=True, slots=True)
class JobSample:
    timestamp: float  # unix seconds
    cpu_percent: float  # of one CPU: 200.0 is two CPUs busy
    memory_bytes: int
    gpus: tuple[GpuSample, ...] = ()
