"""Writing a run's jobs: submitting new ones and asking active ones to stop.

Used by the runs worker (and by nothing else), always as compare-and-set on the job's
status so it never races the jobs worker: a stop only lands on a job that is still active,
and the jobs worker's own writes are conditional on the status it read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.adapters.db.models import Job, Run
from reconciler.adapters.db.store import Store
from reconciler.core.jobspecs import JobSlot
from reconciler.domain.statuses import JobStatus, JobTerminationReason, RunTerminationReason

JOB_REASON_FOR_RUN = {
    RunTerminationReason.STOPPED_BY_USER: JobTerminationReason.TERMINATED_BY_USER,
    RunTerminationReason.ABORTED_BY_USER: JobTerminationReason.ABORTED_BY_USER,
}


def job_reason_for(run_reason: RunTerminationReason) -> JobTerminationReason:
    return JOB_REASON_FOR_RUN.get(run_reason, JobTerminationReason.TERMINATED_BY_SERVER)


def submit_job(
    store: Store, run: Run, slot: JobSlot, *, submission_num: int, deployment_num: int
) -> Job:
    """Insert a new submitted job for `slot`."""
    return store.add(
        Job(
            run_id=run.id,
            status=JobStatus.SUBMITTED.value,
            job_spec={"slot": {"nodes": slot.nodes}, "spec": dict(slot.spec)},
            submitted_at=store.now(),
            replica_num=slot.replica_num,
            job_num=slot.job_num,
            group_name=slot.group_name,
            submission_num=submission_num,
            deployment_num=deployment_num,
        )
    )


def stop_jobs(store: Store, jobs: Iterable[Job], reason: JobTerminationReason) -> int:
    """Ask active jobs to stop; jobs never placed end at once. Returns how many changed."""
    return store.stop_jobs(((job.id, job.status) for job in jobs), reason)


def latest_by_slot(jobs: Iterable[Job]) -> dict[tuple[int, int], Job]:
    """The newest submission of each (replica, job number)."""
    latest: dict[tuple[int, int], Job] = {}
    for job in jobs:
        key = (job.replica_num, job.job_num)
        current = latest.get(key)
        if current is None or (job.submission_num, job.submitted_at) >= (
            current.submission_num,
            current.submitted_at,
        ):
            latest[key] = job
    return latest


def runtime_of(job: Job) -> Mapping[str, Any]:
    return job.runtime if isinstance(job.runtime, Mapping) else {}
