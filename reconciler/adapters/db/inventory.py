"""The `Store` methods for the inventory: deployed resources and the planner's observed state.

`record_resource` upserts the one live row of (project, kind, name) after an apply;
`mark_resource_deleted` soft-deletes it after a confirmed delete (so a failed delete stays in
the inventory and is retried). `load_observed` turns the live rows into the frozen
`ObservedState` the pure planner takes; for runs the status is the latest run's status, so a
finished task reads as finished without a separate sync.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import RowMapping, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from reconciler.adapters.db.accounts import AccountsStore
from reconciler.adapters.db.models import Project, Resource, Run
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import (
    FINISHED_RUN_STATUSES,
    ObservedResource,
    ObservedState,
    ResourceSource,
)


class InventoryStore(AccountsStore):
    def _project_id_in(self, session: Session, name: str) -> str:
        """Id of the project called `name`, created (in `session`) if missing."""
        found = session.scalars(select(Project.id).where(Project.name == name)).one_or_none()
        if found is not None:
            return found
        project = Project(name=name, created_at=self.now())
        try:
            with session.begin_nested():
                session.add(project)
        except IntegrityError:  # created by another writer in between
            return session.scalars(select(Project.id).where(Project.name == name)).one()
        return project.id

    def record_resource(
        self,
        project: str,
        kind: str,
        name: str,
        *,
        origin: str,
        path: str | None,
        commit: str | None,
        spec: Mapping[str, Any],
        spec_hash: str,
        status: str,
        status_message: str = "",
    ) -> Resource:
        """Create or update the live resource (project, kind, name) as just deployed."""
        now = self.now()
        with self.writing() as session:
            project_id = self._project_id_in(session, project)
            row = live_resource(session, project_id, kind, name)
            if row is None:
                row = Resource(
                    project_id=project_id,
                    kind=kind,
                    name=name,
                    origin=origin,
                    path=path,
                    commit=commit,
                    spec=dict(spec),
                    spec_hash=spec_hash,
                    status=status,
                    status_message=status_message,
                    created_at=now,
                    updated_at=now,
                )
                session.add(row)
            else:
                row.origin, row.path, row.commit = origin, path, commit
                row.spec, row.spec_hash = dict(spec), spec_hash
                row.status, row.status_message, row.updated_at = status, status_message, now
        return row

    def get_resource(self, project: str, kind: str, name: str) -> Resource | None:
        """The live resource, or None."""
        with self.reading() as session:
            project_row = session.scalars(
                select(Project).where(Project.name == project)
            ).one_or_none()
            if project_row is None:
                return None
            return live_resource(session, project_row.id, kind, name)

    def list_resources(self, project: str, *, include_deleted: bool = False) -> list[Resource]:
        """Resources of the project ordered by kind then name (deleted ones last if asked)."""
        with self.reading() as session:
            query = (
                select(Resource)
                .join(Project, Project.id == Resource.project_id)
                .where(Project.name == project)
            )
            if not include_deleted:
                query = query.where(Resource.deleted_at.is_(None))
            query = query.order_by(
                Resource.deleted_at.is_not(None), Resource.kind, Resource.name, Resource.id
            )
            return list(session.scalars(query))

    def project_id_of(self, name: str) -> str | None:
        """The id of the project called `name`, or None."""
        with self.reading() as session:
            return session.scalar(select(Project.id).where(Project.name == name))

    def ensure_project(self, name: str) -> str:
        """The id of the project called `name`, created if missing (safe under concurrent
        callers: a read first, a write only for a new project)."""
        found = self.project_id_of(name)
        if found is not None:
            return found
        with self.writing() as session:
            return self._project_id_in(session, name)

    def resource_source(self, resource_id: str) -> ResourceSource | None:
        """The origin, path and commit of the resource `resource_id` (deleted or not)."""
        with self.reading() as session:
            row = session.execute(
                select(Resource.origin, Resource.path, Resource.commit).where(
                    Resource.id == resource_id
                )
            ).first()
            return None if row is None else ResourceSource(row[0], row[1], row[2])

    def set_resource_status(self, resource_id: str, status: str, message: str = "") -> bool:
        """Set status and message of a resource; False if there is no such row."""
        return self.update(
            Resource, resource_id, status=status, status_message=message, updated_at=self.now()
        )

    def mark_resource_deleted(self, project: str, kind: str, name: str) -> bool:
        """Soft-delete the live resource once its deletion is confirmed; False if none."""
        now = self.now()
        with self.writing() as session:
            project_row = session.scalars(
                select(Project).where(Project.name == project)
            ).one_or_none()
            row = (
                None if project_row is None else live_resource(session, project_row.id, kind, name)
            )
            if row is None:
                return False
            row.deleted_at, row.updated_at = now, now
            return True

    def load_observed(self, project: str) -> ObservedState:
        """The planner's view of what is deployed in `project` (frozen domain values)."""
        r = Resource.__table__.c
        query = (
            select(r.id, r.kind, r.name, r.origin, r.spec, r.spec_hash, r.status, r.path, r.commit)
            .join(Project.__table__, Project.__table__.c.id == r.project_id)
            .where(Project.__table__.c.name == project, r.deleted_at.is_(None))
            .order_by(r.kind, r.name)
        )
        with self.reading() as session:
            rows = session.execute(query).all()
            run_status = _latest_run_statuses(session, project)
        observed = tuple(
            _to_observed(project, row._mapping, run_status.get(row.id)) for row in rows
        )
        return ObservedState(project=project, resources=observed)


def _latest_run_statuses(session: Session, project: str) -> dict[str, str]:
    """resource id → status of its most recently submitted, not deleted run (one project)."""
    rows = session.execute(
        select(Run.resource_id, Run.status)
        .join(Resource, Resource.id == Run.resource_id)
        .join(Project, Project.id == Resource.project_id)
        .where(Project.name == project, Resource.deleted_at.is_(None), Run.deleted.is_(False))
        .order_by(Run.submitted_at, Run.id)
    )
    latest: dict[str, str] = {}
    for resource_id, status in rows:
        if resource_id is not None:
            latest[resource_id] = status  # later submissions overwrite earlier ones
    return latest


def _to_observed(project: str, row: RowMapping, run_status: str | None) -> ObservedResource:
    kind = Kind(row["kind"])
    status = run_status if kind.is_run and run_status is not None else row["status"]
    return ObservedResource(
        kind=kind,
        name=row["name"],
        project=project,
        origin=row["origin"],
        spec=row["spec"],
        spec_hash=row["spec_hash"],
        status=status,
        path=row["path"],
        commit=row["commit"],
        finished=kind.is_run and status in FINISHED_RUN_STATUSES,
    )


def live_resource(session: Session, project_id: str, kind: str, name: str) -> Resource | None:
    """The not-deleted resource row of (project, kind, name) in `session`, if any."""
    found: Resource | None = session.scalars(
        select(Resource).where(
            Resource.project_id == project_id,
            Resource.kind == kind,
            Resource.name == name,
            Resource.deleted_at.is_(None),
        )
    ).one_or_none()
    return found
