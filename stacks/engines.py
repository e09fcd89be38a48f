"""The engines a server runs, and which one handles (or blocks) a resource.

The reconciler builds one `Engines` at start-up (`build_engines`; it is also a mapping
engine name → engine) and asks it:

- `blocked_reason(kind, spec)`: None, or the message the plan shows for a resource no
  engine can handle here (unsupported backend, no Pulumi CLI, no Pulumi SDK);
- `for_resource(resource)`: the engine to call, or `StackUnsupported`/`StackUnavailable`.

The Pulumi engine is built on first need, so a server with only local and SSH resources
never imports Pulumi (the optional `pulumi` extra, ~650 MB and ~2 s of imports).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from stacks.local import LocalEngine, LocalSettings
from stacks.protocol import (
    PULUMI_NOT_FOUND,
    Availability,
    Engine,
    EngineName,
    StackOutputs,
    StackPlan,
    StackResource,
    StackUnavailable,
    StackUnsupported,
    select_engine,
)
from stacks.pulumi_engine.settings import PulumiSettings

NO_SDK = (
    "Pulumi SDK not installed: install dockyard[pulumi] and the Pulumi CLI "
    "(https://www.pulumi.com/docs/install/) or use SSH/local fleets"
)
NO_SLURM = (
    "backend slurm is not supported by Dockyard on this server: configure the cluster in the "
    "server's backends file (docs/backends.md)"
)
NO_KUBERNETES = (
    "backend kubernetes is not supported by Dockyard on this server: configure the cluster in "
    "the server's backends file (docs/kubernetes.md)"
)
NOT_CONFIGURED = "Pulumi engine not configured: set a state passphrase for cloud resources"


class UnavailableEngine:
    """Stands in for an engine that cannot run here; every operation says why."""

    def __init__(self, name: EngineName, message: str) -> None:
        self.name: EngineName = name
        self._message = message

    def available(self) -> Availability:
        return Availability(False, self._message)

    async def preview(self, resource: StackResource) -> StackPlan:
        raise StackUnavailable(self._message)

    async def up(self, resource: StackResource) -> StackOutputs:
        raise StackUnavailable(self._message)

    async def refresh(self, resource: StackResource) -> StackPlan:
        raise StackUnavailable(self._message)

    async def preview_destroy(self, resource: StackResource) -> StackPlan:
        raise StackUnavailable(self._message)

    async def destroy(self, resource: StackResource) -> None:
        raise StackUnavailable(self._message)


class Engines(Mapping[EngineName, Engine]):
    """The local engine plus a lazily built cloud engine (and the Slurm engine, if any).

    Also a read-only mapping `{"local": …, "pulumi": …[, "slurm": …]}` (what the
    reconciler's workers take); looking up "pulumi" builds the Pulumi engine on first use.
    """

    def __init__(
        self,
        local: Engine,
        cloud: Callable[[], Engine],
        slurm: Engine | None = None,
        kubernetes: Engine | None = None,
    ) -> None:
        self.local = local
        self.slurm = slurm  # the server's Slurm engine, where its backends file has one
        self.kubernetes = kubernetes  # ... and its Kubernetes engine
        self._cloud_factory = cloud
        self._cloud: Engine | None = None
        self._guard = threading.Lock()

    @property
    def pulumi(self) -> Engine:
        with self._guard:
            if self._cloud is None:
                self._cloud = self._cloud_factory()
            return self._cloud

    def _engine(self, name: EngineName) -> Engine:
        if name == "kubernetes":
            if self.kubernetes is None:
                return UnavailableEngine("kubernetes", NO_KUBERNETES)
            return self.kubernetes
        if name == "slurm":
            if self.slurm is None:
                return UnavailableEngine("slurm", NO_SLURM)
            return self.slurm
        return self.local if name == "local" else self.pulumi

    def _names(self) -> tuple[EngineName, ...]:
        clusters: tuple[EngineName, ...] = (
            *(("slurm",) if self.slurm is not None else ()),
            *(("kubernetes",) if self.kubernetes is not None else ()),
        )
        return ("local", "pulumi", *clusters)

    def __getitem__(self, name: EngineName) -> Engine:
        if name not in self._names():
            raise KeyError(name)
        return self._engine(name)

    def __iter__(self) -> Iterator[EngineName]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def blocked_reason(self, kind: str, spec: Mapping[str, Any]) -> str | None:
        """None when an available engine handles the resource, else the plan's message."""
        choice = select_engine(kind, spec)
        if choice.engine is None:
            return choice.message
        availability = self._engine(choice.engine).available()
        return None if availability else availability.message

    def for_resource(self, resource: StackResource) -> Engine:
        choice = select_engine(resource.kind, resource.spec)
        if choice.engine is None:
            raise StackUnsupported(f"{resource.label}: {choice.message}")
        engine = self._engine(choice.engine)
        availability = engine.available()
        if not availability:
            raise StackUnavailable(availability.message)
        return engine


def _pulumi_factory(settings: PulumiSettings | None) -> Callable[[], Engine]:
    """Build the Pulumi engine, or explain (first what is missing on the host: the CLI,
    then the SDK, then the server's configuration)."""

    def build() -> Engine:
        try:
            from stacks.pulumi_engine.command import load_command
            from stacks.pulumi_engine.engine import PulumiEngine
        except ImportError:
            has_cli = shutil.which("pulumi") is not None
            return UnavailableEngine("pulumi", NO_SDK if has_cli else PULUMI_NOT_FOUND)
        if settings is None:
            _, availability = load_command(None, search_path=None)
            message = NOT_CONFIGURED if availability else availability.message
            return UnavailableEngine("pulumi", message)
        return PulumiEngine.create(settings)

    return build


def build_engines(
    local: LocalSettings,
    pulumi: PulumiSettings | None,
    slurm: Engine | None = None,
    kubernetes: Engine | None = None,
) -> Engines:
    """The engines of a server; `pulumi=None` when no passphrase is configured, `slurm`
    and `kubernetes` the server's cluster engines (built by the reconciler from its
    backends file)."""
    return Engines(LocalEngine(local), _pulumi_factory(pulumi), slurm, kubernetes)
