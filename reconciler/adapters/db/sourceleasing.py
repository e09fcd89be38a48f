"""The reconciles of one project only, leased for that project's own loop.

Each source is followed by its own `reconciles` worker (`reconciler.engine.sourceloops`),
so a source whose fetch hangs holds only its own rows: `ProjectReconcileLeasing` is the
`StoreLeasing` of the "reconciles" kind whose claim and `next_due` see only the rows of
one project (by name, so a project created by its first reconcile is found) and of its
pull requests' preview projects. The filter
is built once per leasing, so the claim's statements are built once too (`Leases._built`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import and_, or_, select

from reconciler.adapters.db.lanes import Lane
from reconciler.adapters.db.leasing import Leases
from reconciler.adapters.db.models import PreviewRunRow, Project, Reconcile
from reconciler.adapters.db.workleasing import L, StoreLeasing, pending_work
from reconciler.ports import WorkKind


class ProjectReconcileLeasing(StoreLeasing[L]):
    """`StoreLeasing` whose "reconciles" rows are those of `project` (and of its preview
    projects) alone."""

    def __init__(
        self,
        leases: Leases,
        project: str,
        *,
        make_lease: Callable[[WorkKind, str, str], L],
        lane: Lane | None = None,
    ) -> None:
        super().__init__(leases, make_lease=make_lease, lane=lane)
        self.project = project
        # the project's own rows and those of its pull requests' preview projects, which
        # the project's source deploys (`reconciler.engine.previewing`)
        previews = select(PreviewRunRow.preview_project).where(PreviewRunRow.project == project)
        of_project = select(Project.id).where(
            or_(Project.name == project, Project.name.in_(previews))
        )
        self._where = and_(pending_work("reconciles"), Reconcile.project_id.in_(of_project))

    async def claim_due(
        self, kind: WorkKind, *, owner: str, limit: int, lease_seconds: float
    ) -> Sequence[L]:
        assert kind == "reconciles", kind
        claimed = await self._run(
            self._leases.claim_due,
            Reconcile,
            owner=owner,
            limit=limit,
            lease_seconds=lease_seconds,
            where=self._where,
        )
        return [self._make_lease(kind, row_id, token) for row_id, token in claimed]

    async def next_due(self, kind: WorkKind) -> float | None:
        assert kind == "reconciles", kind
        return await self._run(self._leases.next_due, Reconcile, where=self._where)
