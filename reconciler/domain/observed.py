"""Observed state: what the store says is deployed, as frozen domain values.

`reconciler.adapters.db.Store.load_observed(project)` builds an `ObservedState` from the
`resources` table (one `ObservedResource` per live row); the offline plan
(`dockyard plan --base REF`) builds one from another commit with `ObservedState.from_desired`.

Ownership is the `origin`: `git:<path>@<commit>` for what the GitOps loop created (it may
prune it), `cli:<user>` for unmanaged resources (never pruned).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.domain.desired import DesiredResource, DesiredState
from reconciler.domain.kinds import Kind, ResourceKey

FINISHED_RUN_STATUSES = frozenset({"terminated", "aborted", "failed", "done"})
"""dstack run statuses after which a run does nothing more."""


def to_git_origin(path: str, commit: str) -> str:
    """The origin recorded for a resource the GitOps loop created from `path` at `commit`."""
    return f"git:{path}@{commit}"


def is_git_origin(origin: str) -> bool:
    return origin.startswith("git:")


@dataclass(frozen=True, slots=True)
class ResourceSource:
    """Where a stored resource came from: its origin and the config path and commit
    (`Store.resource_source`; the jobs worker's uploads, the stack workers' paths)."""

    origin: str
    path: str | None = None
    commit: str | None = None


@dataclass(frozen=True, slots=True)
class ObservedResource:
    """One live resource as recorded by the store."""

    kind: Kind
    name: str
    project: str
    origin: str
    spec: Mapping[str, Any]
    spec_hash: str
    status: str
    path: str | None = None
    commit: str | None = None
    finished: bool = False
    """For runs: the run has ended (see `FINISHED_RUN_STATUSES`). Tasks do not re-run."""

    key: ResourceKey = field(init=False, repr=False, compare=False)
    """(project, kind, name), computed once: plans look resources up by it a lot."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", ResourceKey(self.project, self.kind, self.name))

    @property
    def is_managed(self) -> bool:
        """Whether GitOps owns it (origin `git:`) and may update or prune it."""
        return is_git_origin(self.origin)


@dataclass(frozen=True, slots=True)
class ObservedState:
    """Everything deployed in one project."""

    project: str
    resources: tuple[ObservedResource, ...] = ()
    vanished: tuple[ObservedResource, ...] = ()
    """Git-owned capacity that Git still declared when it was deleted outside Dockyard
    (by hand): its last deployed record, status `deleted` (`Store.deleted_outside_git`).
    The planner restores it as drift; an offline plan knows of none."""

    def by_key(self) -> dict[ResourceKey, ObservedResource]:
        return {resource.key: resource for resource in self.resources}

    @classmethod
    def from_desired(cls, desired: DesiredState, *, status: str = "running") -> ObservedState:
        """The state as if `desired` had been applied: the baseline of an offline plan."""
        return cls(
            project=desired.project,
            resources=tuple(
                observe_applied(r, commit=desired.commit, status=status) for r in desired.resources
            ),
        )


def observe_applied(
    resource: DesiredResource, *, commit: str, status: str = "running"
) -> ObservedResource:
    """The observed record of `resource` once it has been applied from `commit`."""
    return ObservedResource(
        kind=resource.kind,
        name=resource.name,
        project=resource.project,
        origin=to_git_origin(resource.path, commit),
        spec=resource.spec,
        spec_hash=resource.spec_hash,
        status=status,
        path=resource.path,
        commit=commit,
        finished=status in FINISHED_RUN_STATUSES,
    )
