"""Pure `utilization_policy` decisions: end a job whose GPUs idle for a whole window.

The jobs worker samples the job's GPU utilization (from the agent's metrics) each pass
and keeps the samples of the last `time_window` seconds in the job's runtime; when the
window is covered and every GPU stayed below `min_gpu_utilization` in every sample, the
job is terminated with `terminated_due_to_utilization_policy`, as dstack does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Sample = tuple[float, tuple[float, ...]]  # (unix time, utilization per GPU in percent)


def keep_window(samples: Sequence[Sample], *, now: float, window: float) -> list[Sample]:
    """Samples still inside the window (plus the newest one before it, to cover the edge)."""
    inside = [s for s in samples if s[0] >= now - window]
    before = [s for s in samples if s[0] < now - window]
    return ([before[-1]] if before else []) + inside


def violates(policy: Mapping[str, Any] | None, samples: Sequence[Sample], *, now: float) -> bool:
    """Whether the samples cover the policy's window with every GPU below the minimum."""
    if not policy or not samples:
        return False
    window = float(policy.get("time_window") or 0)
    minimum = float(policy.get("min_gpu_utilization") or 0)
    if window <= 0 or samples[0][0] > now - window:
        return False  # not observed for a whole window yet
    relevant = [s for s in samples if s[0] >= now - window]
    if not relevant or not all(s[1] for s in relevant):
        return False  # no GPU data: nothing to judge
    return all(max(s[1]) < minimum for s in relevant)
