"""Pure status decisions for runs and jobs: dstack's tables and retry rules.

The runs and jobs workers call these with plain values read from the store and write
what they return; nothing here reads a clock (callers pass `now`) or touches I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reconciler.domain.statuses import (
    JobStatus,
    JobTerminationReason,
    RetryEvent,
    RunStatus,
    RunTerminationReason,
)

_JR = JobTerminationReason

_TERMINATED_REASONS = frozenset(
    {
        _JR.TERMINATED_BY_USER,
        _JR.SCALED_DOWN,
        _JR.TERMINATED_BY_SERVER,
        _JR.INACTIVITY_DURATION_EXCEEDED,
        _JR.TERMINATED_DUE_TO_UTILIZATION_POLICY,
        _JR.MAX_DURATION_EXCEEDED,
    }
)

# Back-off of a run whose every replica waits for a retry (dstack's): 15 s, 30 s, 1, 2, 5,
# then 10 min.
RETRY_BACKOFF_SECONDS: tuple[int, ...] = (15, 30, 60, 120, 300, 600)


def job_status_for(reason: JobTerminationReason) -> JobStatus:
    """The final job status a termination reason leads to."""
    if reason is _JR.DONE_BY_RUNNER:
        return JobStatus.DONE
    if reason is _JR.ABORTED_BY_USER:
        return JobStatus.ABORTED
    if reason in _TERMINATED_REASONS:
        return JobStatus.TERMINATED
    return JobStatus.FAILED


def run_status_for(reason: RunTerminationReason) -> RunStatus:
    """The final run status a run termination reason leads to."""
    if reason is RunTerminationReason.ALL_JOBS_DONE:
        return RunStatus.DONE
    if reason in (RunTerminationReason.STOPPED_BY_USER, RunTerminationReason.ABORTED_BY_USER):
        return RunStatus.TERMINATED
    return RunStatus.FAILED


def stopped_run_reason(
    reason: RunTerminationReason, latest_job_statuses: Iterable[JobStatus]
) -> RunTerminationReason:
    """Why a run that was being stopped ended: the reason it was stopped for, whatever its
    jobs' own ends. dstack 0.22.5 (its background task for terminating runs) ends a terminating
    run with `termination_reason.to_status()` once its jobs are finished, and `stop_runs`
    sets `stopped_by_user` on any run not yet finished: a user's stop that reached jobs
    already `done` still ends the run `terminated/stopped_by_user`. (The jobs keep their own
    `done`.) `latest_job_statuses` is kept for the callers; it does not decide."""
    del latest_job_statuses
    return reason


def retry_event_for(reason: JobTerminationReason) -> RetryEvent | None:
    """Which `retry.on_events` entry covers a job that ended for `reason` (None: no retry)."""
    if job_status_for(reason) is not JobStatus.FAILED:
        return None
    if reason is _JR.FAILED_TO_START_DUE_TO_NO_CAPACITY:
        return RetryEvent.NO_CAPACITY
    if reason is _JR.INTERRUPTED_BY_NO_CAPACITY:
        return RetryEvent.INTERRUPTION
    return RetryEvent.ERROR


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The normalized `retry` of a run: no events means retry is off."""

    on_events: frozenset[RetryEvent] = frozenset()
    duration: int = 3600

    @classmethod
    def from_spec(cls, retry: object) -> RetryPolicy:
        """From the normalized config value: `false`/`None`, `true`, or a mapping."""
        if retry is True:
            return cls(on_events=frozenset(RetryEvent))
        if not isinstance(retry, dict):
            return cls()
        events = frozenset(RetryEvent(e) for e in retry.get("on_events") or ())
        duration = retry.get("duration")
        return cls(on_events=events, duration=int(duration) if duration is not None else 3600)


def should_retry(
    policy: RetryPolicy,
    reason: JobTerminationReason,
    *,
    now: float,
    run_submitted_at: float,
    last_provisioned_at: float | None,
) -> bool:
    """Whether a failed replica is resubmitted, or the run fails `retry_limit_exceeded`.

    `no-capacity` age counts from the run's submission (or schedule trigger); the other
    events from the replica's last provisioned submission.
    """
    event = retry_event_for(reason)
    if event is None or event not in policy.on_events:
        return False
    since = run_submitted_at if event is RetryEvent.NO_CAPACITY else last_provisioned_at
    return (now - (since if since is not None else run_submitted_at)) <= policy.duration


def retry_delay(attempt: int) -> int:
    """Seconds to wait before the `attempt`-th (0-based) resubmission of a pending run."""
    return RETRY_BACKOFF_SECONDS[min(attempt, len(RETRY_BACKOFF_SECONDS) - 1)]


_RUN_ORDER = (
    (JobStatus.FAILED, RunStatus.FAILED),
    (JobStatus.RUNNING, RunStatus.RUNNING),
    (JobStatus.PROVISIONING, RunStatus.PROVISIONING),
    (JobStatus.PULLING, RunStatus.PROVISIONING),
    (JobStatus.SUBMITTED, RunStatus.SUBMITTED),
    (JobStatus.DONE, RunStatus.DONE),
)


def moves_run(before: JobStatus, after: JobStatus) -> bool:
    """Whether a job going from `before` to `after` can change what its run does: the job
    ends, or its vote (`aggregate_run_status`) changes — `provisioning` -> `pulling` does
    not."""
    votes = dict(_RUN_ORDER)
    return after.is_finished() or votes.get(before) != votes.get(after)


def aggregate_run_status(latest_job_statuses: Iterable[JobStatus]) -> RunStatus | None:
    """The run status implied by its replicas' latest jobs (FAILED > RUNNING > … > DONE).

    Terminating, terminated and aborted jobs do not vote; None when no job votes.
    """
    present = set(latest_job_statuses)
    for job_status, run_status in _RUN_ORDER:
        if job_status in present:
            return run_status
    return None


def status_message(
    status: JobStatus, reason: JobTerminationReason | None, exit_status: int | None
) -> str:
    """The short message the CLI shows for a job (dstack's wording)."""
    if status is JobStatus.FAILED and reason is _JR.CONTAINER_EXITED_WITH_ERROR:
        return f"exited ({exit_status if exit_status is not None else '?'})"
    if reason is _JR.FAILED_TO_START_DUE_TO_NO_CAPACITY:
        return "no capacity"
    if reason in (_JR.INTERRUPTED_BY_NO_CAPACITY, _JR.INSTANCE_UNREACHABLE):
        return "interrupted"
    if status is JobStatus.FAILED:
        return "error"
    if status is JobStatus.TERMINATED:
        return "stopped"
    if status is JobStatus.ABORTED:
        return "aborted"
    if status is JobStatus.DONE:
        return "exited (0)"
    return str(status)
