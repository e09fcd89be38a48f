"""A job event written from a request: what the proxy and `runs/forward` tell a job's owner.

`note_job` appends an event (`dockyard event`, the console) to a job named by id (the
proxy's replicas), `note_forwarded_job` to the job `runs/forward` reached by run, replica
and job number (as `runs.find_endpoint` finds it). Called through `Database.write` by
`reconciler.web.jobnotes.JobNotes`, e.g. when a job's port is held by another process
than the job (`agent.server.portholders`).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Event, Job, Run

MAX_MESSAGE = 1000


def _append(session: Session, job: Job, run: Run, message: str, now: datetime) -> None:
    session.add(
        Event(
            project_id=run.project_id,
            target_type="job",
            target_id=job.id,
            target_name=f"{run.run_name}/{job.replica_num}/{job.job_num}",
            message=message[:MAX_MESSAGE],
            created_at=now,
        )
    )


def note_job(session: Session, job_id: str, message: str, now: datetime) -> bool:
    """Append `message` to job `job_id`'s events; False when there is no such job."""
    job = session.get(Job, job_id)
    run = None if job is None else session.get(Run, job.run_id)
    if job is None or run is None:
        return False
    _append(session, job, run, message, now)
    return True


def note_forwarded_job(
    session: Session,
    project_id: str,
    run_name: str,
    replica_num: int,
    job_num: int,
    message: str,
    now: datetime,
) -> bool:
    """Append `message` to the newest job (replica, job number) of the project's newest
    live run `run_name`; False when there is none."""
    found = session.execute(
        select(Job, Run)
        .join(Run, Run.id == Job.run_id)
        .where(
            Run.project_id == project_id,
            Run.run_name == run_name,
            Run.deleted.is_(False),
            Job.replica_num == replica_num,
            Job.job_num == job_num,
        )
        .order_by(Run.submitted_at.desc(), Job.submission_num.desc())
        .limit(1)
    ).first()
    if found is None:
        return False
    _append(session, found[0], found[1], message, now)
    return True
