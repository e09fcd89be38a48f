"""Pure decisions of the runs worker: what one run does next, given its jobs.

`step_run` looks at a run and the latest job of each (replica, node) and answers with a
`RunStep`: jobs to submit, jobs to stop, the run's new status and reason, or a time to
wait until (retry back-off, schedule). The shell (`reconciler.engine.workers.runs`) loads
the views, calls this, and writes the answer. dstack's rules: the run status is
the worst of its replicas; a failed replica is retried when `retry` covers the event,
otherwise the run fails (`job_failed`), or `retry_limit_exceeded` past the duration; a
task is done when all its jobs are; services roll out with surge 1 (`rollout`); a service
or dev environment stopped outside Dockyard is started again (self-heal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.core.rollout import ReplicaView, decide_replicas
from reconciler.core.transitions import (
    RetryPolicy,
    aggregate_run_status,
    retry_delay,
    should_retry,
)
from reconciler.domain.statuses import (
    JobStatus,
    JobTerminationReason,
    RunStatus,
    RunTerminationReason,
)

JR = JobTerminationReason
RR = RunTerminationReason

# Ended "from outside": the host or someone else stopped it. Kept-running kinds restart.
_EXTERNAL_ENDS = frozenset({JR.TERMINATED_BY_SERVER, JR.INSTANCE_UNREACHABLE})


@dataclass(frozen=True, slots=True)
class JobView:
    id: str
    replica_num: int
    job_num: int
    submission_num: int
    deployment_num: int
    status: JobStatus
    reason: JobTerminationReason | None = None
    ready: bool = False
    provisioned_at: float | None = None


@dataclass(frozen=True, slots=True)
class RunView:
    run_type: str
    status: RunStatus
    reason: RunTerminationReason | None
    deployment_num: int
    spec: Mapping[str, Any]
    submitted_at: float
    nodes: int = 1  # jobs per replica


@dataclass(frozen=True, slots=True)
class RunStep:
    status: RunStatus | None = None
    reason: RunTerminationReason | None = None
    message: str | None = None
    submit_replicas: tuple[int, ...] = ()  # submit all nodes of these replicas anew
    stop: tuple[tuple[str, JobTerminationReason], ...] = ()
    wait_until: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def latest_jobs(jobs: Sequence[JobView]) -> dict[tuple[int, int], JobView]:
    latest: dict[tuple[int, int], JobView] = {}
    for job in jobs:
        key = (job.replica_num, job.job_num)
        if key not in latest or job.submission_num >= latest[key].submission_num:
            latest[key] = job
    return latest


def step_run(
    run: RunView, jobs: Sequence[JobView], *, now: float, desired: int | None = None
) -> RunStep:
    """The next step of a run that is submitted, provisioning or running."""
    latest = latest_jobs(jobs)
    if not latest:
        return RunStep(submit_replicas=tuple(range(desired or 1)), status=RunStatus.SUBMITTED)
    if run.run_type == "service":
        return _step_service(run, jobs, latest, desired or 1)
    return _step_single(run, latest, now=now)


def _step_single(run: RunView, latest: Mapping[tuple[int, int], JobView], *, now: float) -> RunStep:
    views = list(latest.values())
    failed = [j for j in views if j.status is JobStatus.FAILED]
    external = [j for j in views if j.status.is_finished() and j.reason in _EXTERNAL_ENDS]
    if run.run_type == "dev-environment" and external and not failed:
        return RunStep(submit_replicas=(0,), message="restarting: the environment stopped")
    if failed:
        return _on_failure(run, views, failed[0], now=now)
    stop_criteria = run.spec.get("stop_criteria")
    master = latest.get((0, 0))
    if stop_criteria == "master-done" and master and master.status is JobStatus.DONE:
        active = [j for j in views if not j.status.is_finished()]
        if active:
            return RunStep(stop=tuple((j.id, JR.DONE_BY_RUNNER) for j in active))
    if all(j.status.is_finished() for j in views):
        reason = (
            RR.ALL_JOBS_DONE if all(j.status is JobStatus.DONE for j in views) else RR.JOB_FAILED
        )
        return RunStep(status=RunStatus.TERMINATING, reason=reason)
    return RunStep(status=aggregate_run_status(j.status for j in views))


def _on_failure(run: RunView, views: Sequence[JobView], job: JobView, *, now: float) -> RunStep:
    policy = RetryPolicy.from_spec(run.spec.get("retry"))
    reason = job.reason or JR.EXECUTOR_ERROR
    siblings = [j for j in views if not j.status.is_finished()]
    if should_retry(
        policy,
        reason,
        now=now,
        run_submitted_at=run.submitted_at,
        last_provisioned_at=job.provisioned_at,
    ):
        stop = tuple((j.id, JR.TERMINATED_BY_SERVER) for j in siblings)
        if siblings:
            return RunStep(stop=stop, message="retrying: stopping the failed replica's nodes")
        attempt = job.submission_num
        return RunStep(
            status=RunStatus.PENDING,
            message=f"retrying after {reason.value}",
            wait_until=now + retry_delay(attempt),
        )
    limit_hit = policy.on_events and reason is not JR.TERMINATED_BY_SERVER
    run_reason = RR.RETRY_LIMIT_EXCEEDED if limit_hit else RR.JOB_FAILED
    return RunStep(status=RunStatus.TERMINATING, reason=run_reason)


def _step_service(
    run: RunView,
    jobs: Sequence[JobView],
    latest: Mapping[tuple[int, int], JobView],
    desired: int,
) -> RunStep:
    active = [j for j in latest.values() if not j.status.is_finished()]
    crashed = [
        j
        for j in latest.values()
        if j.status is JobStatus.FAILED
        and j.reason not in _EXTERNAL_ENDS
        and j.deployment_num >= run.deployment_num
    ]
    has_old = any(j.deployment_num < run.deployment_num for j in active)
    if crashed and not has_old and not RetryPolicy.from_spec(run.spec.get("retry")).on_events:
        # A replica's own commands failed and retry is off: dstack fails the run.
        return RunStep(status=RunStatus.TERMINATING, reason=RR.JOB_FAILED)
    # Replicas that ended from outside (or crashed, with retry on) drop out of `active`,
    # so the decision below starts replacements: self-heal.
    failed_new = sum(
        1 for j in jobs if j.deployment_num == run.deployment_num and j.status is JobStatus.FAILED
    )
    decision = decide_replicas(
        deployment_num=run.deployment_num,
        desired=desired,
        replicas=[ReplicaView(j.replica_num, j.id, j.deployment_num, j.ready) for j in active],
        failed_new=failed_new if has_old else 0,
        next_replica_num=max((k[0] for k in latest), default=-1) + 1,
        # Containers get their own network namespace and mapped ports; processes share the
        # host's ports, so a process replica cannot start beside its predecessor.
        surge=bool(run.spec.get("image")),
    )
    status = aggregate_run_status(j.status for j in active) or RunStatus.SUBMITTED
    return RunStep(
        status=status,
        message=decision.message or None,
        submit_replicas=decision.start,
        stop=tuple((job_id, JR(decision.stop_reason)) for job_id in decision.stop),
    )
