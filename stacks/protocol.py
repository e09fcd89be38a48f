"""The one seam between the reconciler and infrastructure: the `Engine` protocol.

The reconciler sees capacity resources (fleets, volumes, gateways) only through this
module. Each resource is a `StackResource` (who owns it, where it was declared, its
normalized spec and the offers chosen for it); an `Engine` previews it into a `StackPlan`,
brings it up (returning JSON-able outputs), refreshes it to detect drift, previews its
destruction (what a delete removes) and destroys it.

Which engine handles a resource is a pure decision, `select_engine`, made from the
resource's `backends` (fleets) or `backend` (volumes, gateways):

- no backend, `local`, or an SSH fleet (`ssh_config`) → the local engine (`stacks.local`);
- `aws`/`gcp` → the Pulumi engine (`stacks.pulumi_engine`);
- a fleet of `slurm` alone → the server's Slurm engine (one exists only where the
  server's backends file configures Slurm); of `kubernetes` alone → its Kubernetes engine
  (likewise);
- anything else, or local and cloud mixed in one fleet → unsupported, with a message.

Engines raise only the `StackError` classes below; the reconciler maps them (one place)
to its own taxonomy: `StackBusy` → retry later, `StackUnavailable`/`StackUnsupported` →
the resource is blocked, `StackProgramError` → permanent until the config changes,
`StackFailed` → the operation failed (retry with back-off).

All engine methods except `available()` are coroutines: engines run blocking work in a
bounded thread pool so the event loop stays free; cancelling the awaiting task cancels
the operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable

from stacks.offer import Offer

PULUMI_NOT_FOUND = (
    "Pulumi CLI not found: install it (https://www.pulumi.com/docs/install/) "
    "or use SSH/local fleets"
)

ResourceKind = Literal["fleet", "volume", "gateway"]
EngineName = Literal["local", "pulumi", "slurm", "kubernetes"]
StackOutputs = dict[str, Any]
"""JSON-able outputs of `up`; shapes per kind are documented in docs/clouds.md."""

LOCAL_BACKENDS = frozenset({"local", "ssh", "remote"})
CLOUD_BACKENDS = frozenset({"aws", "gcp"})
CLUSTER_ENGINES: dict[str, EngineName] = {"slurm": "slurm", "kubernetes": "kubernetes"}
"""A fleet of only this backend is allocated by that engine (the server's, when its
backends file has the backend: `reconciler.engine.slurmengine`, `.kubeengine`)."""


@dataclass(frozen=True, slots=True)
class StackResource:
    """One capacity resource as an engine sees it.

    `spec` is the normalized spec (`schemas` model `.normalized()`), a plain dict.
    `offers` are the offers chosen for a cloud fleet, cheapest first (empty otherwise).
    `nodes` overrides the fleet's instance count for this `up` (`nodes: 0..N` fleets grow
    and shrink through it); None means the spec's `nodes.target` (or `min`).
    """

    project: str
    kind: ResourceKind
    name: str
    path: str
    spec: Mapping[str, Any]
    offers: tuple[Offer, ...] = ()
    nodes: int | None = None

    @property
    def stack_name(self) -> str:
        """`<project>-<kind>-<name>`: the Pulumi stack (and local state) name."""
        return f"{self.project}-{self.kind}-{self.name}"

    @property
    def label(self) -> str:
        """How messages name the resource: `fleet 'gpu' (fleets/gpu.dstack.yml)`."""
        return f"{self.kind} '{self.name}' ({self.path})"


class StepOp(StrEnum):
    """What an engine will do (or found changed) for one underlying resource."""

    SAME = "same"
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class StackStep:
    """One step of a stack plan: `op` on the underlying resource `name` of `type`.

    `diffs` are the changed property names (wire names for Pulumi, e.g. `instanceType`);
    `replace_keys` are those that force a replacement.
    """

    op: StepOp
    name: str
    type: str
    diffs: tuple[str, ...] = ()
    replace_keys: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op.value,
            "name": self.name,
            "type": self.type,
            "diffs": list(self.diffs),
            "replace_keys": list(self.replace_keys),
        }


@dataclass(frozen=True, slots=True)
class StackPlan:
    """The result of `preview` (what `up` would do) or `refresh` (what drifted)."""

    stack: str
    steps: tuple[StackStep, ...] = ()
    summary: Mapping[str, int] = field(default_factory=dict)

    @property
    def changes(self) -> tuple[StackStep, ...]:
        """The steps that are not `same`."""
        return tuple(s for s in self.steps if s.op is not StepOp.SAME)

    @property
    def is_noop(self) -> bool:
        return not self.changes

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "steps": [s.to_json() for s in self.changes],
            "summary": dict(self.summary),
        }


StackDrift = StackPlan
"""`refresh` returns the drift as a plan: its changes are what differs from the state."""


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether an engine can run here; `message` says why not (shown to users as is)."""

    ok: bool
    message: str = ""

    def __bool__(self) -> bool:
        return self.ok


