"""Writing a run's jobs: submitting new ones and asking active ones to stop; the views of a
run and its jobs the pure `runflow` decides on (runs worker, and the jobs worker when a
run follows its only job).

Writes are used by the runs worker (and by nothing else), always as compare-and-set on the job's
status so it never races the jobs worker: a stop only lands on a job that is still active,
and the jobs worker's own writes are conditional on the status it read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.adapters.db.runsteps import NewJob
from reconciler.adapters.db.store import Store
from reconciler.core.jobspecs import JobSlot, expand_jobs
from reconciler.core.runflow import JobView, RunView
from reconciler.domain.statuses import (
    JobStatus,
    JobTerminationReason,
    RunStatus,
    RunTerminationReason,
)
from reconciler.domain.workloads import JobRecord, RunRecord

JOB_REASON_FOR_RUN = {
    RunTerminationReason.STOPPED_BY_USER: JobTerminationReason.TERMINATED_BY_USER,
    RunTerminationReason.ABORTED_BY_USER: JobTerminationReason.ABORTED_BY_USER,
}


def job_reason_for(run_reason: RunTerminationReason) -> JobTerminationReason:
    return JOB_REASON_FOR_RUN.get(run_reason, JobTerminationReason.TERMINATED_BY_SERVER)


def submit_job(
    store: Store, run: RunRecord, slot: JobSlot, *, submission_num: int, deployment_num: int
) -> str:
    """Insert a new submitted job for `slot`; its id."""
    return store.submit_job(
        NewJob(
            run_id=run.id,
            nodes=slot.nodes,
            spec=slot.spec,
            replica_num=slot.replica_num,
            job_num=slot.job_num,
            group_name=slot.group_name,
            submission_num=submission_num,
            deployment_num=deployment_num,
        )
    )


def stop_jobs(store: Store, jobs: Iterable[JobRecord], reason: JobTerminationReason) -> int:
    """Ask active jobs to stop; jobs never placed end at once. Returns how many changed."""
    return store.stop_jobs(((job.id, job.status) for job in jobs), reason)


def runtime_of(job: JobRecord) -> Mapping[str, Any]:
    return job.runtime if isinstance(job.runtime, Mapping) else {}


def run_view(run: RunRecord) -> RunView:
    """The run as `core.runflow` sees it."""
    nodes = len([s for s in expand_jobs(run.spec, replicas=1) if s.replica_num == 0])
    return RunView(
        run_type=run.run_type,
        status=RunStatus(run.status),
        reason=RunTerminationReason(run.termination_reason) if run.termination_reason else None,
        deployment_num=run.deployment_num,
        spec=run.spec,
        submitted_at=run.submitted_at.timestamp(),
        nodes=nodes,
    )


def job_view(job: JobRecord, values: Mapping[str, Any] | None = None) -> JobView:
    """The job as `core.runflow` sees it; `values`: a write about to change it."""
    new = values or {}
    runtime = new.get("runtime", runtime_of(job))
    runtime = runtime if isinstance(runtime, Mapping) else {}
    status = str(new.get("status", job.status))
    reason = new.get("termination_reason", job.termination_reason)
    started = runtime.get("started_at")
    return JobView(
        id=job.id,
        replica_num=job.replica_num,
        job_num=job.job_num,
        submission_num=job.submission_num,
        deployment_num=job.deployment_num,
        status=JobStatus(status),
        reason=JobTerminationReason(reason) if reason else None,
        ready=bool(runtime.get("ready")) and status == JobStatus.RUNNING.value,
        provisioned_at=float(started) if started is not None else job.submitted_at.timestamp(),
    )
