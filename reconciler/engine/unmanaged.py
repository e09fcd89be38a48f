"""Ad-hoc work from the CLI (`dockyard apply -f`, `stop`, `delete`): unmanaged resources.

A configuration posted by the CLI is planned like a file of the config repo — the same
pure planner, the same in-place rules — and applied through the same `applying` code, but
its origin is `cli:<user>` and GitOps never prunes it. The differences:

- a resource the config repo owns (`git:` origin) cannot be changed from the CLI: the
  plan is `blocked` and says to change the file in the repo instead;
- a resource of `cli:` origin is the CLI's own: it is updated or replaced like any other;
- `force` re-submits a run even when nothing changed (dstack's `apply --force`).

Everything here is synchronous and short (one transaction); the controller runs it in a
thread.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from reconciler.adapters.db.store import Store
from reconciler.core.jobspecs import requirements_of
from reconciler.core.jobusers import JobUserRule, check_job_users
from reconciler.core.planning import plan_desired
from reconciler.core.policy import PolicyRules
from reconciler.core.rendering_json import action_to_dict
from reconciler.core.scheduling import static_mismatch
from reconciler.domain.desired import DesiredResource
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import to_git_origin
from reconciler.domain.plan import Action, ActionKind
from reconciler.engine.policing import police
from reconciler.errors import UsageError
from reconciler.ports import WorkKind
from schemas import parse_config
from schemas.limits import DEFAULT_LIMITS, ConfigLimits
from stacks.catalog import CatalogRow, load_catalog

_KINDS = {kind.value: kind for kind in Kind}


def with_archives(
    spec: dict[str, Any], spec_hash: str, archives: Sequence[Mapping[str, str]]
) -> tuple[dict[str, Any], str]:
    """A run's spec and hash with the archives the CLI uploaded for it: other code (or
    other files) is another spec, so applying it again re-runs the task, as dstack's
    `repo_code_hash` does."""
    if not archives:
        return spec, spec_hash
    refs = [{"id": str(a["id"]), "path": str(a["path"])} for a in archives]
    mixed = hashlib.sha256((spec_hash + json.dumps(refs, sort_keys=True)).encode()).hexdigest()
    return {**spec, "file_archives": refs}, mixed


def plan_one(
    store: Store,
    project: str,
    *,
    text: str,
    path: str,
    user: str,
    file_archives: Sequence[Mapping[str, str]] = (),
    rules: PolicyRules | None = None,
    limits: ConfigLimits = DEFAULT_LIMITS,
    catalog: Sequence[CatalogRow] | None = None,
    job_users: JobUserRule | None = None,
) -> Action:
    """Pure planning of one posted config against what `project` has (raises ConfigError);
    a run breaking the repo policy's `rules` is planned blocked with the rule, its price
    from `catalog` (None: the bundled one, read now). The config is read within `limits`
    (the server's `--config-max-*`)."""
    model = parse_config(text, path, limits)
    kind = _KINDS.get(str(model.type))
    if kind is None:
        raise UsageError(f"{path}: a {model.type} is not a resource Dockyard can apply")
    if not model.name:
        raise UsageError(f"{path}: set `name:` so the resource can be found again")
    spec, spec_hash = model.normalized(), model.spec_hash()
    if kind.is_run:
        spec, spec_hash = with_archives(spec, spec_hash, file_archives)
    resource = DesiredResource(
        kind=kind,
        name=str(model.name),
        project=project,
        path=path,
        line=1,
        spec=spec,
        spec_hash=spec_hash,
        model=model,
    )
    observed = store.load_observed(project)
    live = observed.by_key().get(resource.key)
    if live is not None and live.is_managed:
        where = live.path or "the config repo"
        return Action(
            action=ActionKind.BLOCKED,
            kind=kind,
            name=resource.name,
            project=project,
            path=path,
            reason=f"{kind.value} {resource.name!r} is managed by Git ({where}): change it there",
            spec=resource.spec,
            spec_hash=resource.spec_hash,
        )
    if live is not None:  # our own: plan it as if it were managed, to get update/replace
        live = replace(live, origin=to_git_origin(live.path or path, "cli"))
    fleets = [r.spec for r in observed.resources if r.kind is Kind.FLEET]
    planned = [plan_desired(resource, live)]
    rows = tuple(catalog) if catalog is not None else load_catalog()
    checked = check_job_users(planned, job_users)  # the server operator's `user:` rule
    (action,) = police(
        checked, rules or PolicyRules(), fleets=fleets, observed=observed, catalog=rows
    )
    return action


def offers_for(store: Store, project: str, action: Action) -> list[dict[str, Any]]:
    """The instances of the project's fleets that could run this run (idle first)."""
    if not action.kind.is_run or action.spec is None:
        return []
    project_id = store.project_id_of(project)
    if project_id is None:
        return []
    requirements = requirements_of(action.spec)
    offers = []
    for cand in store.placement_candidates(project_id):
        if static_mismatch(requirements, cand) is not None:
            continue
        offers.append(
            {
                "fleet": cand.fleet_name,
                "instance": cand.instance_name,
                "backend": "local",
                "resources": {
                    "cpus": cand.cpus,
                    "memory_gb": round(cand.memory_gb, 1),
                    "disk_gb": round(cand.disk_gb, 1),
                    "gpus": [g.name for g in cand.gpus],
                },
                "price": cand.price,
                "availability": "idle" if cand.busy_blocks == 0 else "busy",
            }
        )
    return sorted(offers, key=lambda o: (o["availability"] != "idle", o["price"], o["instance"]))


def apply_one(
    store: Store,
    project: str,
    *,
    text: str,
    path: str,
    user: str,
    force: bool,
    file_archives: Sequence[Mapping[str, str]] = (),
    rules: PolicyRules | None = None,
    limits: ConfigLimits = DEFAULT_LIMITS,
    catalog: Sequence[CatalogRow] | None = None,
    job_users: JobUserRule | None = None,
) -> tuple[dict[str, Any], set[WorkKind]]:
    """Plan and apply one posted config as `cli:<user>`; the plan JSON and kinds to hint."""
    action = plan_one(
        store,
        project,
        text=text,
        path=path,
        user=user,
        file_archives=file_archives,
        rules=rules,
        limits=limits,
        catalog=catalog,
        job_users=job_users,
    )
    if action.action is ActionKind.BLOCKED:
        raise UsageError(action.reason)
    if force and action.action is ActionKind.NOOP and action.kind.is_run:
        action = replace(action, action=ActionKind.REPLACE, reason="re-submitted (--force)")
    project_id = store.ensure_project(project)
    result, hints = store.apply_unmanaged_action(project_id, action, user=user)
    if result.failed:
        raise UsageError(result.message)
    return action_to_dict(action), hints


def stop_run(store: Store, project: str, name: str, *, abort: bool) -> bool:
    """Ask the active run `name` to stop; False if it had already finished."""
    return store.stop_run_by_name(_project_id(store, project), project, name, abort=abort)


def delete_resource(store: Store, project: str, kind: str, name: str) -> WorkKind:
    """Delete a finished run, or terminate a fleet, volume or gateway; the kind to hint."""
    project_id = _project_id(store, project)
    if kind in ("run", "task", "service", "dev-environment"):
        return store.delete_resource_by_name(project_id, project, None, name)
    model_kind = _KINDS.get(kind)
    if model_kind is None or model_kind.is_run:
        raise UsageError(f"cannot delete a {kind!r}: use run, fleet, volume or gateway")
    return store.delete_resource_by_name(project_id, project, model_kind, name)


def _project_id(store: Store, project: str) -> str:
    project_id = store.project_id_of(project)
    if project_id is None:
        raise UsageError(f"no project {project!r}")
    return project_id
