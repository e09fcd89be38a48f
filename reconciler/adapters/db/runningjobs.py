"""Where a run's job runs now: the store's read for callers that talk to that job's agent.

`RunningJobsStore.running_job` is one short read transaction; the metrics route
(`reconciler.engine.jobsampling`) asks it which agent to sample. `lost_since` and
`ended_on_instance` tell the instances worker when and which jobs an agent still runs the
store has ended without the agent (failed `instance_unreachable` while it did not answer),
so it stops them there, and which finished jobs an agent still keeps it may remove.
`wake_active_on_instance` makes the jobs the store has active there due at once (the
instances worker, when the agent is new, restarted or reached again: each job's pass
compares itself with what the agent reports); `wake_instance` makes an instance's check
due at once (the jobs worker, when a job first finds its agent gone); `removal_missed`
also marks it unreachable (the jobs worker, when a finished job's removal finds its agent
away), which every replica's next check of it reads.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select, update

from reconciler.adapters.db.models import Instance, Job, Run
from reconciler.adapters.db.records import instance_record
from reconciler.adapters.db.sessions import StoreBase
from reconciler.adapters.db.workleasing import pending_work
from reconciler.domain.serving import RunningJob
from reconciler.domain.statuses import JobStatus

_ENDED = [status.value for status in JobStatus if status.is_finished()]
_ENDED_WITHOUT_AGENT = ("instance_unreachable", "interrupted_by_no_capacity")


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
            return RunningJob(job.agent_job_id or job.id, instance_record(instance))

    def lost_since(self, instance_id: str, since: datetime) -> bool:
        """Whether a job of this instance was ended without its agent at or after `since`."""
        with self.reading() as session:
            found = session.scalar(
                select(Job.id)
                .where(Job.instance_id == instance_id, Job.finished_at >= since)
                .where(Job.termination_reason.in_(_ENDED_WITHOUT_AGENT))
                .limit(1)
            )
        return found is not None

    def ended_on_instance(self, instance_id: str, agent_job_ids: list[str]) -> list[str]:
        """Which of these agent job ids are jobs of this instance the store has ended."""
        ended: set[str] = set()
        with self.reading() as session:
            for start in range(0, len(agent_job_ids), 500):
                chunk = agent_job_ids[start : start + 500]
                rows = session.execute(
                    select(Job.agent_job_id, Job.id)
                    .where(Job.instance_id == instance_id, Job.status.in_(_ENDED))
                    .where(or_(Job.agent_job_id.in_(chunk), Job.id.in_(chunk)))
                )
                # a job without agent_job_id has its own id on the agent
                ended.update(agent_id or job_id for agent_id, job_id in rows)
        return sorted(ended.intersection(agent_job_ids))

    def wake_active_on_instance(self, instance_id: str) -> int:
        """Make every job the store has active on this instance due now; how many."""
        with self.writing() as session:
            where = (Job.instance_id == instance_id) & pending_work("jobs")
            result = session.execute(update(Job).where(where).values(due_at=None))
        return int(result.rowcount)  # type: ignore[attr-defined]

    def wake_instance(self, instance_id: str) -> bool:
        """Make the instance's check due now (a job found its agent gone); True if it is
        one the instances worker still checks."""
        with self.writing() as session:
            where = (Instance.id == instance_id) & pending_work("instances")
            result = session.execute(update(Instance).where(where).values(due_at=None))
        return int(result.rowcount) > 0  # type: ignore[attr-defined]

    def removal_missed(self, instance_id: str) -> bool:
        """A finished job's removal found this instance's agent unreachable: the instance says
        so (`unreachable_since`, an earlier mark kept) and its check is due now. A mark in the
        store, not in this process: whichever replica checks the instance next settles its
        agent with the store (`agent_sync`: an agent reached again), so the removal is done
        there; True if it is one the instances worker still checks."""
        now = self.now()
        with self.writing() as session:
            where = (Instance.id == instance_id) & pending_work("instances")
            away = where & Instance.unreachable_since.is_(None)
            session.execute(update(Instance).where(away).values(unreachable_since=now))
            result = session.execute(update(Instance).where(where).values(due_at=None))
        return int(result.rowcount) > 0  # type: ignore[attr-defined]
