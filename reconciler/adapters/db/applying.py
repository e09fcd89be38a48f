"""Applying a plan: each action becomes *intent rows*, written in the caller's transaction.

Used by the plan-write units of work (`planwrites.PlanWritesStore`), which open the
transaction; no one outside `reconciler.adapters.db` sees the session.

Nothing here does slow I/O. Applying an action records what must become true — a `runs`
row to submit, a `fleets`/`volumes`/`gateways` row to bring up, a run or fleet marked for
termination — and the workers (`reconciler.engine.workers`) carry it out, leasing the rows
and hinting each other. Because `PlanWritesStore.apply_plan_batch` applies a batch of
actions in *one* transaction, a server killed at any point either applied the whole batch
or nothing; the restart re-plans from the store and converges. Every write
is keyed by (resource, spec hash), so applying the same action twice changes nothing:

- run `create`: a new run, unless an active run of the resource already has this spec hash;
  a task's jobs are written with it (the runs worker makes a service's replicas);
- run `update` (in place): the active run takes the new spec, `deployment_num + 1`;
- run `replace`: the active run is stopped and a new one submitted;
- run `delete`: the active run is stopped; the resource leaves the inventory once no run
  of it is active (a failed stop keeps it in the inventory, so it is retried);
- capacity `create`/`update`/`replace`/`delete`: the kind's row is inserted, re-specified,
  or marked `terminating`; its worker confirms deletion before the resource is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from reconciler.adapters.db.applybatch import KnownRows
from reconciler.adapters.db.inventory import live_resource
from reconciler.adapters.db.models import Event, Fleet, Gateway, Job, Resource, Run, Volume
from reconciler.core.jobspecs import expand_jobs, place_key_of
from reconciler.core.reconcile_status import ActionResult
from reconciler.core.scheduling import wait_rank
from reconciler.domain.kinds import Kind
from reconciler.domain.plan import Action, ActionKind
from reconciler.domain.statuses import JobStatus, RunStatus, RunTerminationReason
from reconciler.ports import WorkKind

CapacityRow = Fleet | Volume | Gateway
_CAPACITY: dict[Kind, type[Fleet] | type[Volume] | type[Gateway]] = {
    Kind.FLEET: Fleet,
    Kind.VOLUME: Volume,
    Kind.GATEWAY: Gateway,
}
_WORK_KIND: dict[Kind, WorkKind] = {
    Kind.FLEET: "fleets",
    Kind.VOLUME: "volumes",
    Kind.GATEWAY: "gateways",
    Kind.TASK: "runs",
    Kind.SERVICE: "runs",
    Kind.DEV_ENVIRONMENT: "runs",
}
FINISHED_RUNS = frozenset(s.value for s in RunStatus if s.is_finished())
TERMINATING = "terminating"
DELETING = "deleting"
RUN_SAFETY_PASS = 600.0
"""A new task run's first pass: its jobs' status changes wake it before (runs worker's idle)."""


@dataclass
class ApplyContext:
    """Where and when a batch of actions is applied, and what it touched."""

    session: Session
    project_id: str
    now: datetime
    commit: str | None = None
    origin: str | None = None
    """`cli:<user>` for unmanaged applies; `None` = `git:<path>@<commit>` per action."""
    hints: set[WorkKind] = field(default_factory=set)
    known: KnownRows | None = None
    """The batch's run resources and active runs read at once, their new rows inserted at
    the end (`applybatch`); None: each action reads and inserts its own."""

    def live_resource(self, kind: str, name: str) -> Resource | None:
        if self.known is not None and self.known.covers(kind, name):
            return self.known.live_resource(kind, name)
        return live_resource(self.session, self.project_id, kind, name)

    def active_runs(self, action: Action) -> list[Run]:
        if self.known is not None and self.known.covers(action.kind.value, action.name):
            return self.known.active_runs(action.name)
        return active_runs(self.session, self.project_id, action.name)

    def origin_of(self, action: Action) -> str:
        if self.origin is not None:
            return self.origin
        return f"git:{action.path}@{self.commit}"

    def event(self, target_type: str, target_id: str | None, name: str, message: str) -> None:
        self.session.add(
            Event(
                project_id=self.project_id,
                target_type=target_type,
                target_id=target_id,
                target_name=name,
                message=message,
                created_at=self.now,
            )
        )


def apply_action(ctx: ApplyContext, action: Action) -> ActionResult:
    """Write the intent rows of one action (idempotent); see the module docstring."""
    key = str(action.key)
    if action.action is ActionKind.BLOCKED:
        return ActionResult(key, action.action.value, "blocked", action.reason)
    if not action.action.changes:
        return ActionResult(key, action.action.value, "skipped", action.reason)
    message = _apply_run(ctx, action) if action.kind.is_run else _apply_capacity(ctx, action)
    ctx.hints.add(_WORK_KIND[action.kind])
    return ActionResult(key, action.action.value, "applied", message)


# -- inventory ------------------------------------------------------------------------------


def _record(ctx: ApplyContext, action: Action, status: str) -> Resource:
    """Upsert the live inventory row of the action's resource with its desired spec."""
    spec = dict(action.spec or {})
    row = ctx.live_resource(action.kind.value, action.name)
    if row is None:
        row = Resource(
            project_id=ctx.project_id,
            kind=action.kind.value,
            name=action.name,
            origin=ctx.origin_of(action),
            path=action.path,
            commit=ctx.commit,
            spec=spec,
            spec_hash=action.spec_hash or "",
            status=status,
            created_at=ctx.now,
            updated_at=ctx.now,
        )
        if ctx.known is not None and ctx.known.covers(row.kind, row.name):
            ctx.known.add_resource(row)  # inserted with the batch's others
        else:
            ctx.session.add(row)
            ctx.session.flush()
        return row
    row.origin, row.path, row.commit = ctx.origin_of(action), action.path, ctx.commit
    row.spec, row.spec_hash = spec, action.spec_hash or ""
    row.status, row.status_message, row.updated_at = status, "", ctx.now
    return row


# -- runs -----------------------------------------------------------------------------------


def active_runs(session: Session, project_id: str, name: str) -> list[Run]:
    """The not-finished, not-deleted runs called `name`, newest first."""
    rows = session.scalars(
        select(Run)
        .where(
            Run.project_id == project_id,
            Run.run_name == name,
            Run.deleted.is_(False),
            Run.status.not_in(FINISHED_RUNS),
        )
        .order_by(Run.submitted_at.desc(), Run.id)
    )
    return list(rows)


def request_stop(ctx: ApplyContext, run: Run, *, abort: bool = False, why: str = "") -> bool:
    """Mark an active run for termination (the runs worker stops its jobs); idempotent."""
    if run.status in FINISHED_RUNS or run.status == TERMINATING:
        return False
    reason = RunTerminationReason.ABORTED_BY_USER if abort else RunTerminationReason.STOPPED_BY_USER
    run.status, run.termination_reason = TERMINATING, reason.value
    run.status_message = why or ("aborting" if abort else "stopping")
    run.due_at = None  # due now
    ctx.event("run", run.id, run.run_name, f"run {run.run_name} {run.status_message}")
    ctx.hints.add("runs")
    return True


def _apply_run(ctx: ApplyContext, action: Action) -> str:
    actives = ctx.active_runs(action)
    if action.action is ActionKind.DELETE:
        for run in actives:
            request_stop(ctx, run, why="stopping: its file was removed")
        return _drop_or_mark_deleting(ctx, action, still_active=bool(actives))
    resource = _record(ctx, action, RunStatus.SUBMITTED.value)
    if action.action is ActionKind.UPDATE:
        if actives and actives[0].status != TERMINATING:
            return _update_run(ctx, actives[0], action, resource)
        return f"recorded {action.kind.value} {action.name} (no active run to update)"
    same = [r for r in actives if r.spec_hash == action.spec_hash and r.status != TERMINATING]
    if same:
        return f"run {action.name} already submitted at this spec"
    for run in actives:
        request_stop(ctx, run, why="stopping: replaced by a new spec")
    run = submit_run(ctx, action, resource)
    return f"submitted run {run.run_name}"


def submit_run(ctx: ApplyContext, action: Action, resource: Resource) -> Run:
    """Insert a new run of the action's spec (with a task's jobs; the runs worker makes
    the jobs of services and dev environments)."""
    spec: Mapping[str, Any] = action.spec or {}
    status = RunStatus.PENDING if spec.get("schedule") else RunStatus.SUBMITTED
    task = status is RunStatus.SUBMITTED and action.kind.value == "task"
    run = Run(
        project_id=ctx.project_id,
        resource_id=resource.id,
        run_name=action.name,
        run_type=action.kind.value,
        spec=dict(spec),
        spec_hash=action.spec_hash or "",
        status=status.value,
        submitted_at=ctx.now,
        priority=int(spec.get("priority") or 0),
        # a task's jobs come with it: it sleeps until they move (set here, not updated after)
        due_at=ctx.now + timedelta(seconds=RUN_SAFETY_PASS) if task else None,
    )
    if ctx.known is not None and ctx.known.covers(run.run_type, run.run_name):
        ctx.known.add_run(run)  # inserted with the batch's others
    else:
        ctx.session.add(run)
        ctx.session.flush()
    ctx.event("run", run.id, run.run_name, f"run {run.run_name} submitted ({action.reason})")
    if task:
        _submit_task_jobs(ctx, run)
    return run


def _submit_task_jobs(ctx: ApplyContext, run: Run) -> None:
    """A new task's jobs with the run, as the runs worker's first pass would submit them
    (one replica, each node a job): the jobs worker places them at once, and the run sleeps
    until its jobs move (their writes wake it) instead of a pass that only makes them."""
    slots = [s for s in expand_jobs(run.spec, replicas=1) if s.replica_num == 0]
    for slot in slots:
        add = ctx.known.new_jobs.append if ctx.known is not None else ctx.session.add
        job = Job(
            run_id=run.id,
            status=JobStatus.SUBMITTED.value,
            job_spec={"slot": {"nodes": slot.nodes}, "spec": dict(slot.spec)},
            submitted_at=ctx.now,
            replica_num=slot.replica_num,
            job_num=slot.job_num,
            group_name=slot.group_name,
            submission_num=0,
            deployment_num=run.deployment_num or 0,
        )
        job.wait_rank = wait_rank(run.run_type)
        job.place_key = place_key_of(slot.spec, slot.nodes)
        add(job)
    if slots:
        ctx.hints.add("jobs")
    else:  # nothing to wait for: the runs worker looks at it now
        run.due_at = None


def _update_run(ctx: ApplyContext, run: Run, action: Action, resource: Resource) -> str:
    if run.spec_hash == action.spec_hash:
        return f"run {run.run_name} already at this spec"
    run.spec, run.spec_hash = dict(action.spec or {}), action.spec_hash or ""
    run.resource_id = resource.id
    run.deployment_num += 1
    run.priority = int((action.spec or {}).get("priority") or 0)
    run.due_at = None
    ctx.event(
        "run",
        run.id,
        run.run_name,
        f"run {run.run_name} updated in place (deployment {run.deployment_num}): {action.reason}",
    )
    return f"updated run {run.run_name} to deployment {run.deployment_num}"


def _drop_or_mark_deleting(ctx: ApplyContext, action: Action, *, still_active: bool) -> str:
    row = ctx.live_resource(action.kind.value, action.name)
    if row is None:
        return f"{action.kind.value} {action.name} already deleted"
    if still_active:
        row.status, row.updated_at = DELETING, ctx.now
        return f"stopping {action.kind.value} {action.name}"
    row.deleted_at, row.updated_at = ctx.now, ctx.now
    ctx.event(action.kind.value, row.id, action.name, f"{action.kind.value} {action.name} deleted")
    return f"deleted {action.kind.value} {action.name}"


# -- fleets, volumes, gateways ---------------------------------------------------------------


def live_capacity(session: Session, kind: Kind, project_id: str, name: str) -> list[CapacityRow]:
    """The not-deleted rows of a capacity kind called `name` (at most one is not terminating)."""
    model = _CAPACITY[kind]
    rows = session.scalars(
        select(model).where(
            model.project_id == project_id, model.name == name, model.deleted.is_(False)
        )
    )
    return [row for row in rows if isinstance(row, Fleet | Volume | Gateway)]


def _apply_capacity(ctx: ApplyContext, action: Action) -> str:
    rows = live_capacity(ctx.session, action.kind, ctx.project_id, action.name)
    current = [r for r in rows if r.status not in (TERMINATING, "terminated")]
    label = f"{action.kind.value} {action.name}"
    if action.action in (ActionKind.DELETE, ActionKind.REPLACE):
        for row in current:
            _terminate(ctx, action.kind, row)
        if action.action is ActionKind.DELETE:
            resource = live_resource(ctx.session, ctx.project_id, action.kind.value, action.name)
            if resource is not None:
                resource.status, resource.updated_at = DELETING, ctx.now
            return f"deleting {label}"
        current = []
    resource = _record(ctx, action, "submitted")
    if current and action.action is ActionKind.UPDATE:
        row = current[0]
        row.spec, row.resource_id, row.due_at = dict(action.spec or {}), resource.id, None
        row.status, row.status_message = "submitted", "updating"
        ctx.event(action.kind.value, row.id, action.name, f"{label} updated: {action.reason}")
        return f"updated {label}"
    if current:
        return f"{label} already exists"
    model = _CAPACITY[action.kind]
    row = model(
        project_id=ctx.project_id,
        name=action.name,
        spec=dict(action.spec or {}),
        status="submitted",
        created_at=ctx.now,
        resource_id=resource.id,
    )
    ctx.session.add(row)
    ctx.session.flush()
    ctx.event(action.kind.value, row.id, action.name, f"{label} submitted ({action.reason})")
    return f"submitted {label}"


def _terminate(ctx: ApplyContext, kind: Kind, row: CapacityRow) -> None:
    row.status, row.status_message, row.due_at = TERMINATING, "terminating", None
    ctx.event(kind.value, row.id, row.name, f"{kind.value} {row.name} terminating")
