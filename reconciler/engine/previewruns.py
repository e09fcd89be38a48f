"""Preview runs of pull requests: deploy a PR head into its ephemeral project, tear it
down, and the leased sweep that ends them (TTL) and removes their projects (docs/previews.md).

Called by the PR side (`reconciler.pr.previews`, which reads the head through the host's
API and checks who asked) and by its sweep (`reconciler.pr.previews.PreviewBot.sweep_once`).
Everything here is synchronous (callers use a thread) and goes through the store's units
of work (`reconciler.adapters.db.previewruns`).

- **Deploy**: the pure selection (`core.previewruns.select_preview`) re-homes the head's
  services and dev environments (and the fleets `policy.previews.fleets` allows) into the
  preview project; they are priced like a plan (`costing`: local and SSH fleets $0) and
  refused as a whole when `policy.previews.budget.hourly` would be exceeded. The actions
  are the reconcile's own plan (`core.planning.plan`: create, update in place, replace,
  prune) checked by the repo policy's run limits (`policing.police`), applied in one
  transaction; the workers are hinted.
- **Teardown**: the plan of an empty desired state (every run stopped, every fleet
  terminated); the project is removed once nothing of it is left (`remove_idle_project`).
- **Sweep** (`sweep_once`): takes the `preview-runs` maintenance row with a lease (one
  replica at a time; state is in the DB, so a restarted server carries on), tears down
  previews whose TTL ended and removes the projects of stopped ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from reconciler.adapters.db.previewruns import PreviewRunsStore
from reconciler.adapters.db.store import Store
from reconciler.core.planning import plan
from reconciler.core.policy import Budget, PolicyRules, PrunePolicy, RepoPolicy
from reconciler.core.previewruns import budget_refusal, preview_project_name, select_preview
from reconciler.domain.desired import DesiredResource, DesiredState
from reconciler.domain.kinds import Kind
from reconciler.domain.plan import Action, ActionKind
from reconciler.domain.previewruns import PreviewRun, PreviewState, PullRef
from reconciler.engine.costing import price_run
from reconciler.engine.policing import police
from reconciler.errors import ConflictError
from reconciler.ports import Clock, WorkKind
from stacks.catalog import CatalogRow, load_catalog

log = logging.getLogger(__name__)

TASK = "preview-runs"
LEASE_SECONDS = 30.0
"""A pass is a few short transactions; a replica that died mid-pass holds it this long."""


def _blank(pull: PullRef, project: str, head: str, by: str, trigger: str, fork: bool) -> PreviewRun:
    return PreviewRun(
        pull=pull,
        project=project,
        preview_project=preview_project_name(project, pull.provider, pull.number),
        state=PreviewState.ACTIVE,
        head=head,
        requested_by=by,
        trigger=trigger,
        fork=fork,
    )


class PreviewRuns:
    """See the module docstring. `hint` wakes a worker kind (the controller's `hint`)."""

    def __init__(
        self,
        store: Store,
        *,
        hint: Callable[[WorkKind], None] = lambda kind: None,
        catalog: Sequence[CatalogRow] | None = None,
        owner: str = "server",
        clock: Clock | None = None,
        capacity_wait: float = 300.0,
    ) -> None:
        self.capacity_wait = capacity_wait
        self.stopping = threading.Event()
        """Set at shutdown: a deploy waiting for its fleets stops waiting."""
        self.store = store
        self.clock: Clock = clock or store.clock
        """Deploy times and TTLs (the lease of the sweep keeps the store's clock)."""
        self.previews = PreviewRunsStore(store.engine, clock=store.clock)
        self.hint = hint
        self._catalog = catalog
        self.owner = f"{owner}/{TASK}"

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.now_ts(), UTC)

    @property
    def catalog(self) -> Sequence[CatalogRow]:
        if self._catalog is None:
            self._catalog = tuple(load_catalog())
        return self._catalog

    # -- deploy ----------------------------------------------------------------------------

    def deploy(
        self,
        pull: PullRef,
        *,
        project: str,
        head: str,
        desired: DesiredState,
        rules: PolicyRules,
        requested_by: str,
        trigger: str,
        fork: bool,
    ) -> PreviewRun:
        """Deploy `desired` (the head's) as the PR's preview, or refuse it with the rule."""
        old = self.previews.get_preview(pull)
        preview = _blank(pull, project, head, requested_by, trigger, fork)
        if old is not None:
            preview = replace(preview, comment_id=old.comment_id)
        refusal = self._refusal(desired)
        selection = select_preview(desired, rules.previews, preview.preview_project)
        if refusal is None and not selection.runs:
            refusal = "the head declares no service or dev environment that a preview may run"
        prices = self._prices(selection.resources)
        if refusal is None:
            others = self.previews.previews_hourly(project, excluding=pull)
            costly = [f"{n} {p:g}/h" for n, p in prices.items() if p > 0]
            refusal = budget_refusal(rules.previews, project, others, sum(prices.values()), costly)
        if refusal is not None:
            return self._refuse(old, preview, refusal, selection.notes)
        try:
            project_id = self.previews.open_preview_project(preview)
        except ConflictError as exc:
            return self._refuse(old, preview, str(exc), selection.notes)
        notes = list(selection.notes) + self._apply(preview, project_id, selection.resources, rules)
        now = self.now()
        deployed = replace(
            preview,
            hourly=round(sum(prices.values()), 4),
            prices=prices,
            notes=tuple(notes),
            deployed_at=now,
            expires_at=now + timedelta(seconds=rules.previews.ttl),
        )
        saved = self.previews.save_preview(deployed)
        self._record(saved, f"preview deployed at {head[:12]} for {requested_by}")
        return saved

    def _record(self, preview: PreviewRun, message: str) -> None:
        """The event a preview's start or end leaves in its config repo's project, where
        `preview.started` / `preview.torn_down` notifications come from."""
        self.store.append_event(
            project_id=self.store.project_id_of(preview.project),
            target_type="preview",
            target_name=preview.preview_project,
            message=f"{message} ({preview.pull.repo}#{preview.pull.number})",
        )

    @staticmethod
    def _refusal(desired: DesiredState) -> str | None:
        if not desired.issues:
            return None
        first = desired.issues[0]
        where = f"{first.path}:{first.line}" if first.line else first.path
        count = len(desired.issues)
        return f"the head's configs have {count} error(s), first {where}: {first.message}"

    def _prices(self, resources: Sequence[DesiredResource]) -> dict[str, float]:
        fleets = [r.spec for r in resources if r.kind is Kind.FLEET]
        prices: dict[str, float] = {}
        for run in (r for r in resources if r.kind.is_run):
            price = price_run(run.spec, fleets, self.catalog)
            prices[run.name] = price.per_hour if price is not None else 0.0
        return prices

    def _refuse(
        self, old: PreviewRun | None, preview: PreviewRun, reason: str, notes: Sequence[str]
    ) -> PreviewRun:
        state = PreviewState.REFUSED
        if old is not None and old.state in (PreviewState.ACTIVE, PreviewState.STOPPING):
            self._tear(old)  # the newer head is refused: what ran before goes (the sweep
            state = PreviewState.STOPPING  # removes the project once it has stopped)
        refused = replace(preview, state=state, reason=reason, notes=tuple(notes))
        done = self._finish(refused) if state is PreviewState.STOPPING else refused
        saved = self.previews.save_preview(done)
        log.info("preview of %s#%s refused: %s", preview.pull.repo, preview.pull.number, reason)
        return saved

    def _plan(self, preview: PreviewRun, resources: Sequence[DesiredResource]) -> list[Action]:
        name = preview.preview_project
        desired = DesiredState(
            project=name, commit=preview.head, resources=tuple(resources), config_files=1
        )
        policy = RepoPolicy(project=name, prune=PrunePolicy(allow_empty=True))
        observed = self.store.load_observed(name)
        return list(plan(desired, observed, policy).actions)

    def _apply(
        self,
        preview: PreviewRun,
        project_id: str,
        resources: Sequence[DesiredResource],
        rules: PolicyRules,
    ) -> list[str]:
        """Apply the plan of `resources` in the preview project; the notes it leaves."""
        actions = self._plan(preview, resources)
        fleets = [r.spec for r in resources if r.kind is Kind.FLEET]
        observed = self.store.load_observed(preview.preview_project)
        limits = rules.model_copy(update={"budget": Budget()})  # previews have their own
        policed = police(actions, limits, fleets=fleets, observed=observed, catalog=self.catalog)
        notes = [
            f"{a.kind.value} {a.name}: not deployed: {line}"
            for a in policed
            if a.action is ActionKind.BLOCKED
            for line in (a.violations or (a.reason,))
        ]
        todo = [a for a in policed if a.action.changes and a.action is not ActionKind.BLOCKED]
        capacity = [a for a in todo if not a.kind.is_run]
        runs = [a for a in todo if a.kind.is_run]
        results = self._apply_batch(project_id, preview.head, capacity)
        if runs:  # as the reconcile does: runs once the fleets they land on are up
            self._wait_for_capacity(project_id)
            results += self._apply_batch(project_id, preview.head, runs)
        notes += [f"{r.key}: {r.message}" for r in results if r.failed]
        return notes

    def _apply_batch(self, project_id: str, head: str, actions: Sequence[Action]) -> list[Any]:
        if not actions:
            return []
        results, hints = self.previews.apply_preview_actions(project_id, head, actions)
        for kind in sorted(hints):
            self.hint(kind)
        return list(results)

    def _wait_for_capacity(self, project_id: str) -> None:
        """Until no fleet of the preview project is being provisioned (at most
        `capacity_wait` seconds); a worker thread's wait, like the reconcile's."""
        deadline = time.monotonic() + self.capacity_wait
        while self.store.capacity_in_flight(project_id, within=self.capacity_wait + 60):
            if self.stopping.is_set():  # the server is shutting down: apply the runs now
                return
            if time.monotonic() >= deadline:
                log.warning("capacity of preview project %s still provisioning", project_id)
                return
            time.sleep(0.1)

    # -- teardown --------------------------------------------------------------------------

    def _tear(self, preview: PreviewRun) -> None:
        project_id = self.store.project_id_of(preview.preview_project)
        if project_id is None:
            return
        actions = [a for a in self._plan(preview, ()) if a.action.changes]
        _, hints = self.previews.apply_preview_actions(project_id, preview.head, actions)
        for kind in sorted(hints):
            self.hint(kind)

    def teardown(self, pull: PullRef, reason: str) -> PreviewRun | None:
        """Stop the PR's preview (runs stopped, fleets terminated) and remove its project
        once that is done; None when it had none running."""
        preview = self.previews.get_preview(pull)
        if preview is None or preview.state not in (PreviewState.ACTIVE, PreviewState.STOPPING):
            return None
        self._tear(preview)
        stopping = replace(preview, state=PreviewState.STOPPING, reason=reason)
        log.info("tearing down the preview of %s#%s: %s", pull.repo, pull.number, reason)
        saved = self.previews.save_preview(self._finish(stopping))
        self._record(saved, f"preview torn down: {reason}")
        return saved

    def _finish(self, preview: PreviewRun) -> PreviewRun:
        if not self.previews.remove_idle_project(preview.preview_project):
            return preview
        return replace(preview, state=PreviewState.CLOSED, closed_at=self.now())

    # -- the sweep -------------------------------------------------------------------------

    def sweep_once(self) -> list[PreviewRun] | None:
        """One leased pass (None when another replica holds it, or it is not due): the
        previews whose TTL ended are torn down, stopped ones finished; returns the live
        previews after the pass (their comments may need an update)."""
        self.previews.ensure_maintenance(TASK)
        token = self.store.maintenance.claim(TASK, owner=self.owner, lease_seconds=LEASE_SECONDS)
        if token is None:
            return None
        changed: list[PreviewRun] = []
        try:
            now = self.now()
            for preview in self.previews.sweepable_previews():
                if preview.state is PreviewState.STOPPING:
                    self._tear(preview)  # a restart may have left runs asked to stop
                    done = self._finish(preview)
                    changed.append(self.previews.save_preview(done) if done != preview else done)
                elif preview.expires_at is not None and preview.expires_at <= now:
                    ttl = preview.expires_at - (preview.deployed_at or preview.expires_at)
                    why = f"its TTL ({_hours(ttl)}) ended"
                    torn = self.teardown(preview.pull, why)
                    changed.append(torn or preview)
                else:
                    changed.append(preview)
        finally:
            self.store.maintenance.release(TASK, token, due_in=0.0)
        return changed


def _hours(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m"
