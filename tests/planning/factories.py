"""Builders for planner tests: real `schemas` models from YAML, deployed copies of them."""

from __future__ import annotations

import textwrap
from dataclasses import replace

from reconciler.core.planning import plan
from reconciler.core.policy import PrunePolicy, RepoPolicy
from reconciler.domain.desired import DesiredResource, DesiredState
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import ObservedResource, ObservedState, observe_applied
from reconciler.domain.plan import Action, Plan
from schemas import parse_config

POLICY = RepoPolicy()


def resource(yaml: str, *, path: str | None = None, project: str = "main") -> DesiredResource:
    """A desired resource parsed from `yaml` with the real config models."""
    text = textwrap.dedent(yaml).lstrip()
    model = parse_config(text.encode(), path or "x.dstack.yml")
    return DesiredResource(
        kind=Kind(model.type),
        name=str(model.name),
        project=project,
        path=path or f"{model.name}.dstack.yml",
        line=2,
        spec=model.normalized(),
        spec_hash=model.spec_hash(),
        model=model,
    )


def state(
    *resources: DesiredResource, commit: str = "c2", files: int | None = None
) -> DesiredState:
    return DesiredState(
        project="main",
        commit=commit,
        resources=resources,
        config_files=len(resources) if files is None else files,
    )


def deployed(
    desired: DesiredResource,
    *,
    status: str = "running",
    origin: str | None = None,
    commit: str = "c1",
) -> ObservedResource:
    """`desired` as the store records it once applied from `commit`."""
    live = observe_applied(desired, commit=commit, status=status)
    return replace(live, origin=origin) if origin is not None else live


def live(*resources: ObservedResource) -> ObservedState:
    return ObservedState(project="main", resources=resources)


def policy(*, volumes: str = "retain", allow_empty: bool = False) -> RepoPolicy:
    return RepoPolicy(prune=PrunePolicy(volumes=volumes, allow_empty=allow_empty))  # type: ignore[arg-type]


def one(result: Plan, name: str, kind: Kind | None = None) -> Action:
    """The action for `name` (of `kind`); fails if there is not exactly one."""
    found = [a for a in result.actions if a.name == name and (kind is None or a.kind is kind)]
    assert len(found) == 1, [(a.kind, a.name) for a in result.actions]
    return found[0]


def change(old_yaml: str, new_yaml: str, *, status: str = "running") -> Action:
    """Plan `new_yaml` against `old_yaml` deployed with `status`; return its action."""
    old, new = resource(old_yaml), resource(new_yaml)
    result = plan(state(new), live(deployed(old, status=status)), POLICY)
    assert result.ok, result.errors
    return one(result, new.name, new.kind)


def fields_of(action: Action) -> set[str]:
    return {c.field for c in action.fields}
