"""The `Store` queries for runs, jobs, fleets, instances, volumes and gateways.

Creating a row is `store.add(Run(...))` (the models have typed keyword constructors) and an
unfenced change is `store.update(Model, id, **values)`; background workers write through
`store.leases` instead, fenced by their lease token. This module holds the lookups the
server, the scheduler and the workers share.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select

from reconciler.adapters.db.models import Fleet, Instance, Job, Run, Volume
from reconciler.adapters.db.records import capacity_record, instance_record
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.inventory import CapacityRecord, InstanceRecord


class WorkloadsStore(StoreBase):
    # -- runs and jobs ----------------------------------------------------------------------

    def list_runs(
        self,
        project_id: str,
        *,
        statuses: Collection[str] | None = None,
        include_deleted: bool = False,
        limit: int = 1000,
    ) -> list[Run]:
        """Runs of the project, newest submission first."""
        query = select(Run).where(Run.project_id == project_id)
        if statuses is not None:
            query = query.where(Run.status.in_(list(statuses)))
        if not include_deleted:
            query = query.where(Run.deleted.is_(False))
        query = query.order_by(Run.submitted_at.desc(), Run.id.desc()).limit(limit)
        with self.reading() as session:
            return list(session.scalars(query))

    def get_run_by_name(self, project_id: str, run_name: str) -> Run | None:
        """The newest not deleted run called `run_name` in the project."""
        query = (
            select(Run)
            .where(Run.project_id == project_id, Run.run_name == run_name, Run.deleted.is_(False))
            .order_by(Run.submitted_at.desc(), Run.id.desc())
            .limit(1)
        )
        with self.reading() as session:
            return session.scalars(query).first()

    def list_jobs(self, run_id: str) -> list[Job]:
        """Jobs of the run by replica, job number, then submission."""
        query = (
            select(Job)
            .where(Job.run_id == run_id)
            .order_by(Job.replica_num, Job.job_num, Job.submission_num, Job.submitted_at)
        )
        with self.reading() as session:
            return list(session.scalars(query))

    # -- fleets and instances ---------------------------------------------------------------

    def list_fleets(self, project_id: str, *, include_deleted: bool = False) -> list[Fleet]:
        query = select(Fleet).where(Fleet.project_id == project_id)
        if not include_deleted:
            query = query.where(Fleet.deleted.is_(False))
        with self.reading() as session:
            return list(session.scalars(query.order_by(Fleet.name, Fleet.created_at)))

    def fleet_records(self, project_id: str) -> list[CapacityRecord]:
        """The project's live fleets (by name), as domain values."""
        return [capacity_record("fleet", row) for row in self.list_fleets(project_id)]

    def instance_records(
        self,
        *,
        project_id: str | None = None,
        fleet_id: str | None = None,
        statuses: Collection[str] | None = None,
    ) -> list[InstanceRecord]:
        """`list_instances` as domain values."""
        found = self.list_instances(project_id=project_id, fleet_id=fleet_id, statuses=statuses)
        return [instance_record(row) for row in found]

    def instance_record(self, instance_id: str) -> InstanceRecord | None:
        """One instance by id, as a domain value (None if there is no such row)."""
        with self.reading() as session:
            row = session.get(Instance, instance_id)
            return None if row is None else instance_record(row)

    def list_instances(
        self,
        *,
        project_id: str | None = None,
        fleet_id: str | None = None,
        statuses: Collection[str] | None = None,
    ) -> list[Instance]:
        """Instances matching every filter given, by fleet then instance number."""
        query = select(Instance)
        if project_id is not None:
            query = query.where(Instance.project_id == project_id)
        if fleet_id is not None:
            query = query.where(Instance.fleet_id == fleet_id)
        if statuses is not None:
            query = query.where(Instance.status.in_(list(statuses)))
        query = query.order_by(Instance.fleet_id, Instance.instance_num, Instance.created_at)
        with self.reading() as session:
            return list(session.scalars(query))

    # -- volumes and gateways ---------------------------------------------------------------

    def get_volume_by_name(self, project_id: str, name: str) -> Volume | None:
        query = select(Volume).where(
            Volume.project_id == project_id, Volume.name == name, Volume.deleted.is_(False)
        )
        with self.reading() as session:
            return session.scalars(query.order_by(Volume.created_at.desc()).limit(1)).first()
