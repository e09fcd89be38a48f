"""Where a run's job runs now: the store's read for callers that talk to that job's agent.

`RunningJobsStore.running_job` is one short read transaction; the metrics route
(`reconciler.engine.jobsampling`) asks it which agent to sample.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from reconciler.adapters.db.models import Instance, Job, Run
from reconciler.adapters.db.sessions import StoreBase


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job (its agent-side id and the GPUs it holds) and its instance row."""

    agent_job_id: str
    instance: Instance


class RunningJobsStore(StoreBase):
    def running_job(
        self, project_id: str, run_name: str, *, job_num: int = 0, replica_num: int = 0
    ) -> RunningJob | None:
        """The newest submission of that job of the newest run so named, if it runs now."""
        with self.reading() as session:
            run_id = session.scalar(
                select(Run.id)
                .where(Run.project_id == project_id, Run.run_name == run_name)
                .where(Run.deleted.is_(False))
                .order_by(Run.submitted_at.desc())
                .limit(1)
            )
            job = session.scalar(
                select(Job)
                .where(Job.run_id == run_id, Job.job_num == job_num)
                .where(Job.replica_num == replica_num)
                .order_by(Job.submission_num.desc())
                .limit(1)
            )
            if job is None or job.status != "running" or job.instance_id is None:
                return None
            instance = session.get(Instance, job.instance_id)
            if instance is None:
                return None
            session.expunge(instance)
            return RunningJob(agent_job_id=job.agent_job_id or job.id, instance=instance)
