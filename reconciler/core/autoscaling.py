"""Pure autoscaling of services on requests per second, as dstack's service `scaling` does.

desired = ceil(rps / target) clamped to the replica range; a change waits
`scale_up_delay` / `scale_down_delay` since the last change, except scaling up from zero,
which is immediate. The runs worker passes the proxy's request rate and its own clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    min_replicas: int
    max_replicas: int
    target_rps: float
    scale_up_delay: float = 300.0
    scale_down_delay: float = 600.0


def desired_replicas(
    policy: ScalingPolicy,
    *,
    current: int,
    rps: float,
    now: float,
    last_scaled_at: float | None,
) -> int:
    """How many replicas the service should have now."""
    wanted = math.ceil(rps / policy.target_rps) if rps > 0 else 0
    wanted = max(policy.min_replicas, min(policy.max_replicas, wanted))
    if wanted == current:
        return current
    if current == 0 and wanted > 0:
        return wanted
    since = math.inf if last_scaled_at is None else now - last_scaled_at
    delay = policy.scale_up_delay if wanted > current else policy.scale_down_delay
    return wanted if since >= delay else current
