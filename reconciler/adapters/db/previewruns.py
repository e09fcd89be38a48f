"""Preview runs of pull requests as named units of work (docs/previews.md).

Called by `reconciler.engine.previewruns` (deploy, teardown, the leased sweep) and the PR
side (`reconciler.pr.previews`). Each method is one transaction:

- `get_preview` / `save_preview` / `sweepable_previews` / `previews_hourly`: the
  `preview_runs` rows as `PreviewRun` values;
- `open_preview_project`: the ephemeral project, created for this PR only (a project of
  that name that no preview owns is refused), with the members of the config repo's
  project (role `user`, so they reach its services through the proxy with their token);
- `apply_preview_actions`: a preview's planned actions, applied like a reconcile's
  (origin `git:<path>@<head>`, so `dockyard apply` cannot change them);
- `remove_idle_project`: deletes the project (its rows go with it) once nothing of it runs;
- `preview_statuses`: the preview project's runs as the comment shows them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from reconciler.adapters.db.applying import FINISHED_RUNS, ApplyContext, apply_action
from reconciler.adapters.db.models import (
    Fleet,
    Gateway,
    Instance,
    Job,
    Maintenance,
    Member,
    PreviewRunRow,
    Project,
    Run,
    Volume,
)
from reconciler.adapters.db.sessions import StoreBase
from reconciler.core.reconcile_status import ActionResult
from reconciler.domain.plan import Action
from reconciler.domain.previewruns import PreviewRun, PreviewRunStatus, PreviewState, PullRef
from reconciler.errors import ConflictError
from reconciler.ports import WorkKind

_LIVE = (PreviewState.ACTIVE.value, PreviewState.STOPPING.value)


def _domain(row: PreviewRunRow) -> PreviewRun:
    return PreviewRun(
        pull=PullRef(row.provider, row.repo, row.number),
        project=row.project,
        preview_project=row.preview_project,
        state=PreviewState(row.state),
        head=row.head,
        requested_by=row.requested_by,
        trigger=row.trigger,
        fork=row.fork,
        hourly=row.hourly,
        prices={str(k): float(v) for k, v in (row.prices or {}).items()},
        notes=tuple(str(n) for n in row.notes or ()),
        reason=row.reason,
        comment_id=row.comment_id,
        deployed_at=row.deployed_at,
        expires_at=row.expires_at,
        closed_at=row.closed_at,
    )


def _values(preview: PreviewRun) -> dict[str, Any]:
    return {
        "project": preview.project,
        "preview_project": preview.preview_project,
        "state": preview.state.value,
        "head": preview.head,
        "requested_by": preview.requested_by[:255],
        "trigger": preview.trigger,
        "fork": preview.fork,
        "hourly": preview.hourly,
        "prices": dict(preview.prices),
        "notes": list(preview.notes)[:50],
        "reason": preview.reason[:2000],
        "comment_id": preview.comment_id,
        "deployed_at": preview.deployed_at,
        "expires_at": preview.expires_at,
        "closed_at": preview.closed_at,
    }


def _where(pull: PullRef) -> tuple[Any, ...]:
    return (
        PreviewRunRow.provider == pull.provider,
        PreviewRunRow.repo == pull.repo,
        PreviewRunRow.number == pull.number,
    )


class PreviewRunsStore(StoreBase):
    """See the module docstring."""

    def ensure_maintenance(self, name: str) -> None:
        """Create the leased row of the sweep `name` if it is not there yet."""
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        with self.writing() as session:
            session.execute(insert(Maintenance).values(id=name).on_conflict_do_nothing())

    def get_preview(self, pull: PullRef) -> PreviewRun | None:
        with self.reading() as session:
            row = session.scalars(select(PreviewRunRow).where(*_where(pull))).first()
            return None if row is None else _domain(row)

    def save_preview(self, preview: PreviewRun) -> PreviewRun:
        """Insert or update the row of `preview.pull`."""
        values = _values(preview)
        with self.writing() as session:
            row = session.scalars(select(PreviewRunRow).where(*_where(preview.pull))).first()
            if row is None:
                pull = preview.pull
                row = PreviewRunRow(
                    provider=pull.provider,
                    repo=pull.repo,
                    number=pull.number,
                    created_at=self.now(),
                    **values,
                )
                session.add(row)
            else:
                for key, value in values.items():
                    setattr(row, key, value)
        return preview

    def sweepable_previews(self, limit: int = 200) -> list[PreviewRun]:
        """Active and stopping previews, the soonest to expire first."""
        query = (
            select(PreviewRunRow)
            .where(PreviewRunRow.state.in_(_LIVE))
            .order_by(PreviewRunRow.expires_at, PreviewRunRow.id)
            .limit(limit)
        )
        with self.reading() as session:
            return [_domain(row) for row in session.scalars(query)]

    def previews_hourly(self, project: str, *, excluding: PullRef) -> float:
        """$/h of the project's active previews, but the one of `excluding`."""
        query = select(func.coalesce(func.sum(PreviewRunRow.hourly), 0.0)).where(
            PreviewRunRow.project == project,
            PreviewRunRow.state == PreviewState.ACTIVE.value,
            ~(
                (PreviewRunRow.provider == excluding.provider)
                & (PreviewRunRow.repo == excluding.repo)
                & (PreviewRunRow.number == excluding.number)
            ),
        )
        with self.reading() as session:
            return float(session.scalar(query) or 0.0)

    def open_preview_project(self, preview: PreviewRun) -> str:
        """The preview project's id: created with the members of `preview.project` (role
        `user`) and every later member added; ConflictError when another owns the name."""
        name = preview.preview_project
        with self.writing() as session:
            owner = session.scalars(
                select(PreviewRunRow).where(PreviewRunRow.preview_project == name)
            ).first()
            if owner is not None and (owner.provider, owner.repo, owner.number) != (
                preview.pull.provider,
                preview.pull.repo,
                preview.pull.number,
            ):
                raise ConflictError(f"project {name} belongs to another pull request's preview")
            project = session.scalars(select(Project).where(Project.name == name)).first()
            if project is not None and (owner is None or owner.state not in _LIVE):
                # only a live preview has a project: any other one is someone else's
                raise ConflictError(f"project {name} exists and is not a preview: rename it")
            if project is None:
                project = Project(name=name, created_at=self.now())
                session.add(project)
                session.flush()
            _copy_members(session, preview.project, project.id)
            return project.id

    def apply_preview_actions(
        self, project_id: str, head: str, actions: Sequence[Action]
    ) -> tuple[list[ActionResult], set[WorkKind]]:
        """Apply a preview's actions in one transaction (origin `git:<path>@<head>`)."""
        with self.writing() as session:
            session.execute(select(Project).where(Project.id == project_id).with_for_update())
            ctx = ApplyContext(session=session, project_id=project_id, now=self.now(), commit=head)
            results = [apply_action(ctx, action) for action in actions]
        return results, ctx.hints

    def remove_idle_project(self, name: str) -> bool:
        """Delete project `name` when none of its runs is active and all its capacity is
        terminated (its rows go with it); True when it is gone (or was never there)."""
        with self.writing() as session:
            project_id = session.scalar(select(Project.id).where(Project.name == name))
            if project_id is None:
                return True
            active = session.scalar(
                select(func.count(Run.id)).where(
                    Run.project_id == project_id, Run.status.not_in(FINISHED_RUNS)
                )
            )
            if active:
                return False
            for leased in (Run, Fleet, Instance, Volume, Gateway):  # a worker still at it
                held = session.scalar(
                    select(func.count(leased.id)).where(
                        leased.project_id == project_id, leased.lock_token.is_not(None)
                    )
                )
                if held:
                    return False
            instances = select(func.count(Instance.id)).where(
                Instance.project_id == project_id, Instance.status != "terminated"
            )
            if session.scalar(instances):
                return False
            for model in (Fleet, Volume, Gateway):
                live = session.scalar(
                    select(func.count(model.id)).where(
                        model.project_id == project_id,
                        model.deleted.is_(False),
                        model.status != "terminated",
                    )
                )
                if live:
                    return False
            session.execute(delete(Project).where(Project.id == project_id))
        return True

    def preview_statuses(self, name: str) -> list[PreviewRunStatus]:
        """The newest run of each name in project `name`, with whether a service is ready."""
        with self.reading() as session:
            project_id = session.scalar(select(Project.id).where(Project.name == name))
            if project_id is None:
                return []
            runs = session.scalars(
                select(Run)
                .where(Run.project_id == project_id, Run.deleted.is_(False))
                .order_by(Run.run_name, Run.submitted_at.desc())
            ).all()
            newest: dict[str, Run] = {}
            for run in runs:
                newest.setdefault(run.run_name, run)
            ready = set(
                session.scalars(
                    select(Job.run_id).where(
                        Job.run_id.in_([r.id for r in newest.values()]), Job.status == "running"
                    )
                ).all()
            )
            jobs = session.scalars(
                select(Job).where(Job.run_id.in_(ready), Job.status == "running")
            ).all()
            answering = {j.run_id for j in jobs if (j.runtime or {}).get("ready")}
        return [
            PreviewRunStatus(
                name=run.run_name,
                kind=run.run_type,
                status=run.status,
                submitted_at=run.submitted_at,
                ready=run.id in answering,
            )
            for run in newest.values()
        ]


def _copy_members(session: Any, parent: str, project_id: str) -> None:
    parent_id = session.scalar(select(Project.id).where(Project.name == parent))
    if parent_id is None:
        return
    have = set(session.scalars(select(Member.user_id).where(Member.project_id == project_id)))
    for user_id in session.scalars(select(Member.user_id).where(Member.project_id == parent_id)):
        if user_id not in have:
            session.add(Member(project_id=project_id, user_id=user_id, role="user"))
