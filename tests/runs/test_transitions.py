"""dstack's status tables and retry rules, as decided by reconciler.core.transitions."""

from __future__ import annotations

import pytest

from reconciler.core.transitions import (
    RetryPolicy,
    aggregate_run_status,
    job_status_for,
    retry_delay,
    retry_event_for,
    run_status_for,
    should_retry,
    status_message,
    stopped_run_reason,
)
from reconciler.domain.statuses import (
    JobStatus,
    RetryEvent,
    RunStatus,
)
from reconciler.domain.statuses import (
    JobTerminationReason as JR,
)
from reconciler.domain.statuses import (
    RunTerminationReason as RR,
)


@pytest.mark.parametrize(
    ("reason", "status"),
    [
        (JR.DONE_BY_RUNNER, JobStatus.DONE),
        (JR.ABORTED_BY_USER, JobStatus.ABORTED),
        (JR.TERMINATED_BY_USER, JobStatus.TERMINATED),
        (JR.MAX_DURATION_EXCEEDED, JobStatus.TERMINATED),
        (JR.SCALED_DOWN, JobStatus.TERMINATED),
        (JR.CONTAINER_EXITED_WITH_ERROR, JobStatus.FAILED),
        (JR.INSTANCE_UNREACHABLE, JobStatus.FAILED),
        (JR.FAILED_TO_START_DUE_TO_NO_CAPACITY, JobStatus.FAILED),
    ],
)
def test_job_reason_maps_to_status(reason: JR, status: JobStatus) -> None:
    assert job_status_for(reason) is status


def test_run_reasons() -> None:
    assert run_status_for(RR.ALL_JOBS_DONE) is RunStatus.DONE
    assert run_status_for(RR.STOPPED_BY_USER) is RunStatus.TERMINATED
    assert run_status_for(RR.ABORTED_BY_USER) is RunStatus.TERMINATED
    for reason in (RR.JOB_FAILED, RR.RETRY_LIMIT_EXCEEDED, RR.SERVER_ERROR, RR.GATEWAY_ERROR):
        assert run_status_for(reason) is RunStatus.FAILED


def test_retry_events() -> None:
    assert retry_event_for(JR.FAILED_TO_START_DUE_TO_NO_CAPACITY) is RetryEvent.NO_CAPACITY
    assert retry_event_for(JR.INTERRUPTED_BY_NO_CAPACITY) is RetryEvent.INTERRUPTION
    assert retry_event_for(JR.CONTAINER_EXITED_WITH_ERROR) is RetryEvent.ERROR
    assert retry_event_for(JR.TERMINATED_BY_USER) is None
    assert retry_event_for(JR.DONE_BY_RUNNER) is None


def test_retry_policy_forms() -> None:
    assert RetryPolicy.from_spec(None).on_events == frozenset()
    assert RetryPolicy.from_spec(False).on_events == frozenset()
    assert RetryPolicy.from_spec(True).on_events == frozenset(RetryEvent)
    policy = RetryPolicy.from_spec({"on_events": ["error"], "duration": 600})
    assert policy.on_events == {RetryEvent.ERROR}
    assert policy.duration == 600


def test_should_retry_within_duration_only() -> None:
    policy = RetryPolicy(on_events=frozenset({RetryEvent.ERROR}), duration=600)
    kwargs = {"run_submitted_at": 0.0, "last_provisioned_at": 1000.0}
    assert should_retry(policy, JR.CONTAINER_EXITED_WITH_ERROR, now=1500.0, **kwargs)
    assert not should_retry(policy, JR.CONTAINER_EXITED_WITH_ERROR, now=1700.0, **kwargs)
    # not covered by on_events
    assert not should_retry(policy, JR.FAILED_TO_START_DUE_TO_NO_CAPACITY, now=10.0, **kwargs)


def test_no_capacity_age_counts_from_run_submission() -> None:
    policy = RetryPolicy(on_events=frozenset({RetryEvent.NO_CAPACITY}), duration=600)
    assert not should_retry(
        policy,
        JR.FAILED_TO_START_DUE_TO_NO_CAPACITY,
        now=700.0,
        run_submitted_at=0.0,
        last_provisioned_at=650.0,
    )


def test_backoff_sequence_caps_at_ten_minutes() -> None:
    assert [retry_delay(i) for i in range(8)] == [15, 30, 60, 120, 300, 600, 600, 600]


def test_run_status_aggregation_order() -> None:
    S = JobStatus
    assert aggregate_run_status([S.DONE, S.FAILED, S.RUNNING]) is RunStatus.FAILED
    assert aggregate_run_status([S.DONE, S.RUNNING, S.PULLING]) is RunStatus.RUNNING
    assert aggregate_run_status([S.PULLING, S.SUBMITTED]) is RunStatus.PROVISIONING
    assert aggregate_run_status([S.SUBMITTED, S.DONE]) is RunStatus.SUBMITTED
    assert aggregate_run_status([S.DONE, S.DONE]) is RunStatus.DONE
    assert aggregate_run_status([S.TERMINATED]) is None


def test_status_messages() -> None:
    assert status_message(JobStatus.FAILED, JR.CONTAINER_EXITED_WITH_ERROR, 3) == "exited (3)"
    assert status_message(JobStatus.FAILED, JR.FAILED_TO_START_DUE_TO_NO_CAPACITY, None) == (
        "no capacity"
    )
    assert status_message(JobStatus.TERMINATED, JR.TERMINATED_BY_USER, None) == "stopped"
    assert status_message(JobStatus.ABORTED, JR.ABORTED_BY_USER, None) == "aborted"


def test_a_stopped_run_whose_jobs_all_ended_done_still_ends_stopped_by_user() -> None:
    # dstack keeps the user's stop: its run ends `terminated/stopped_by_user` even when every
    # job was recorded `done` before the stop reached it (dstack 0.22.5's terminating-runs task).
    stopped = RR.STOPPED_BY_USER
    assert stopped_run_reason(stopped, [JobStatus.DONE]) is stopped
    assert stopped_run_reason(stopped, [JobStatus.DONE, JobStatus.DONE]) is stopped
    assert run_status_for(stopped_run_reason(stopped, [JobStatus.DONE])) is RunStatus.TERMINATED
    assert stopped_run_reason(stopped, [JobStatus.DONE, JobStatus.TERMINATED]) is stopped
    assert stopped_run_reason(stopped, []) is stopped
    aborted = RR.ABORTED_BY_USER
    assert stopped_run_reason(aborted, [JobStatus.DONE]) is aborted
