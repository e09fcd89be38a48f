"""A one-job task run follows its job in the job's own write (`core.runfollow`): the same
status and events the runs worker would write, or None where the runs worker decides."""

from __future__ import annotations

from reconciler.core.runflow import JobView, RunView
from reconciler.core.runfollow import RunFollow, follow_run
from reconciler.domain.statuses import JobStatus, JobTerminationReason, RunStatus

TASK = {"type": "task", "commands": ["true"]}


def _run(status: RunStatus = RunStatus.SUBMITTED, **spec: object) -> RunView:
    return RunView("task", status, None, 0, TASK | spec, submitted_at=0.0)


def _job(status: JobStatus, reason: JobTerminationReason | None = None) -> JobView:
    return JobView("j", 0, 0, 0, 0, status, reason)


def test_a_one_job_task_follows_its_job_to_the_end() -> None:
    running = follow_run(_run(), _job(JobStatus.RUNNING), now=10.0)
    assert running == RunFollow({"status": "running"}, ("run status submitted -> running",))
    pulling = follow_run(_run(), _job(JobStatus.PULLING), now=10.0)
    assert pulling is not None and pulling.values == {"status": "provisioning"}
    same = follow_run(_run(RunStatus.RUNNING), _job(JobStatus.RUNNING), now=10.0)
    assert same == RunFollow({}, ())  # nothing changes: nothing written
    done = follow_run(
        _run(RunStatus.RUNNING), _job(JobStatus.DONE, JobTerminationReason.DONE_BY_RUNNER), now=10
    )
    assert done == RunFollow(
        {"status": "done", "termination_reason": "all_jobs_done"},
        ("run status running -> terminating (all_jobs_done)", "run status terminating -> done"),
    )
    failed = follow_run(
        _run(RunStatus.RUNNING),
        _job(JobStatus.FAILED, JobTerminationReason.CONTAINER_EXITED_WITH_ERROR),
        now=10.0,
    )
    assert failed is not None and failed.values["status"] == "failed"


def test_the_runs_worker_decides_everything_else() -> None:
    job = _job(JobStatus.FAILED, JobTerminationReason.CONTAINER_EXITED_WITH_ERROR)
    retried = _run(RunStatus.RUNNING, retry={"on_events": ["error"], "duration": 3600})
    assert follow_run(retried, job, now=10.0) is None  # a retry resubmits: not a status
    assert follow_run(_run(nodes=2), _job(JobStatus.RUNNING), now=10.0) is None  # a cluster
    scheduled = _run(schedule={"cron": "0 * * * *"})
    assert follow_run(scheduled, _job(JobStatus.RUNNING), now=10.0) is None
    stopping = _run(RunStatus.TERMINATING)
    assert follow_run(stopping, _job(JobStatus.TERMINATED), now=10.0) is None  # a stop
    service = RunView("service", RunStatus.SUBMITTED, None, 0, {"type": "service"}, 0.0)
    assert follow_run(service, _job(JobStatus.RUNNING), now=10.0) is None
