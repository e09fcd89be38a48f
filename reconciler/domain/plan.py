"""The plan: ordered actions that turn the observed state into the desired one.

Produced by `reconciler.core.planning.plan` (pure, deterministic) and consumed by the
engine (apply) and the renderers (table, markdown, JSON). Every action says why, in words
a person understands, and lists the field-level changes (`fields`). A plan with `errors`
has no actions and must not be applied.

Action kinds:
- `create`: not deployed yet (or a finished service/dev environment to resubmit).
- `update`: changed in place; `rollout` is `immediate` or `rolling` (services).
- `replace`: delete then create; `forced_by` names the fields that cannot change in place.
- `delete`: the file was removed and GitOps owns the resource (prune).
- `retain`: would be deleted, but the repo policy keeps it (volumes by default).
- `noop`: nothing to do (also: unmanaged `cli:` resources, never pruned).
- `blocked`: cannot proceed without a person (the name is taken by an unmanaged resource;
  no engine can bring the resource up on this server; a run waits for blocked capacity).
  A blocked action is not applied; everything independent of it is.

A changing action of a fleet, volume or gateway carries its `preview` (the stack steps and
the estimated $/h, or why no preview ran); an action that restores what changed outside
Git (a run stopped by hand, a stack changed behind Dockyard's back) has `drift` set. A
plan made without a server (`dockyard plan --base`) lists in `unchecked` the checks it
could not make.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reconciler.domain.issues import ConfigIssue
from reconciler.domain.kinds import Kind, ResourceKey

PlanError = ConfigIssue
"""A plan's error is a configuration issue: path, line, column, field, message."""


class ActionKind(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    RETAIN = "retain"
    NOOP = "noop"
    BLOCKED = "blocked"

    @property
    def changes(self) -> bool:
        """Whether applying the action changes the world."""
        return self in _CHANGING


_CHANGING = frozenset({ActionKind.CREATE, ActionKind.UPDATE, ActionKind.REPLACE, ActionKind.DELETE})


class Rollout(StrEnum):
    """How an in-place update reaches a running resource (dstack's rules, as
    `reconciler.core.inplace` holds them)."""

    IMMEDIATE = "immediate"
    ROLLING = "rolling"


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One changed field: a dotted path into the normalized spec; `None` = absent."""

    field: str
    old: Any
    new: Any


@dataclass(frozen=True, slots=True)
class PreviewStep:
    """One step of a stack preview: `op` (create/update/replace/delete) on a resource."""

    op: str
    name: str
    type: str
    diffs: tuple[str, ...] = ()


PREVIEW_OPS = ("create", "update", "replace", "delete")


@dataclass(frozen=True, slots=True)
class StackPreview:
    """What bringing a capacity resource to its new spec does to its stack.

    `steps` are the engine's steps (only the changing ones), `per_hour` the estimated
    price of the resource at its new spec (None: no price known; negative for a delete),
    `price_basis` what that figure counts or why there is none, `error` why no preview
    could be made (the action then shows it instead of steps).
    """

    stack: str
    steps: tuple[PreviewStep, ...] = ()
    per_hour: float | None = None
    error: str | None = None
    price_basis: str | None = None

    @property
    def counts(self) -> dict[str, int]:
        """Steps per op, every op of `PREVIEW_OPS` present."""
        counts = dict.fromkeys(PREVIEW_OPS, 0)
        for step in self.steps:
            if step.op in counts:
                counts[step.op] += 1
        return counts


@dataclass(frozen=True, slots=True)
class Action:
    """One step of a plan for one resource."""

    action: ActionKind
    kind: Kind
    name: str
    project: str
    path: str | None
    reason: str
    fields: tuple[FieldChange, ...] = ()
    rollout: Rollout | None = None
    destroys_data: bool = False
    forced_by: tuple[str, ...] = ()
    """For `replace`: the changed fields that cannot change in place."""
    spec: Mapping[str, Any] | None = None
    """The desired normalized spec (None for delete/retain of a removed resource)."""
    spec_hash: str | None = None
    old_spec_hash: str | None = None
    implicit: bool = False
    """The resource was added by Dockyard (the implicit default fleet), not by a file."""
    depends_on: tuple[ResourceKey, ...] = ()
    """Resources this one references (volumes, fleets, gateway), per its spec."""
    preview: StackPreview | None = field(default=None, compare=False)
    """The stack preview of a changing capacity action (None: not previewed)."""
    drift: bool = False
    """The action restores what changed outside Git (its reason starts with `drift:`)."""
    violations: tuple[str, ...] = ()
    """The repo policy's rules this run breaks (`core.rules`); such an action is blocked,
    unless `approved_by` names who approved the exception for this content."""
    approved_by: tuple[str, ...] = ()
    """The named approvers whose `/dockyard approve` lets `violations` through."""

    key: ResourceKey = field(init=False, repr=False, compare=False)
    """(project, kind, name), computed once: plans look resources up by it a lot."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", ResourceKey(self.project, self.kind, self.name))


@dataclass(frozen=True, slots=True)
class Plan:
    """The answer to "what will change at `commit`, compared with `base`, and why"."""

    commit: str
    base: str | None
    errors: tuple[PlanError, ...] = ()
    actions: tuple[Action, ...] = ()
    unchecked: tuple[str, ...] = ()
    """Checks this plan could not make, each a line saying which and why (offline plans)."""
    warnings: tuple[PlanError, ...] = ()
    """What valid files should still tell their authors (a legacy relative `working_dir`,
    `spot_policy` on an SSH fleet); shown beside the actions, never failing the plan."""

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def summary(self) -> dict[str, int]:
        """Count of actions per kind, every kind present, in `ActionKind` order."""
        counts = dict.fromkeys((kind.value for kind in ActionKind), 0)
        for action in self.actions:
            counts[action.action.value] += 1
        return counts

    @property
    def changes(self) -> tuple[Action, ...]:
        """The actions that change something (create/update/replace/delete)."""
        return tuple(action for action in self.actions if action.action.changes)
