"""The planner: `plan(desired, observed, policy) -> Plan` (pure, deterministic, no I/O).

Pairs each desired resource with its observed record by (project, kind, name) and decides:
- not deployed → `create`; deployed by hand (`cli:`) → `blocked` (never adopted silently);
- same spec → `noop`, except a finished service or dev environment, which is resubmitted
  (they are kept running; marked `drift`: it ended outside Git), and a moved file, which
  is an in-place `configuration_path` update; a finished task at the same spec stays
  finished (a task runs once per spec);
- changed spec → the in-place rules of `reconciler.core.inplace` (update or replace);
  a changed task is re-run (`replace`) unless only `priority` changed while it runs;
- observed but no longer declared → `delete` if GitOps owns it, `retain` for volumes
  unless the policy says `prune.volumes: delete`, `noop` for unmanaged resources;
- a fleet, volume or gateway Git declares that was deleted outside Dockyard
  (`ObservedState.vanished`) → `create` marked `drift` ("was deleted outside Dockyard,
  … will restore"); one being deleted outside Dockyard right now → `noop` marked `drift`
  (the plan after its deletion restores it).

A desired state with issues, or an empty snapshot the policy does not allow, gives a plan
with errors and no actions: a parse failure never reads as "delete everything".
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.core.diffing import diff_specs
from reconciler.core.inplace import classify_change
from reconciler.core.ordering import order_actions, references
from reconciler.core.policy import POLICY_FILE, RepoPolicy
from reconciler.core.reasons import (
    reason_for_change,
    reason_for_create,
    reason_for_removed,
)
from reconciler.domain.desired import DesiredResource, DesiredState
from reconciler.domain.issues import ConfigIssue
from reconciler.domain.kinds import Kind, ResourceKey
from reconciler.domain.observed import ObservedResource, ObservedState
from reconciler.domain.plan import Action, ActionKind, FieldChange, Plan, Rollout

_KEPT_RUNNING = frozenset({Kind.SERVICE, Kind.DEV_ENVIRONMENT})
DELETING = "deleting"
"""The status of a live resource whose deletion is under way."""


def plan(
    desired: DesiredState,
    observed: ObservedState,
    policy: RepoPolicy,
    *,
    base: str | None = None,
) -> Plan:
    """Decide every action that brings `observed` to `desired` (pure)."""
    errors = list(desired.issues)
    if not errors and desired.config_files == 0 and not policy.allow_empty:
        errors.append(empty_snapshot_issue(policy))
    if errors:
        unique = sorted(set(errors), key=_issue_order)
        return Plan(
            commit=desired.commit, base=base, errors=tuple(unique), warnings=desired.warnings
        )
    live = {r.key: r for r in observed.resources if r.project == desired.project}
    gone = {r.key: r for r in observed.vanished if r.project == desired.project}
    actions = [
        _restoring(plan_desired(resource, live.get(resource.key)), live.get(resource.key), gone)
        for resource in desired.resources
    ]
    wanted = {resource.key for resource in desired.resources}
    removed = sorted(
        (r for key, r in live.items() if key not in wanted), key=lambda r: (r.kind.rank, r.name)
    )
    actions += [plan_removed(resource, policy) for resource in removed]
    ordered = order_actions(actions)
    return Plan(commit=desired.commit, base=base, actions=ordered, warnings=desired.warnings)


def _issue_order(issue: ConfigIssue) -> tuple[str, int, int, str, str]:
    return (issue.path, issue.line or 0, issue.column or 0, issue.field or "", issue.message)


def empty_snapshot_issue(policy: RepoPolicy) -> ConfigIssue:
    paths = ", ".join(policy.paths)
    return ConfigIssue(
        path=POLICY_FILE,
        line=None,
        column=None,
        field="prune.allow_empty",
        message=(
            f"no *.dstack.yml files under {paths}: an empty snapshot would delete everything "
            "this repo deployed, so nothing is planned; add configs, or set "
            "`prune: {allow_empty: true}` in .dockyard.yml to prune everything"
        ),
    )


def plan_desired(resource: DesiredResource, live: ObservedResource | None) -> Action:
    """The action for one declared resource, given what is deployed under its key."""
    if live is None:
        return _action(resource, ActionKind.CREATE, reason_for_create(resource, None))
    if not live.is_managed:
        reason = (
            f"a {resource.kind.value} named {resource.name!r} already exists, created outside "
            f"Git ({live.origin}); Dockyard does not take over unmanaged resources: delete it "
            f"or rename the resource in {resource.path}"
        )
        return _action(resource, ActionKind.BLOCKED, reason, live=live)
    changes = diff_specs(live.spec, resource.spec) if live.spec_hash != resource.spec_hash else ()
    if live.finished and resource.kind in _KEPT_RUNNING:
        action = _action(
            resource, ActionKind.CREATE, reason_for_create(resource, live), changes, live=live
        )
        return action if changes else _as_drift(action, live)
    if not changes:
        return _plan_unchanged(resource, live)
    return _plan_changed(resource, live, changes)


def _restoring(
    action: Action, live: ObservedResource | None, gone: dict[ResourceKey, ObservedResource]
) -> Action:
    """Capacity Git declares that was deleted outside Dockyard: restoring it is drift."""
    if action.kind.is_run:
        return action
    label = f"{action.kind.value} `{action.name}`"
    if live is None and action.key in gone and action.action is ActionKind.CREATE:
        was = gone[action.key]
        at = f"@{was.commit[:12]}" if was.commit else ""
        since = f" (last applied from {was.path}{at})" if was.path else ""
        reason = (
            f"drift: {label} was deleted outside Dockyard{since}, but {action.path} declares "
            "it: will restore, create it again"
        )
        return replace(action, reason=reason, drift=True)
    if live is not None and live.status == DELETING and action.action is ActionKind.NOOP:
        reason = (
            f"drift: {label} is being deleted outside Dockyard, but {action.path} declares "
            "it: once it is gone, the next plan will restore it (create it again)"
        )
        return replace(action, reason=reason, drift=True)
    return action


def _as_drift(action: Action, live: ObservedResource) -> Action:
    """A run Git declares running that ended outside Git (stopped by hand, crashed)."""
    reason = (
        f"drift: {action.kind.value} `{action.name}` is {live.status} outside Git, but "
        f"{action.path} declares it running (services and dev environments are kept "
        "running), will restore: resubmit it"
    )
    return replace(action, reason=reason, drift=True)


def _plan_unchanged(resource: DesiredResource, live: ObservedResource) -> Action:
    if live.path is not None and live.path != resource.path:
        moved = FieldChange("configuration_path", live.path, resource.path)
        reason = f"file moved from {live.path} to {resource.path}; the spec is unchanged"
        return _action(
            resource, ActionKind.UPDATE, reason, (moved,), rollout=Rollout.IMMEDIATE, live=live
        )
    if resource.kind is Kind.TASK and live.finished:
        reason = f"task finished ({live.status}) at this spec; a task runs once per spec"
    else:
        reason = "up to date"
    return _action(resource, ActionKind.NOOP, reason, live=live)


def _plan_changed(
    resource: DesiredResource, live: ObservedResource, changes: tuple[FieldChange, ...]
) -> Action:
    if live.path is not None and live.path != resource.path:
        changes = (FieldChange("configuration_path", live.path, resource.path), *changes)
    spec_changes = tuple(c for c in changes if c.field != "configuration_path")
    verdict = classify_change(resource.kind, live.spec, resource.spec, spec_changes)
    if resource.kind is Kind.TASK and live.finished:
        verdict = replace(verdict, action=ActionKind.REPLACE, rollout=None)
    if resource.kind is Kind.GATEWAY and live.status == "failed":
        verdict = replace(verdict, action=ActionKind.REPLACE, rollout=None)
    reason = reason_for_change(resource, live, verdict, spec_changes)
    return _action(
        resource,
        verdict.action,
        reason,
        changes,
        rollout=verdict.rollout,
        forced_by=verdict.forced_by,
        destroys_data=verdict.destroys_data,
        live=live,
    )


def plan_removed(live: ObservedResource, policy: RepoPolicy) -> Action:
    """The action for a deployed resource that the commit no longer declares."""
    if not live.is_managed:
        kind = ActionKind.NOOP
    elif live.kind is Kind.VOLUME and policy.retains_volumes:
        kind = ActionKind.RETAIN
    else:
        kind = ActionKind.DELETE
    return Action(
        action=kind,
        kind=live.kind,
        name=live.name,
        project=live.project,
        path=live.path,
        reason=reason_for_removed(live, kind),
        destroys_data=kind is ActionKind.DELETE and live.kind is Kind.VOLUME,
        old_spec_hash=live.spec_hash,
        depends_on=references(live.kind, live.spec, live.project),
    )


def _action(
    resource: DesiredResource,
    kind: ActionKind,
    reason: str,
    fields: tuple[FieldChange, ...] = (),
    *,
    rollout: Rollout | None = None,
    forced_by: tuple[str, ...] = (),
    destroys_data: bool = False,
    live: ObservedResource | None = None,
) -> Action:
    return Action(
        action=kind,
        kind=resource.kind,
        name=resource.name,
        project=resource.project,
        path=resource.path,
        reason=reason,
        fields=fields,
        rollout=rollout,
        destroys_data=destroys_data,
        forced_by=forced_by,
        spec=resource.spec,
        spec_hash=resource.spec_hash,
        old_spec_hash=live.spec_hash if live is not None else None,
        implicit=resource.implicit,
        depends_on=references(resource.kind, resource.spec, resource.project),
    )
