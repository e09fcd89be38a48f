"""The units of work that write plans and the user's run/resource requests.

Called by the reconciles worker (`reconciler.engine.reconciling`) and by the unmanaged
(`dockyard apply` / stop / delete) paths of `reconciler.engine.unmanaged`. Each method is
one transaction over the intent-row helpers of `applying`:

- `apply_plan_batch` applies a reconcile's actions under the project's row lock, unless a
  newer reconcile of the project already reached its apply stage;
- `apply_unmanaged_action` applies one posted config as `cli:<user>`;
- `stop_run_by_name` asks the active runs of a name to stop;
- `delete_resource_by_name` deletes a finished run, or marks capacity for termination;
- `capacity_in_flight` says whether a fleet or instance of the project is still coming up.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import timedelta

from sqlalchemy import or_, select

from reconciler.adapters.db.applybatch import flush_deferred, prefetch
from reconciler.adapters.db.applying import (
    DELETING,
    FINISHED_RUNS,
    ApplyContext,
    active_runs,
    apply_action,
    live_capacity,
    request_stop,
)
from reconciler.adapters.db.inventory import live_resource
from reconciler.adapters.db.models import Fleet, Instance, Project, Reconcile, Run
from reconciler.adapters.db.sessions import StoreBase
from reconciler.core.reconcile_status import ActionResult
from reconciler.domain.kinds import Kind
from reconciler.domain.plan import Action
from reconciler.errors import UsageError
from reconciler.ports import WorkKind

_RUN_KINDS = ("task", "service", "dev-environment")
_CAPACITY_WORK: dict[Kind, WorkKind] = {
    Kind.FLEET: "fleets",
    Kind.VOLUME: "volumes",
    Kind.GATEWAY: "gateways",
}


class PlanWritesStore(StoreBase):
    """The `Store` part that applies plans and requests; see the module docstring."""

    def apply_plan_batch(
        self,
        reconcile_id: str,
        actions: Sequence[Action],
        *,
        applying_stages: Collection[str],
    ) -> tuple[list[ActionResult], set[WorkKind]] | None:
        """Apply `actions` of the reconcile in one transaction; the results and the
        worker kinds to hint, or None when a newer pass got there first."""
        with self.writing() as session:
            row = session.get(Reconcile, reconcile_id)
            if row is None:
                return None
            lock = select(Project).where(Project.id == row.project_id).with_for_update()
            session.execute(lock)
            newer = session.scalars(
                select(Reconcile.id).where(
                    Reconcile.project_id == row.project_id,
                    Reconcile.created_at > row.created_at,
                    Reconcile.stage.in_(list(applying_stages)),
                )
            ).first()
            if newer is not None:
                return None
            ctx = ApplyContext(
                session=session,
                project_id=row.project_id,
                now=self.now(),
                commit=row.attempted_revision,
                known=(known := prefetch(session, row.project_id, actions)),
            )
            results = [apply_action(ctx, action) for action in actions]
            flush_deferred(session, known)
        return results, ctx.hints

    def apply_unmanaged_action(
        self, project_id: str, action: Action, *, user: str
    ) -> tuple[ActionResult, set[WorkKind]]:
        """Apply one posted config's action as `cli:<user>`; its result and the hints."""
        with self.writing() as session:
            ctx = ApplyContext(
                session=session, project_id=project_id, now=self.now(), origin=f"cli:{user}"
            )
            result = apply_action(ctx, action)
        return result, ctx.hints

    def stop_run_by_name(self, project_id: str, project: str, name: str, *, abort: bool) -> bool:
        """Ask the active run `name` to stop; False if it had already finished."""
        with self.writing() as session:
            ctx = ApplyContext(session=session, project_id=project_id, now=self.now())
            runs = active_runs(session, project_id, name)
            if not runs:
                known = session.scalars(
                    select(Run.id).where(Run.project_id == project_id, Run.run_name == name)
                ).first()
                if known is None:
                    raise UsageError(f"no run {name!r} in project {project!r}")
                return False
            why = "aborted by user" if abort else "stopped by user"
            for run in runs:
                request_stop(ctx, run, abort=abort, why=why)
        return True

    def delete_resource_by_name(
        self, project_id: str, project: str, kind: Kind | None, name: str
    ) -> WorkKind:
        """Delete a finished run (`kind` None or a run kind), or mark a fleet, volume or
        gateway for termination; the worker kind to hint."""
        with self.writing() as session:
            now = self.now()
            if kind is None or kind.is_run:
                runs = session.scalars(
                    select(Run).where(
                        Run.project_id == project_id, Run.run_name == name, Run.deleted.is_(False)
                    )
                ).all()
                if not runs:
                    raise UsageError(f"no run {name!r} in project {project!r}")
                if any(r.status not in FINISHED_RUNS for r in runs):
                    raise UsageError(f"run {name!r} is still active: stop it first")
                for run in runs:
                    run.deleted = True
                for run_kind in _RUN_KINDS:
                    resource = live_resource(session, project_id, run_kind, name)
                    if resource is not None:
                        resource.deleted_at = resource.updated_at = now
                return "runs"
            rows = live_capacity(session, kind, project_id, name)
            if not rows:
                raise UsageError(f"no {kind.value} {name!r} in project {project!r}")
            for row in rows:
                if row.status not in ("terminating", "terminated"):
                    row.status, row.status_message, row.due_at = "terminating", "deleting", None
            resource = live_resource(session, project_id, kind.value, name)
            if resource is not None:
                resource.status, resource.updated_at = DELETING, now
        return _CAPACITY_WORK.get(kind, "gateways")

    def capacity_in_flight(self, project_id: str, *, within: float = 600.0) -> bool:
        """Whether a fleet of the project created in the last `within` seconds is being
        provisioned, or such an instance is not up yet.

        A fleet whose last attempt failed (`status_message` set while `submitted`: an SSH
        host that does not answer, a stack that failed) is retrying, not coming: it does
        not count, so it never holds the runs of a reconcile (jobs that need it wait for it
        themselves, `core.elastic.hosts_coming`)."""
        since = self.now() - timedelta(seconds=within)
        with self.reading() as session:
            fleet = session.scalars(
                select(Fleet.id).where(
                    Fleet.project_id == project_id,
                    Fleet.deleted.is_(False),
                    Fleet.status == "submitted",
                    or_(Fleet.status_message.is_(None), Fleet.status_message == ""),
                    Fleet.created_at >= since,
                )
            ).first()
            if fleet is not None:
                return True
            instance = session.scalars(
                select(Instance.id).where(
                    Instance.project_id == project_id,
                    Instance.status.in_(["pending", "provisioning"]),
                    Instance.created_at >= since,
                )
            ).first()
            return instance is not None
