"""One reconcile pass: fetch → parse → plan → preview → apply → record → report.

`Reconciler.process(reconcile_id, lock_token)` is the callback of the `reconciles` worker:
it takes one queued reconcile row and runs the stages in a straight line (Flux's
`reconcile()`), recording each stage on the row *before* it starts so a stuck pass shows
where it stopped. The rules of the loop (DESIGN.md):

- a commit with any invalid config (or an empty snapshot the policy does not allow) plans
  errors and applies nothing; the last good revision stays in force;
- the plan comes from `planning.plan_live`, the one plan function (the PR plans use it
  too): every changing capacity action is previewed first (stack previews through the
  `stacks` engines); if the preview of an available engine fails the whole reconcile is
  aborted before anything is applied;
- an action no engine here can carry out is `blocked`, with the runs that can only wait
  for it; it is recorded as such and everything independent of it is applied ("applied
  N, blocked M" in the outcome);
- the apply writes intent rows for the whole plan in one transaction (`applying`), so a
  server killed mid-apply either applied everything or nothing, and the next pass
  re-plans from the store and converges;
- a pass that applies after a newer pass of the same project has started applying is
  superseded: an older commit never overwrites a newer one;
- a pass of a suspended source (`held`) fetches, plans and previews, and applies nothing:
  it ends `aborted` with the reason (`suspended: …`), its plan recorded;
- a failing commit is recorded once: a timer's pass that fetches the commit the project's
  newest reconcile failed to plan (same last applied revision: a plan with errors depends
  on nothing else) is not planned again; it counts itself on that row (`outcome.checked`)
  and its own row is deleted (`Store.fold_repeated_failure`). Requested passes (webhook,
  CLI, API) always plan. What a row stores is bounded (`core.reconcile_bounds`).

Slow work (git, engines) runs outside DB transactions; the store is synchronous and is
called through `asyncio.to_thread`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from reconciler.adapters.db.store import Store
from reconciler.adapters.gitsource.source import GitSource
from reconciler.core.jobusers import JobUserRule
from reconciler.core.notifying import blocked_message
from reconciler.core.policy import RepoPolicy
from reconciler.core.reconcile_bounds import bounded_error, bounded_outcome, bounded_plan
from reconciler.core.reconcile_status import (
    ActionResult,
    Conclusion,
    ReconcileStatus,
    Stage,
    conclude,
)
from reconciler.core.rendering_json import to_json_dict
from reconciler.domain.desired import DesiredState
from reconciler.domain.history import ReconcileRecord
from reconciler.domain.plan import Action, Plan
from reconciler.engine.deployedpolicy import rules_at
from reconciler.engine.outcomes import Outcome, Verdict, outcome_of
from reconciler.engine.planning import plan_live
from reconciler.engine.previewing import Previewer, placement_warnings
from reconciler.engine.worker import RELEASED
from reconciler.errors import PermanentError
from reconciler.ports import WorkKind
from stacks.catalog import CatalogRow, load_catalog

log = logging.getLogger(__name__)

_APPLYING_STAGES = (Stage.APPLY.value, Stage.RECORD.value, Stage.REPORT.value)


class ConfigSource(Protocol):
    """The config repo as the reconciler reads it (implemented over the git source)."""

    def fetch(self, revision: str | None) -> str:
        """Update the mirror; the commit to reconcile for a request of `revision`."""

    def load(self, commit: str) -> tuple[DesiredState, RepoPolicy]:
        """The desired state and repo policy at `commit` (parsed, cached by blob)."""

    def tree(self, commit: str) -> str:
        """The git tree of `commit` (approvals of a policy exception are keyed by it)."""


class GitConfigSource:
    """`ConfigSource` over the git source; serializes its calls (the mirror is not shared)."""

    def __init__(self, source: GitSource) -> None:
        self._source = source
        self._lock = threading.Lock()

    def fetch(self, revision: str | None) -> str:
        """The branch head, even when a (webhook's) revision is given: the head contains it
        or replaced it, and reconciling an older commit would undo a newer one (late or
        out-of-order deliveries)."""
        del revision
        with self._lock:
            return self._source.fetch()

    def load(self, commit: str) -> tuple[DesiredState, RepoPolicy]:
        with self._lock:
            loaded = self._source.load(self._source.snapshot(commit))
        return loaded.desired, loaded.policy

    def tree(self, commit: str) -> str:
        with self._lock:
            return self._source.tree(commit)


@dataclass(frozen=True, slots=True)
class Report:
    """What a reporter is told when a reconcile ends (for commit statuses, PR comments)."""

    reconcile_id: str
    project: str
    commit: str | None
    status: ReconcileStatus
    error: str | None
    plan: Mapping[str, Any] | None
    summary: str | None = None
    """"applied N, blocked M: …" when the pass applied (`Conclusion.summary`)."""
    blocked: tuple[str, ...] = ()
    """`key: reason` of each blocked action."""


class Reporter(Protocol):
    async def report(self, report: Report) -> None: ...


class NoReporter:
    """The default reporter: reports nowhere (the PR engineer plugs in commit statuses)."""

    async def report(self, report: Report) -> None:
        del report


class Reconciler:
    """Runs reconcile rows; see the module docstring."""

    def __init__(
        self,
        store: Store,
        source: ConfigSource,
        *,
        previewer: Previewer,
        hint: Callable[[WorkKind], None],
        reporter: Reporter | None = None,
        retry: Callable[[str, float], None] | None = None,
        capacity_wait: float = 120.0,
        on_policy: Callable[[str, RepoPolicy], None] | None = None,
        catalog: Sequence[CatalogRow] | None = None,
        job_users: JobUserRule | None = None,
        held: Callable[[str], str | None] | None = None,
    ) -> None:
        self._store = store
        self._held = held
        """`held(project)`: why nothing may be applied now (a suspended source), or None."""
        self.job_users = job_users
        """The server's rule for a process job's `user:` (`core.jobusers`; None: none)."""
        self._source = source
        self.previewer = previewer
        self.catalog = tuple(catalog) if catalog is not None else load_catalog()
        """The offers catalog every pass prices runs with (loaded once, when the server
        starts; default: the bundled one)."""
        self._hint = hint
        self._reporter: Reporter = reporter or NoReporter()
        self._retry = retry
        self._capacity_wait = capacity_wait
        self._on_policy = on_policy

    @property
    def source(self) -> ConfigSource:
        """The config repo this reconciler reads (its deployed policy: `deployedpolicy`)."""
        return self._source

    async def process(self, reconcile_id: str, lock_token: str) -> float | None:
        """The `reconciles` worker callback: one full pass of one reconcile row."""
        row = await asyncio.to_thread(self._store.load_reconcile, reconcile_id, lock_token)
        if row is None or row.status not in ("queued", "running"):
            return None
        try:
            await self._stage(row, Stage.FETCH)
            commit = await asyncio.to_thread(self._source.fetch, row.attempted_revision)
            if row.trigger == "timer" and await self._fold(row, lock_token, commit):
                return RELEASED  # recorded on the row of the pass that failed it (once)
            row = replace(row, attempted_revision=commit)
            conclusion, plan = await self._run(row, commit)
        except Exception as exc:
            outcome = outcome_of(exc)
            if outcome is None:
                raise
            conclusion, plan = _failed(outcome), None
            if outcome.retry_after is not None and self._retry is not None:
                self._retry(row.project_id, outcome.retry_after)
        await self._finish(row, conclusion, plan)
        return None

    async def _fold(self, row: ReconcileRecord, lock_token: str, commit: str) -> bool:
        fold = self._store.fold_repeated_failure
        return await asyncio.to_thread(fold, row.id, lock_token, commit=commit) is not None

    async def _stage(self, row: ReconcileRecord, stage: Stage, **values: Any) -> None:
        await asyncio.to_thread(self._store.set_reconcile_stage, row.id, stage.value, **values)

    async def _run(self, row: ReconcileRecord, commit: str) -> tuple[Conclusion, Plan | None]:
        await self._stage(row, Stage.PARSE, attempted_revision=commit)
        desired, policy = await asyncio.to_thread(self._source.load, commit)
        project = _project_name(row)
        if desired.project != project:
            raise PermanentError(
                f".dockyard.yml at {commit[:12]} says project {desired.project!r}, but this "
                f"reconcile is for project {project!r}: fix `project:` in .dockyard.yml or "
                "run the server for that project"
            )
        if self._on_policy is not None and not desired.issues:
            self._on_policy(project, policy)
        await self._stage(row, Stage.PLAN)
        tree = await asyncio.to_thread(self._source.tree, commit)
        planned = await plan_live(
            self._store,
            project,
            desired,
            policy,
            previewer=self.previewer,
            catalog=self.catalog,
            refresh=True,
            tree=tree,
            deployed=rules_at(self._source),  # approvers: the applied revision's, not this one's
            job_users=self.job_users,
        )
        plan, last_applied = planned.plan, planned.plan.base
        if not plan.ok:
            errors = [str(issue) for issue in plan.errors]
            return conclude(attempted=commit, last_applied=last_applied, plan_errors=errors), plan
        await self._stage(row, Stage.PREVIEW, plan=bounded_plan(to_json_dict(plan)))
        if planned.failures:
            failures = planned.failures
            delays = [f.retry_after for f in failures if f.retry_after is not None]
            if delays and self._retry is not None:
                self._retry(row.project_id, min(delays))
            lines = [f.line for f in failures]
            verdict = conclude(attempted=commit, last_applied=last_applied, preview_errors=lines)
            return verdict, plan
        held = await asyncio.to_thread(self._held, project) if self._held is not None else None
        if held is not None:  # planned and previewed, as always; nothing applied
            return Conclusion(ReconcileStatus.ABORTED, last_applied, held), plan
        await self._stage(row, Stage.APPLY)
        results = await self._apply_in_order(row, plan)
        if results is None:
            error = "superseded: a newer reconcile of this project has applied; nothing applied"
            return Conclusion(ReconcileStatus.ABORTED, last_applied, error), plan
        warnings = await asyncio.to_thread(
            placement_warnings, self._store, row.project_id, plan.actions
        )
        verdict = conclude(attempted=commit, last_applied=last_applied, results=results)
        return replace(verdict, warnings=tuple(warnings)), plan

    async def _apply_in_order(self, row: ReconcileRecord, plan: Plan) -> list[ActionResult] | None:
        """Capacity first; runs once the capacity they may land on is up (or after a wait).

        A job placed while its fleet is still being provisioned would find no instance; so
        the runs are applied in a second transaction once no fleet of the project is being
        provisioned and every instance has answered (at most `capacity_wait` seconds) —
        whether this plan or an earlier, interrupted pass started that provisioning. A crash
        in between leaves a plan whose capacity part is a no-op and whose run part the next
        pass applies.
        """
        capacity = [a for a in plan.actions if not a.kind.is_run]
        runs = [a for a in plan.actions if a.kind.is_run]
        first = await asyncio.to_thread(self._apply, row, capacity)
        if first is None:
            return None
        if any(a.action.changes for a in runs):
            await self._wait_for_capacity(row.project_id)
        second = await asyncio.to_thread(self._apply, row, runs)
        return None if second is None else [*first, *second]

    async def _wait_for_capacity(self, project_id: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._capacity_wait
        while await asyncio.to_thread(
            capacity_in_flight, self._store, project_id, within=self._capacity_wait + 60
        ):
            if loop.time() >= deadline:
                log.warning("capacity of project %s still provisioning; applying runs", project_id)
                return
            await asyncio.sleep(0.1)

    def _apply(self, row: ReconcileRecord, actions: Sequence[Action]) -> list[ActionResult] | None:
        """Apply actions in one transaction; None when a newer pass got there first."""
        applied = self._store.apply_plan_batch(row.id, actions, applying_stages=_APPLYING_STAGES)
        if applied is None:
            return None
        results, hints = applied
        for kind in sorted(hints):
            self._hint(kind)
        return results

    async def _finish(
        self, row: ReconcileRecord, conclusion: Conclusion, plan: Plan | None
    ) -> None:
        plan_json = bounded_plan(to_json_dict(plan)) if plan is not None else None
        await self._stage(row, Stage.RECORD, **({"plan": plan_json} if plan_json else {}))
        error = bounded_error(conclusion.error)
        outcome: dict[str, Any] = {
            "status": conclusion.status.value,
            "error": conclusion.error,
            "warnings": list(conclusion.warnings),
            "summary": conclusion.summary,
            "blocked": list(conclusion.blocked),
            # Per action, so the reconcile page is exact however many failed; unchanged
            # actions (`skipped`) are left out, the plan already says they are noops.
            "actions": [
                {"key": r.key, "action": r.action, "result": r.result, "message": r.message}
                for r in conclusion.results
                if r.result != "skipped"
            ],
        }
        if plan is not None and plan.errors:  # the commit alone decides these: a timer's
            # pass of the same commit is folded into this row (`fold_repeated_failure`)
            outcome["plan_failed"] = {"base": plan.base, "errors": len(plan.errors)}
        await asyncio.to_thread(
            self._store.finish_reconcile,
            row.id,
            status=conclusion.status.value,
            outcome=bounded_outcome(outcome),
            applied_revision=conclusion.applied_revision,
            error=error,
        )
        revision = (row.attempted_revision or "head")[:12]
        message = f"reconcile {conclusion.status.value} at {revision}"
        await asyncio.to_thread(
            self._store.append_event,
            project_id=row.project_id,
            target_type="reconcile",
            target_id=row.id,
            target_name=revision,
            message=f"{message}: {error}" if error else message,
        )
        if conclusion.blocked:  # what a budget, policy or approval held back: notified
            await asyncio.to_thread(
                self._store.append_event,
                project_id=row.project_id,
                target_type="reconcile",
                target_id=row.id,
                target_name=revision,
                message=blocked_message(revision, conclusion.blocked),
            )
        await self._report(row, conclusion, plan_json)

    async def _report(
        self, row: ReconcileRecord, conclusion: Conclusion, plan: Mapping[str, Any] | None
    ) -> None:
        report = Report(
            row.id,
            _project_name(row),
            row.attempted_revision,
            conclusion.status,
            conclusion.error,
            plan,
            summary=conclusion.summary,
            blocked=conclusion.blocked,
        )
        try:
            await self._reporter.report(report)
        except Exception as exc:
            outcome = outcome_of(exc)
            if outcome is None:
                raise
            log.warning("reporting reconcile %s failed: %s", row.id, outcome.message)


def _project_name(row: ReconcileRecord) -> str:
    if not row.project:
        raise PermanentError(f"project {row.project_id} no longer exists")
    return row.project


def _failed(outcome: Outcome) -> Conclusion:
    """A pass that raised: transient problems abort it (retried), others fail it."""
    status = ReconcileStatus.FAILED
    if outcome.verdict in (Verdict.RETRY, Verdict.WAIT):
        status = ReconcileStatus.ABORTED
    return Conclusion(status, None, outcome.event)


def capacity_in_flight(store: Store, project_id: str, *, within: float = 600.0) -> bool:
    """Whether a fleet of the project is being provisioned or an instance is not up yet.

    Only capacity created in the last `within` seconds counts: a host that never answers
    must not delay every later run submission.
    """
    return store.capacity_in_flight(project_id, within=within)
