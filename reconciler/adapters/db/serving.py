"""The service proxy's read: a service run and its running replicas, in one transaction.

`Store.service_replicas(project, run_name)` is called by `engine.routes.StoreRoutes` (the
proxy's route source, cached for a fraction of a second) and returns frozen domain values.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import select

from reconciler.adapters.db.models import Instance, Job, Project, Run
from reconciler.adapters.db.records import instance_record
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.serving import RunningReplica, ServiceReplicas
from reconciler.domain.statuses import JobStatus


class ServingStore(StoreBase):
    def service_replicas(self, project: str, run_name: str) -> ServiceReplicas | None:
        """The newest live run `run_name` of the project if it is a service, with its running
        jobs and their instances (by replica, job, submission); None otherwise."""
        with self.reading() as session:
            run = session.scalars(
                select(Run)
                .join(Project, Project.id == Run.project_id)
                .where(Project.name == project, Run.run_name == run_name, Run.deleted.is_(False))
                .order_by(Run.submitted_at.desc(), Run.id.desc())
                .limit(1)
            ).first()
            if run is None or run.run_type != "service":
                return None
            rows = session.execute(
                select(Job.id, Job.runtime, Instance)
                .join(Instance, Instance.id == Job.instance_id)
                .where(Job.run_id == run.id, Job.status == JobStatus.RUNNING.value)
                .order_by(Job.replica_num, Job.job_num, Job.submission_num, Job.submitted_at)
            ).all()
            return ServiceReplicas(
                spec=dict(run.spec) if isinstance(run.spec, Mapping) else {},
                replicas=tuple(
                    RunningReplica(
                        job_id,
                        dict(runtime) if isinstance(runtime, Mapping) else {},
                        instance_record(instance),
                    )
                    for job_id, runtime, instance in rows
                ),
            )
