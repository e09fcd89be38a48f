"""Rolling deployments and autoscaling decisions (reconciler.core.rollout, .autoscaling)."""

from __future__ import annotations

from reconciler.core.autoscaling import ScalingPolicy, desired_replicas
from reconciler.core.rollout import MAX_ROLLOUT_FAILURES, ReplicaView, decide_replicas


def _r(num: int, dep: int, ready: bool = True) -> ReplicaView:
    return ReplicaView(num, f"j{num}", dep, ready)


def _simulate(desired: int, old: int) -> list[int]:
    """Drive a rollout to the end, every new replica becoming ready at once; return the
    number of ready replicas seen after each step."""
    replicas = [_r(i, 0) for i in range(old)]
    next_num = old
    seen = []
    for _ in range(20):
        d = decide_replicas(
            deployment_num=1,
            desired=desired,
            replicas=replicas,
            failed_new=0,
            next_replica_num=next_num,
        )
        if not d.start and not d.stop:
            break
        replicas = [r for r in replicas if r.job_id not in d.stop]
        for num in d.start:
            replicas.append(_r(num, 1))
            next_num = num + 1
        seen.append(sum(r.ready for r in replicas))
    assert all(r.deployment_num == 1 for r in replicas)
    return seen


def test_rolling_update_never_drops_below_desired() -> None:
    for desired in (1, 2, 3):
        seen = _simulate(desired, desired)
        assert seen
        assert min(seen) >= desired


def test_new_replica_not_ready_waits() -> None:
    d = decide_replicas(
        deployment_num=1,
        desired=1,
        replicas=[_r(0, 0), _r(1, 1, ready=False)],
        failed_new=0,
        next_replica_num=2,
    )
    assert not d.start
    assert not d.stop


def test_failed_rollout_keeps_old_replicas() -> None:
    d = decide_replicas(
        deployment_num=1,
        desired=1,
        replicas=[_r(0, 0)],
        failed_new=MAX_ROLLOUT_FAILURES,
        next_replica_num=1,
    )
    assert not d.stop
    assert not d.start
    assert "keep serving" in d.message


def test_scale_up_and_down_without_rollout() -> None:
    up = decide_replicas(
        deployment_num=0, desired=3, replicas=[_r(0, 0)], failed_new=0, next_replica_num=1
    )
    assert up.start == (1, 2)
    down = decide_replicas(
        deployment_num=0,
        desired=1,
        replicas=[_r(0, 0), _r(1, 0, ready=False), _r(2, 0)],
        failed_new=0,
        next_replica_num=3,
    )
    assert down.stop == ("j1", "j2")


def test_autoscaling_delays_and_zero() -> None:
    policy = ScalingPolicy(0, 4, target_rps=10, scale_up_delay=300, scale_down_delay=600)
    assert desired_replicas(policy, current=0, rps=35, now=0, last_scaled_at=0) == 4
    assert desired_replicas(policy, current=1, rps=35, now=100, last_scaled_at=0) == 1
    assert desired_replicas(policy, current=1, rps=35, now=300, last_scaled_at=0) == 4
    assert desired_replicas(policy, current=4, rps=0, now=500, last_scaled_at=0) == 4
    assert desired_replicas(policy, current=4, rps=0, now=600, last_scaled_at=0) == 0
    assert desired_replicas(policy, current=2, rps=15, now=0, last_scaled_at=None) == 2


def test_stop_first_rollout_when_replicas_cannot_surge() -> None:
    first = decide_replicas(
        deployment_num=1,
        desired=1,
        replicas=[_r(0, 0)],
        failed_new=0,
        next_replica_num=1,
        surge=False,
    )
    assert first.stop == ("j0",)
    assert not first.start
    # the old replica has ended: the successor starts
    second = decide_replicas(
        deployment_num=1, desired=1, replicas=[], failed_new=0, next_replica_num=1, surge=False
    )
    assert second.start == (1,)