@runtime_checkable
class Engine(Protocol):
    """Plans, creates, checks and destroys capacity resources of some kinds/backends."""

    name: EngineName

    def available(self) -> Availability:
        """Cheap and cached; false with a user-facing message when the engine cannot run."""
        ...

    async def preview(self, resource: StackResource) -> StackPlan:
        """What `up` would do; no side effect on the infrastructure."""
        ...

    async def up(self, resource: StackResource) -> StackOutputs:
        """Create or update the resource; return its outputs (JSON-able)."""
        ...

    async def refresh(self, resource: StackResource) -> StackDrift:
        """Compare the recorded state with the world; an empty plan means no drift."""
        ...

    async def preview_destroy(self, resource: StackResource) -> StackPlan:
        """What `destroy` would delete: one `delete` step per resource the stack holds now
        (an empty plan when the stack does not exist); no side effect."""
        ...

    async def destroy(self, resource: StackResource) -> None:
        """Delete the resource and its state; destroying what does not exist is a no-op."""
        ...


# ---------------------------------------------------------------------------------------
# Errors (stacks may not import the reconciler; it maps these).


class StackError(Exception):
    """Base of the errors engines raise; `str()` is a user-facing line without secrets."""


class StackUnavailable(StackError):  # noqa: N818 (name fixed by the contract)
    """The engine cannot run on this host (e.g. no Pulumi CLI); the resource is blocked."""

    def __init__(self, message: str = PULUMI_NOT_FOUND) -> None:
        super().__init__(message)


class StackUnsupported(StackError):  # noqa: N818
    """No engine handles this resource's backend; the resource is blocked."""


class StackBusy(StackError):  # noqa: N818
    """Another operation holds the stack; retry after `retry_after` seconds."""

    def __init__(self, message: str, *, retry_after: float = 10.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StackProgramError(StackError):
    """The program for a resource failed (bad config for the cloud); names file and name."""

    def __init__(self, message: str, *, path: str, name: str) -> None:
        super().__init__(f"{path}: {name}: {message}")
        self.path = path
        self.name = name
        self.detail = message


class StackFailed(StackError):  # noqa: N818
    """The engine ran and the operation failed (cloud error, cancelled, I/O)."""


# ---------------------------------------------------------------------------------------
# Engine selection (pure).


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The engine for a resource, or `None` with the reason shown in the plan."""

    engine: EngineName | None
    message: str = ""


def _backends_of(kind: str, spec: Mapping[str, Any]) -> tuple[str, ...]:
    if kind == "fleet":
        if spec.get("ssh_config") is not None:
            return ("ssh",)
        raw = spec.get("backends") or ()
        return tuple(str(b).lower() for b in raw)
    backend = spec.get("backend")
    return (str(backend).lower(),) if backend else ()


def select_engine(kind: str, spec: Mapping[str, Any]) -> EngineChoice:
    """Pure: which engine handles a fleet/volume/gateway with this normalized spec.

    No backend means the embedded default (this host, local directories, built-in proxy).
    """
    backends = _backends_of(kind, spec)
    if not backends or set(backends) <= LOCAL_BACKENDS:
        return EngineChoice("local")
    if set(backends) <= CLOUD_BACKENDS:
        return EngineChoice("pulumi")
    if kind == "fleet" and len(set(backends)) == 1 and backends[0] in CLUSTER_ENGINES:
        return EngineChoice(CLUSTER_ENGINES[backends[0]])
    unknown = sorted(set(backends) - LOCAL_BACKENDS - CLOUD_BACKENDS)
    if unknown:
        return EngineChoice(
            None,
            f"backend {', '.join(unknown)} is not supported by Dockyard: "
            "use aws, gcp, an SSH fleet (ssh_config) or the local fleet",
        )
    return EngineChoice(
        None,
        "local and cloud backends cannot be mixed in one fleet: split it into two fleets",
    )
