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

from sqlalchemy import select
from sqlalchemy.orm import Session

from reconciler.adapters.db.accounts import AccountsStore
from reconciler.adapters.db.models import Project, Resource, Run
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import FINISHED_RUN_STATUSES, ObservedResource, ObservedState


class InventoryStore(AccountsStore):
    def _project_id(self, project: str) -> str:
        """Id of the project called `project`, created if missing."""
        return self.get_or_create_project(project).id

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
        project_id = self._project_id(project)
        now = self.now()
        with self.writing() as session:
            row = self._live(session, project_id, kind, name)
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
            return self._live(session, project_row.id, kind, name)

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
            row = None if project_row is None else self._live(session, project_row.id, kind, name)
            if row is None:
                return False
            row.deleted_at, row.updated_at = now, now
            return True

    def load_observed(self, project: str) -> ObservedState:
        """The planner's view of what is deployed in `project` (frozen domain values)."""
        with self.reading() as session:
            rows = session.execute(
                select(Resource)
                .join(Project, Project.id == Resource.project_id)
                .where(Project.name == project, Resource.deleted_at.is_(None))
                .order_by(Resource.kind, Resource.name)
            ).scalars()
            resources = list(rows)
            run_status = _latest_run_statuses(session, [r.id for r in resources])
        observed = tuple(_to_observed(project, row, run_status.get(row.id)) for row in resources)
        return ObservedState(project=project, resources=observed)

    @staticmethod
    def _live(session: Session, project_id: str, kind: str, name: str) -> Resource | None:
        found: Resource | None = session.scalars(
            select(Resource).where(
                Resource.project_id == project_id,
                Resource.kind == kind,
                Resource.name == name,
                Resource.deleted_at.is_(None),
            )
        ).one_or_none()
        return found


def _latest_run_statuses(session: Session, resource_ids: list[str]) -> dict[str, str]:
    """resource id → status of its most recently submitted, not deleted run."""
    latest: dict[str, str] = {}
    if not resource_ids:
        return latest
    rows = session.execute(
        select(Run.resource_id, Run.status)
        .where(Run.resource_id.in_(resource_ids), Run.deleted.is_(False))
        .order_by(Run.submitted_at, Run.id)
    )
    for resource_id, status in rows:
        if resource_id is not None:
            latest[resource_id] = status  # later submissions overwrite earlier ones
    return latest


def _to_observed(project: str, row: Resource, run_status: str | None) -> ObservedResource:
    kind = Kind(row.kind)
    status = run_status if kind.is_run and run_status is not None else row.status
    return ObservedResource(
        kind=kind,
        name=row.name,
        project=project,
        origin=row.origin,
        spec=row.spec,
        spec_hash=row.spec_hash,
        status=status,
        path=row.path,
        commit=row.commit,
        finished=kind.is_run and status in FINISHED_RUN_STATUSES,
    )
