"""Statuses and termination reasons of runs, jobs and instances, exactly as dstack's.

Pure data. `reconciler.core.transitions` holds the decisions made with them; the workers
store the values as plain strings.
"""

from __future__ import annotations

import enum


class RunStatus(enum.StrEnum):
    PENDING = "pending"
    SUBMITTED = "submitted"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"
    DONE = "done"

    def is_finished(self) -> bool:
        return self in (RunStatus.TERMINATED, RunStatus.FAILED, RunStatus.DONE)


class JobStatus(enum.StrEnum):
    SUBMITTED = "submitted"
    PROVISIONING = "provisioning"
    PULLING = "pulling"
    RUNNING = "running"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    ABORTED = "aborted"
    FAILED = "failed"
    DONE = "done"

    def is_finished(self) -> bool:
        return self in (
            JobStatus.TERMINATED,
            JobStatus.ABORTED,
            JobStatus.FAILED,
            JobStatus.DONE,
        )


class InstanceStatus(enum.StrEnum):
    PENDING = "pending"
    PROVISIONING = "provisioning"
    IDLE = "idle"
    BUSY = "busy"
    TERMINATING = "terminating"
    TERMINATED = "terminated"

    def is_available(self) -> bool:
        return self in (InstanceStatus.IDLE, InstanceStatus.BUSY)


class RunTerminationReason(enum.StrEnum):
    ALL_JOBS_DONE = "all_jobs_done"
    JOB_FAILED = "job_failed"
    RETRY_LIMIT_EXCEEDED = "retry_limit_exceeded"
    STOPPED_BY_USER = "stopped_by_user"
    ABORTED_BY_USER = "aborted_by_user"
    SERVER_ERROR = "server_error"
    GATEWAY_ERROR = "gateway_error"


class JobTerminationReason(enum.StrEnum):
    # failed
    FAILED_TO_START_DUE_TO_NO_CAPACITY = "failed_to_start_due_to_no_capacity"
    INTERRUPTED_BY_NO_CAPACITY = "interrupted_by_no_capacity"
    INSTANCE_UNREACHABLE = "instance_unreachable"
    INSTANCE_ACCESS_REVOKED = "instance_access_revoked"
    WAITING_INSTANCE_LIMIT_EXCEEDED = "waiting_instance_limit_exceeded"
    WAITING_RUNNER_LIMIT_EXCEEDED = "waiting_runner_limit_exceeded"
    VOLUME_ERROR = "volume_error"
    GATEWAY_ERROR = "gateway_error"
    CONTAINER_EXITED_WITH_ERROR = "container_exited_with_error"
    PORTS_BINDING_FAILED = "ports_binding_failed"
    CREATING_CONTAINER_ERROR = "creating_container_error"
    EXECUTOR_ERROR = "executor_error"
    LOG_QUOTA_EXCEEDED = "log_quota_exceeded"
    # terminated
    TERMINATED_BY_USER = "terminated_by_user"
    SCALED_DOWN = "scaled_down"
    TERMINATED_BY_SERVER = "terminated_by_server"
    INACTIVITY_DURATION_EXCEEDED = "inactivity_duration_exceeded"
    TERMINATED_DUE_TO_UTILIZATION_POLICY = "terminated_due_to_utilization_policy"
    MAX_DURATION_EXCEEDED = "max_duration_exceeded"
    # aborted
    ABORTED_BY_USER = "aborted_by_user"
    # done
    DONE_BY_RUNNER = "done_by_runner"


class RetryEvent(enum.StrEnum):
    NO_CAPACITY = "no-capacity"
    INTERRUPTION = "interruption"
    ERROR = "error"
