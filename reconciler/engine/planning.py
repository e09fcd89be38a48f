"""The one way to plan a commit: what the reconcile will do, shown before it does it.

Every plan goes through `plan_commit`:

- the reconcile pass (`reconciling`) and the server's PR plans (the `pull_request`
  webhook, `POST /api/project/{p}/plan/files`, hence `dockyard plan --server`) call
  `plan_live`, which reads what is deployed and the last applied revision from the store,
  then `plan_commit` with the server's `Previewer`;
- `dockyard plan --base REF` and `dockyard pr plan --base REF` (offline, no server) call
  `plan_offline` (what `plan_commit` does without a previewer) with the base commit's
  state as the observed one: the plan then lists in `Plan.unchecked` what it could not
  check (stack previews, capacity, prices).

`plan_commit`, in order: the pure planner (`core.planning`; with `partial`, a commit with
errors also gets the actions of its valid files, as a PR plan shows them); then every
create/update/replace/delete of a fleet, volume or gateway is previewed by its engine
(`previewing`): an engine that cannot run here blocks the action and the runs that can
only wait for it (`core.blocking`), a preview that fails is recorded on the action and in
`PlannedCommit.failures` (the reconcile stops the whole pass on those); then, with
`refresh`, each deployed capacity resource the plan leaves alone is refreshed, and one
changed outside Dockyard becomes its own `update` action marked `drift`. `plan_live` also
reads the capacity Git declares that was deleted outside Dockyard
(`Store.deleted_outside_git`): the planner restores it as a `create` marked `drift`.

The repo policy (`.dockyard.yml` `policy`: run limits, prices, budget; `policing`) is
checked on the pure plan, before the previews, with the offers `catalog` the server's
callers pass in (loaded once when the server starts: the reconciler, the PR bots, the web
context for `plan/files`; a caller passing none gets the bundled one read for that plan):
a run breaking a rule is `blocked` with it, unless a named approver approved an exception
for this content: `plan_live` with the commit's git `tree` reads the approvals recorded
for that tree (`/dockyard approve` on the pull request, `reconciler.pr.approving`) and the
runs keep their action with `approved_by` — an approver counts only while the deployed
`.dockyard.yml` (the last applied revision, `deployedpolicy`) names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from reconciler.core.blocking import block_actions
from reconciler.core.clusterbackends import block_cluster_runs
from reconciler.core.jobusers import JobUserRule, check_job_users
from reconciler.core.planning import plan as pure_plan
from reconciler.core.policy import PolicyRules, RepoPolicy
from reconciler.domain.desired import DesiredState
from reconciler.domain.kinds import Kind, ResourceKey
from reconciler.domain.observed import ObservedResource, ObservedState
from reconciler.domain.plan import Action, ActionKind, Plan
from reconciler.engine.deployedpolicy import RulesAt
from reconciler.engine.policing import police
from stacks.catalog import CatalogRow, load_catalog

if TYPE_CHECKING:
    # Only the server's plans (previews, drift, the store) use these; `plan_offline` runs
    # in `dockyard plan --base` without a server, which must not load SQLAlchemy, the
    # agent client or asyncssh (tests/cli/test_plan_imports.py): they are imported where
    # they are used.
    from reconciler.adapters.db.store import Store
    from reconciler.engine.previewing import Previewer, PreviewFailure, PreviewResult

OFFLINE_UNCHECKED = (
    "stack previews: the steps and $/h of each fleet, volume and gateway, and whether the "
    "server can bring them up at all (`blocked`), come from the server's engines; plan with "
    "`dockyard plan --server` to see them",
    "capacity: whether the runs fit the instances that are up is known to the server only",
    "prices: what is deployed, hence the $/h a change saves or adds, is known to the server "
    "only (run prices here come from the bundled offers catalog)",
    "drift: what changed outside Git (runs stopped, stacks changed or capacity deleted by "
    "hand) is known to the server only",
)


@dataclass(frozen=True, slots=True)
class PlannedCommit:
    """A plan, the previews of available engines that failed (they stop a reconcile), and
    the deployed state it was planned against (PR plans price changes against it)."""

    plan: Plan
    failures: tuple[PreviewFailure, ...] = ()
    observed: ObservedState | None = None


async def plan_commit(
    desired: DesiredState,
    policy: RepoPolicy,
    observed: ObservedState,
    *,
    base: str | None,
    previewer: Previewer | None,
    catalog: Sequence[CatalogRow] | None = None,
    partial: bool = False,
    refresh: bool = False,
    approved_by: Sequence[str] = (),
    job_users: JobUserRule | None = None,
) -> PlannedCommit:
    """The plan of `desired` against `observed` (see the module docstring); `catalog`: the
    offers catalog runs are priced with; `approved_by`: the approvers of a policy
    exception for this content; `job_users`: the server's rule for a process job's
    `user:` (`core.jobusers`; None: not checked)."""
    plan = _pure(
        desired,
        policy,
        observed,
        base=base,
        catalog=catalog,
        partial=partial,
        approved_by=approved_by,
        job_users=job_users,
    )
    if previewer is None:  # as `plan_offline`: says what it could not check
        return PlannedCommit(replace(plan, unchecked=OFFLINE_UNCHECKED), observed=observed)
    if not plan.actions:
        return PlannedCommit(plan, observed=observed)
    results = await _preview_all(plan, observed, previewer)
    blocked = {key: r.blocked for key, r in results.items() if r.blocked is not None}
    actions = [
        replace(a, preview=results[a.key].preview) if a.key in results else a for a in plan.actions
    ]
    actions = list(block_actions(actions, blocked))
    if previewer.clusters is not None:  # runs only a Slurm/Kubernetes cluster could take
        actions = list(block_cluster_runs(actions, previewer.clusters))
    if refresh and plan.ok:
        from reconciler.engine.drifting import drift_actions

        actions = await drift_actions(actions, observed, previewer)
    failures = tuple(r.failure for r in results.values() if r.failure is not None)
    return PlannedCommit(replace(plan, actions=tuple(actions)), failures, observed)


def plan_offline(
    desired: DesiredState,
    policy: RepoPolicy,
    observed: ObservedState,
    *,
    base: str | None,
    catalog: Sequence[CatalogRow] | None = None,
    partial: bool = False,
    approved_by: Sequence[str] = (),
) -> Plan:
    """`plan_commit` without a server: the pure plan, saying what it could not check."""
    plan = _pure(
        desired,
        policy,
        observed,
        base=base,
        catalog=catalog,
        partial=partial,
        approved_by=approved_by,
    )
    return replace(plan, unchecked=OFFLINE_UNCHECKED)


def _pure(
    desired: DesiredState,
    policy: RepoPolicy,
    observed: ObservedState,
    *,
    base: str | None,
    catalog: Sequence[CatalogRow] | None = None,
    partial: bool,
    approved_by: Sequence[str] = (),
    job_users: JobUserRule | None = None,
) -> Plan:
    """The pure plan, its runs checked against the repo policy (`policing`) at `catalog`
    prices (None: the bundled catalog, read for this plan: tests and one-shot callers);
    with `partial`, errors plus the actions of the valid files."""
    result = pure_plan(desired, observed, policy, base=base)
    if partial and not result.ok and desired.issues and desired.resources:
        invalid = {issue.path for issue in desired.issues}
        valid = replace(desired, issues=())
        kept = ObservedState(
            observed.project, tuple(r for r in observed.resources if r.path not in invalid)
        )
        result = replace(result, actions=pure_plan(valid, kept, policy, base=base).actions)
    fleets = [r.spec for r in desired.resources if r.kind is Kind.FLEET]
    checked = police(
        check_job_users(result.actions, job_users),  # the operator's: no approval lifts it
        policy.policy,
        fleets=fleets,
        observed=observed,
        catalog=catalog if catalog is not None else load_catalog(),
        approved_by=approved_by,
    )
    return replace(result, actions=checked)


async def _preview_all(
    plan: Plan, observed: ObservedState, previewer: Previewer
) -> dict[ResourceKey, PreviewResult]:
    import asyncio  # with ssl, 0.1 s of the offline plan's start, which never awaits

    from reconciler.engine.previewing import PREVIEWED

    live = observed.by_key()
    actions = [a for a in plan.actions if a.action in PREVIEWED and not a.kind.is_run]
    results = await asyncio.gather(
        *(previewer.preview(a, _spec_of(a, live.get(a.key))) for a in actions)
    )
    return {a.key: r for a, r in zip(actions, results, strict=True)}


def _spec_of(action: Action, live: ObservedResource | None) -> Mapping[str, object]:
    """The spec the engine sees: the new one, or for a delete what is deployed."""
    if action.action is ActionKind.DELETE or action.spec is None:
        return dict(live.spec) if live is not None else {}
    return dict(action.spec)


async def plan_live(
    store: Store,
    project: str,
    desired: DesiredState,
    policy: RepoPolicy,
    *,
    previewer: Previewer | None,
    catalog: Sequence[CatalogRow] | None = None,
    partial: bool = False,
    refresh: bool = True,
    tree: str | None = None,
    deployed: RulesAt | None = None,
    job_users: JobUserRule | None = None,
) -> PlannedCommit:
    """`plan_commit` against what project `project` has deployed (the server's plans);
    `tree`: the commit's git tree, whose recorded approvals let violations through when
    `deployed` (the rules at the last applied revision, `deployedpolicy`) names their
    approver — never the planned commit's own `policy.approvers`."""
    import asyncio

    observed, base = await asyncio.to_thread(_live_state, store, project)
    approved_by: list[str] = []
    if tree is not None and deployed is not None:
        rules = await asyncio.to_thread(deployed, project, base)
        approved_by = await asyncio.to_thread(approvers_of, store, project, tree, rules)
    return await plan_commit(
        desired,
        policy,
        observed,
        base=base,
        previewer=previewer,
        catalog=catalog,
        partial=partial,
        refresh=refresh,
        approved_by=approved_by,
        job_users=job_users,
    )


def approvers_of(store: Store, project: str, tree: str, rules: PolicyRules) -> list[str]:
    """Who approved an exception for content `tree`, among those the deployed `rules`
    name."""
    approvals = store.approvals_for(project, tree)
    names = [a.approver for a in approvals if rules.may_approve(a.approver)]
    return list(dict.fromkeys(names))


def _live_state(store: Store, project: str) -> tuple[ObservedState, str | None]:
    from reconciler.adapters.db.vanished import VanishedStore

    observed = store.load_observed(project)
    vanished = VanishedStore(store.engine, clock=store.clock).deleted_outside_git(project)
    observed = replace(observed, vanished=vanished)
    project_id = store.project_id_of(project)
    base = store.last_applied_revision(project_id) if project_id is not None else None
    return observed, base
