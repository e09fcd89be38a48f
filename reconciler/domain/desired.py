"""Desired state: what one commit of the config repo declares.

Built by `reconciler.core.loading` from a snapshot. Every resource carries its file and
line (for messages), its normalized spec (a JSON-able dict, dstack's server defaults filled:
`schemas.defaulting`) and the hash of that spec. `model` is the parsed `schemas` model when
one exists (the implicit default fleet has none). A `DesiredState` with issues must never
be applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.domain.issues import ConfigIssue
from reconciler.domain.kinds import Kind, ResourceKey

IMPLICIT_PATH = "(implicit)"
"""The `path` of a resource Dockyard adds itself (the default fleet of a repo without one)."""


@dataclass(frozen=True, slots=True)
class DesiredResource:
    """One resource declared by a file at a commit."""

    kind: Kind
    name: str
    project: str
    path: str
    line: int
    spec: Mapping[str, Any]
    spec_hash: str
    model: Any = field(default=None, compare=False, repr=False)
    implicit: bool = False

    key: ResourceKey = field(init=False, repr=False, compare=False)
    """(project, kind, name), computed once: plans look resources up by it a lot."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", ResourceKey(self.project, self.kind, self.name))


@dataclass(frozen=True, slots=True)
class DesiredState:
    """Everything a commit declares, plus the problems that make it unusable."""

    project: str
    commit: str
    resources: tuple[DesiredResource, ...] = ()
    issues: tuple[ConfigIssue, ...] = ()
    config_files: int = 0
    """How many config files the snapshot held (0 = an empty snapshot)."""
    warnings: tuple[ConfigIssue, ...] = ()
    """What valid files should still tell their authors (legacy or ignored fields); a
    plan shows them and they never stop it."""

    @property
    def ok(self) -> bool:
        return not self.issues

    def by_key(self) -> dict[ResourceKey, DesiredResource]:
        return {resource.key: resource for resource in self.resources}
