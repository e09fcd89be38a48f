"""Pure decisions for a service's replicas: scaling and rolling deployments (surge 1).

The runs worker builds a `ReplicaView` per active replica and calls `decide_replicas`,
then starts and stops what the answer says. A rolling deployment starts one replica of the
new deployment, waits until it is ready, then stops one old replica, and repeats; a new
replica that fails never takes down healthy old ones: after `MAX_ROLLOUT_FAILURES` failed
attempts the rollout stops and says so, and the old replicas keep serving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_ROLLOUT_FAILURES = 3


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One active replica (its latest job) as the decision needs it."""

    replica_num: int
    job_id: str
    deployment_num: int
    ready: bool  # running and its probes pass


@dataclass(frozen=True, slots=True)
class ReplicaDecision:
    start: tuple[int, ...] = ()  # replica numbers to submit with the current deployment
    stop: tuple[str, ...] = ()  # job ids to stop
    stop_reason: str = "scaled_down"
    message: str = ""


def decide_replicas(
    *,
    deployment_num: int,
    desired: int,
    replicas: Sequence[ReplicaView],
    failed_new: int,
    next_replica_num: int,
    surge: bool = True,
) -> ReplicaDecision:
    """What to start and stop now to move toward `desired` replicas of `deployment_num`.

    With `surge=False` (replicas that cannot run side by side on one host, e.g. processes
    binding the same port) an old replica is stopped before its successor starts; the
    proxy holds requests while no replica is ready, so none fails, they only wait.
    """
    old = [r for r in replicas if r.deployment_num < deployment_num]
    new = [r for r in replicas if r.deployment_num >= deployment_num]
    if not old:
        return _scale(new, desired, next_replica_num)
    if failed_new >= MAX_ROLLOUT_FAILURES:
        return ReplicaDecision(
            message=(
                f"rollout of deployment {deployment_num} failed {failed_new} times; "
                f"{len(old)} replica(s) of the previous deployment keep serving"
            )
        )
    ready_new = [r for r in new if r.ready]
    if len(ready_new) >= desired:
        return ReplicaDecision(
            stop=tuple(r.job_id for r in old), stop_reason="terminated_by_server"
        )
    if len(new) > len(ready_new):
        return ReplicaDecision(
            message=f"rolling out deployment {deployment_num}: waiting for readiness"
        )
    if not surge:
        if len(old) + len(new) >= desired:
            victim = max(old, key=lambda r: r.replica_num)
            return ReplicaDecision(stop=(victim.job_id,), stop_reason="terminated_by_server")
        return ReplicaDecision(start=(next_replica_num,))
    if ready_new and len(ready_new) + len(old) > desired:
        victim = max(old, key=lambda r: r.replica_num)
        return ReplicaDecision(stop=(victim.job_id,), stop_reason="terminated_by_server")
    return ReplicaDecision(
        start=(next_replica_num,),
        message=f"rolling out deployment {deployment_num}: {len(ready_new)}/{desired} replicas",
    )


def _scale(new: Sequence[ReplicaView], desired: int, next_num: int) -> ReplicaDecision:
    if len(new) < desired:
        return ReplicaDecision(start=tuple(range(next_num, next_num + desired - len(new))))
    if len(new) > desired:
        surplus = sorted(new, key=lambda r: (r.ready, -r.replica_num))[: len(new) - desired]
        return ReplicaDecision(stop=tuple(r.job_id for r in surplus), stop_reason="scaled_down")
    return ReplicaDecision()
