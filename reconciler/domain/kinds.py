"""The six resource kinds of a config repo and the key that identifies a resource.

A resource is identified by (project, kind, name): two files declaring the same kind and
name in one project are an error, and the same name may be used by two kinds. Kinds are
split into *infrastructure* (capacity: volumes, fleets, gateways) and *runs* (work:
services, tasks, dev environments); runs reference infrastructure, never the other way.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """A resource kind; the value is dstack's `type`."""

    VOLUME = "volume"
    FLEET = "fleet"
    GATEWAY = "gateway"
    SERVICE = "service"
    TASK = "task"
    DEV_ENVIRONMENT = "dev-environment"

    @property
    def is_run(self) -> bool:
        """Whether this kind is a run (work) rather than infrastructure (capacity)."""
        return self in _RUN_KINDS

    @property
    def rank(self) -> int:
        """Position in the canonical order: infrastructure first, then runs."""
        return _ORDER.index(self)


_ORDER: tuple[Kind, ...] = tuple(Kind)
_RUN_KINDS = frozenset({Kind.SERVICE, Kind.TASK, Kind.DEV_ENVIRONMENT})


@dataclass(frozen=True, slots=True, order=True)
class ResourceKey:
    """Identity of a resource: unique among the live resources of a project."""

    project: str
    kind: Kind
    name: str

    def __str__(self) -> str:
        return f"{self.project}/{self.kind.value}/{self.name}"
