"""Capacity deleted outside Dockyard, as one named unit of work (a part of `Store`).

`deleted_outside_git(project)` is read by the plan function (`engine.planning.plan_live`,
hence the reconcile and the server's PR plans) so that a fleet, volume or gateway Git
still declares but someone deleted by hand (`dockyard delete`, dstack's `fleet delete`)
is planned as drift to restore rather than as a plain create.

A key counts when all of these hold:
- it has no live inventory row (the deletion finished: its row is soft-deleted);
- its newest deleted row was owned by Git (`git:` origin);
- the newest applied reconcile's plan (what Git last said) has an action for it other
  than `delete` or `retain`: Git still declared it, so Git did not delete it.
A project that never applied a revision has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select

from reconciler.adapters.db.history import last_applied
from reconciler.adapters.db.models import Project, Reconcile, Resource
from reconciler.adapters.db.sessions import StoreBase
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import ObservedResource, is_git_origin

CAPACITY_KINDS = (Kind.FLEET.value, Kind.VOLUME.value, Kind.GATEWAY.value)
_NOT_DECLARED = frozenset({"delete", "retain"})


def declared_capacity(plan: Any) -> set[tuple[str, str]]:
    """(kind, name) of the capacity a recorded plan JSON still declared."""
    actions = plan.get("actions") if isinstance(plan, Mapping) else None
    found: set[tuple[str, str]] = set()
    for action in actions if isinstance(actions, list) else ():
        if not isinstance(action, Mapping) or action.get("kind") not in CAPACITY_KINDS:
            continue
        if action.get("action") not in _NOT_DECLARED:
            found.add((str(action["kind"]), str(action.get("name"))))
    return found


class VanishedStore(StoreBase):
    """See the module docstring."""

    def deleted_outside_git(self, project: str) -> tuple[ObservedResource, ...]:
        """The newest deleted row of each capacity resource deleted outside Git, as it was
        last deployed (`status` "deleted"), ordered by kind and name. The applied plan is
        read only when some Git-owned capacity was deleted and not made again."""
        with self.reading() as session:
            project_id = session.scalar(select(Project.id).where(Project.name == project))
            if project_id is None:
                return ()
            rows = session.scalars(
                select(Resource)
                .where(Resource.project_id == project_id, Resource.kind.in_(CAPACITY_KINDS))
                .order_by(Resource.kind, Resource.name, Resource.deleted_at.desc())
            ).all()
            gone = _gone(rows)
            if not gone:
                return ()
            plan = session.scalar(last_applied(Reconcile.plan, project_id))
        declared = declared_capacity(plan)
        return tuple(_observed(project, row) for key, row in gone if key in declared)


def _gone(rows: Sequence[Resource]) -> list[tuple[tuple[str, str], Resource]]:
    """(kind, name) → the newest deleted row, for keys without a live row whose newest
    deleted row Git owned; sorted by key."""
    newest: dict[tuple[str, str], Resource] = {}
    live: set[tuple[str, str]] = set()
    for row in rows:
        key = (row.kind, row.name)
        if row.deleted_at is None:
            live.add(key)
        else:
            newest.setdefault(key, row)  # rows come newest deletion first
    return [
        (key, row)
        for key, row in sorted(newest.items())
        if key not in live and is_git_origin(row.origin)
    ]


def _observed(project: str, row: Resource) -> ObservedResource:
    return ObservedResource(
        kind=Kind(row.kind),
        name=row.name,
        project=project,
        origin=row.origin,
        spec=row.spec,
        spec_hash=row.spec_hash,
        status="deleted",
        path=row.path,
        commit=row.commit,
    )
