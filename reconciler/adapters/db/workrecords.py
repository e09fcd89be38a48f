"""`runs`, `jobs` and `projects` rows → the frozen values the workers get
(`reconciler.domain.workloads`).

The workers' step reads (`steploads.py`) convert here before their session closes, so no
ORM row of a run or a job leaves `reconciler.adapters`.
"""

from __future__ import annotations

from reconciler.adapters.db.models import Job, Run
from reconciler.domain.workloads import JobRecord, RunRecord


def run_record(row: Run) -> RunRecord:
    return RunRecord(
        id=row.id,
        project_id=row.project_id,
        run_name=row.run_name,
        run_type=row.run_type,
        spec=row.spec,
        spec_hash=row.spec_hash,
        status=row.status,
        submitted_at=row.submitted_at,
        resource_id=row.resource_id,
        termination_reason=row.termination_reason,
        status_message=row.status_message,
        deployment_num=row.deployment_num,
        next_triggered_at=row.next_triggered_at,
        priority=row.priority,
        deleted=row.deleted,
    )


def job_record(row: Job) -> JobRecord:
    return JobRecord(
        id=row.id,
        run_id=row.run_id,
        status=row.status,
        job_spec=row.job_spec,
        submitted_at=row.submitted_at,
        replica_num=row.replica_num,
        job_num=row.job_num,
        group_name=row.group_name,
        submission_num=row.submission_num,
        deployment_num=row.deployment_num,
        termination_reason=row.termination_reason,
        status_message=row.status_message,
        exit_status=row.exit_status,
        instance_id=row.instance_id,
        agent_job_id=row.agent_job_id,
        log_offset=row.log_offset,
        unreachable_since=row.unreachable_since,
        finished_at=row.finished_at,
        room_ask=row.room_ask,
        runtime=row.runtime,
    )
