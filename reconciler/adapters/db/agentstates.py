"""Recording an agent's job state from its job events: the store learns `running` at once.

`AgentStatesStore.record_agent_running(instance_ids, agent_job_ids)` is one write
transaction, called by the server's job event follower (`reconciler.engine.jobevents`) when
an agent says jobs of that instance started: each such job still stored `pulling` (its
image was being pulled) and held by no worker goes `running` (`started_at` in its runtime),
with its status event, and its run is made due (the run follows its jobs). A job in a
worker's hands is left to that worker: the follower also wakes it, and its own pass reads
the agent's state. Everything else a running job needs (ports, probes, logs) is still the
jobs worker's pass, woken by the same event.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select, update

from reconciler.adapters.db.models import Event, Job, Run
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.statuses import JobStatus

_CHUNK = 500  # ids per IN (...) list, well under any database's parameter limit


class AgentStatesStore(StoreBase):
    """The `Store` part for the job event follower; see the module docstring."""

    def record_agent_running(
        self, instance_ids: str | Sequence[str], agent_job_ids: Sequence[str]
    ) -> list[str]:
        """Jobs of `instance_ids` (the instances one agent serves) the agent says run (by
        agent job id, or the job's own id) and the store has `pulling`, unleased: recorded
        `running`. Returns their ids."""
        now = self.now()
        instances = [instance_ids] if isinstance(instance_ids, str) else list(instance_ids)
        recorded: list[str] = []
        with self.writing() as session:
            for start in range(0, len(agent_job_ids), _CHUNK):
                pulling = _pulling(instances, agent_job_ids[start : start + _CHUNK], now)
                columns = (Job.id, Job.run_id, Job.runtime, Job.replica_num, Job.job_num)
                query = select(*columns, Run.run_name, Run.project_id).join(
                    Run, Run.id == Job.run_id
                )
                for row in session.execute(query.where(pulling)).all():
                    runtime: dict[str, Any] = dict(row.runtime or {})
                    runtime.setdefault("started_at", self.clock.now_ts())
                    values = {"status": JobStatus.RUNNING.value, "runtime": runtime}
                    written = session.execute(
                        update(Job)
                        .where(Job.id == row.id, pulling)
                        .values(status_message="", **values)
                    )
                    if not getattr(written, "rowcount", 0):
                        continue
                    name = f"{row.run_name}/{row.replica_num}/{row.job_num}"
                    session.add(_event(row.project_id, row.id, name, now))
                    session.execute(update(Run).where(Run.id == row.run_id).values(due_at=None))
                    recorded.append(row.id)
        return recorded


def _pulling(instances: list[str], ids: Sequence[str], now: datetime) -> ColumnElement[bool]:
    """Jobs of the instances named by these ids, still `pulling`, in no worker's hands."""
    return and_(
        Job.instance_id.in_(instances),
        Job.status == JobStatus.PULLING.value,
        or_(Job.lock_token.is_(None), Job.lock_expires_at <= now),
        or_(Job.agent_job_id.in_(list(ids)), Job.id.in_(list(ids))),
    )


def _event(project_id: str, job_id: str, name: str, now: datetime) -> Event:
    return Event(
        project_id=project_id,
        target_type="job",
        target_id=job_id,
        target_name=name,
        message="job status pulling -> running",
        created_at=now,
    )
