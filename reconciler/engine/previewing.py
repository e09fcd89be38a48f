"""Stack previews: what bringing one capacity action about does to its stack, and its $/h.

Called by the plan function (`reconciler.engine.planning`), for the reconcile pass and the
server's PR plans alike. A changing fleet, volume or gateway action is previewed by the
`stacks` engine that would bring it up (`select_engine` picks it from the spec):

- no engine can run it here (no Pulumi CLI, the engine not configured, no credentials
  for the cloud on this host, an unsupported backend) → `PreviewResult.blocked`, the
  engine's message with its fix (the preview then says why it could not run, with the
  $/h it would cost);
- the engine's `preview` fails → `PreviewResult.failure` (the reconcile stops the whole
  pass, a PR plan shows it on the action), retried later when transient;
- otherwise `PreviewResult.preview`: the steps (resources to create, update, replace,
  delete) and the estimated $/h of a cloud fleet, volume or gateway at its new spec
  (`stacks.catalog.pricing`: the cheapest offer times the fleet's nodes; a volume's size
  at its disk type's list price; a gateway's VM, address and boot disk), with what the
  figure counts (`price_basis`). A local or SSH resource costs $0 here.
- a delete is previewed by the engine's `preview_destroy`: one `delete` step per resource
  its stack holds now (Pulumi's `destroy --preview-only`; the local engine's recorded
  items); its $/h is the saving (negative). A destroy preview that fails does not stop
  the pass (the delete does not depend on it): the preview says why, with the price.

Run actions are not previewed here: placement happens in the jobs worker, which waits for
capacity or fails the run with dstack's reasons (`placement_warnings` reports those that
no instance up could ever hold).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.adapters.db.store import Store
from reconciler.adapters.slurm_login import read_project_clusters
from reconciler.core.clusterbackends import ServerBackends, describe_offers
from reconciler.core.elastic import Growth, choose_growth, failure_message
from reconciler.core.jobspecs import requirements_of
from reconciler.core.kube_nodes import describe_kube_offers
from reconciler.core.scheduling import NoFit, place_job
from reconciler.domain.plan import Action, ActionKind, PreviewStep, StackPreview
from reconciler.engine.outcomes import outcome_of
from reconciler.engine.workers.growing import elastic_fleets
from stacks.catalog import (
    CatalogRow,
    Estimate,
    PriceRow,
    fleet_estimate,
    gateway_estimate,
    load_catalog,
    load_prices,
    volume_estimate,
)
from stacks.engines import NO_SLURM
from stacks.programs.config import node_count
from stacks.protocol import (
    CLOUD_BACKENDS,
    Engine,
    EngineName,
    ResourceKind,
    StackError,
    StackPlan,
    StackResource,
    StackUnavailable,
    StackUnsupported,
    select_engine,
)

PREVIEWED = frozenset({ActionKind.CREATE, ActionKind.UPDATE, ActionKind.REPLACE, ActionKind.DELETE})


log = logging.getLogger(__name__)

_KINDS: dict[str, ResourceKind] = {"fleet": "fleet", "volume": "volume", "gateway": "gateway"}


def to_stack_resource(
    project: str, kind: str, name: str, path: str | None, spec: object
) -> StackResource:
    """The engine's view of a capacity resource (`kind` is fleet, volume or gateway)."""
    return StackResource(
        project=project,
        kind=_KINDS[kind],
        name=name,
        path=path or "(unknown)",
        spec=dict(spec) if isinstance(spec, Mapping) else {},
    )


def engine_for(
    engines: Mapping[EngineName, Engine], kind: str, spec: Mapping[str, object]
) -> tuple[Engine | None, str]:
    """The engine that handles this resource, or None and why (a user-facing line)."""
    choice = select_engine(kind, spec)
    if choice.engine is None:
        return None, choice.message
    engine = engines.get(choice.engine)
    if engine is None and choice.engine == "slurm":
        return None, NO_SLURM
    if engine is None:
        return None, (
            f"the {choice.engine} engine is not configured on this server: "
            "configure it on the server (docs/clouds.md) or use SSH/local capacity"
        )
    availability = engine.available()
    if not availability:
        return None, availability.message
    return engine, ""


@dataclass(frozen=True, slots=True)
class PreviewFailure:
    """One action whose preview failed: the line shown, and when to try again (if ever)."""

    line: str
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class PreviewResult:
    """One action's preview: the stack preview, or why it is blocked, or how it failed."""

    preview: StackPreview | None = None
    blocked: str | None = None
    failure: PreviewFailure | None = None


CredentialCheck = Callable[[str], str | None]
"""backend (aws, gcp) → None when this host has credentials for it, else the message."""


class Previewer:
    """Previews capacity actions with the configured engines (see the module docstring).

    `credentials` checks a cloud backend's credentials on this host (`stacks.credentials`)
    before its engine is asked; None (test doubles of a cloud) checks nothing."""

    def __init__(
        self,
        engines: Mapping[EngineName, Engine],
        *,
        credentials: CredentialCheck | None = None,
        catalog: Sequence[CatalogRow] | None = None,
        prices: Sequence[PriceRow] | None = None,
        clusters: ServerBackends | None = None,
    ) -> None:
        self._engines = engines
        self._clusters = clusters  # the backends file: why a slurm/kubernetes fleet waits
        self._credentials = credentials
        self._catalog = load_catalog() if catalog is None else tuple(catalog)
        self._prices = load_prices() if prices is None else tuple(prices)

    @property
    def clusters(self) -> ServerBackends | None:
        """The server's backends file (None: not loaded, e.g. a test's previewer)."""
        return self._clusters

    def estimate(self, kind: str, spec: Mapping[str, object]) -> Estimate:
        """The estimated $/h of a fleet, volume or gateway at `spec` (see `estimate`)."""
        return estimate(kind, spec, catalog=self._catalog, prices=self._prices)

    def _blocked_by_credentials(self, kind: str, spec: Mapping[str, object]) -> str | None:
        if self._credentials is None:
            return None
        raw = spec.get("backends") if kind == "fleet" else [spec.get("backend")]
        backends = [str(b).lower() for b in raw or [] if b] if isinstance(raw, list) else []
        for backend in sorted(set(backends) & CLOUD_BACKENDS):
            message = self._credentials(backend)
            if message is not None:
                return message
        return None

    async def _slurm_has(self, project: str) -> str:
        """What the project's Slurm clusters have now, read from them (one line)."""
        assert self._clusters is not None
        offers, errors = await read_project_clusters(self._clusters, project)
        return describe_offers(offers, errors)

    async def _kube_has(self, project: str) -> str:
        """What the project's Kubernetes clusters have now, read from their nodes (one line)."""
        assert self._clusters is not None
        # lightkube (the client) is loaded only when a Kubernetes cluster is asked
        from reconciler.adapters.kubeapi import read_project_kube

        gpus = sorted({row.gpu_name for row in self._catalog if row.gpu_name})
        offers, errors = await read_project_kube(self._clusters, project, gpus)
        return describe_kube_offers(offers, errors)

    async def preview(self, action: Action, spec: Mapping[str, object]) -> PreviewResult:
        """The preview of a changing capacity action whose (new, or for a delete old) spec
        is `spec`."""
        label = f"{action.kind.value} {action.name!r} ({action.path})"
        resource = to_stack_resource(
            action.project, action.kind.value, action.name, action.path, spec
        )
        price = self.estimate(action.kind.value, spec)
        deleting = action.action is ActionKind.DELETE
        if deleting and price.per_hour is not None:
            price = Estimate(-price.per_hour, f"saves {price.basis}")
        engine, why = engine_for(self._engines, action.kind.value, spec)
        if engine is not None and engine.name == "pulumi":
            missing = self._blocked_by_credentials(action.kind.value, spec)
            engine, why = (None, missing) if missing is not None else (engine, why)
        if engine is None and self._clusters is not None and action.kind.value == "fleet":
            raw = spec.get("backends")
            named = [str(b) for b in raw] if isinstance(raw, list) else []
            why = self._clusters.block_reason(action.project, named) or why
            if "slurm" in named and "slurm" in self._clusters.configured(action.project):
                why = f"{why}; the cluster has: {await self._slurm_has(action.project)}"
            if "kubernetes" in named and "kubernetes" in self._clusters.configured(action.project):
                why = f"{why}; the cluster has: {await self._kube_has(action.project)}"
        if engine is None:
            return PreviewResult(_unrun(resource.stack_name, price, why), blocked=why)
        try:
            run = engine.preview_destroy if deleting else engine.preview
            plan = await run(resource)
        except (StackUnavailable, StackUnsupported) as exc:
            return PreviewResult(_unrun(resource.stack_name, price, str(exc)), blocked=str(exc))
        except StackError as exc:
            outcome = outcome_of(exc)
            message = f"{exc}" if outcome is None else outcome.event
            if deleting:  # the delete does not depend on its preview: say why, go on
                why = f"the destroy preview failed ({message}); the delete removes the whole stack"
                return PreviewResult(_unrun(resource.stack_name, price, why))
            retry = None if outcome is None else outcome.retry_after
            error = _unrun(resource.stack_name, price, message)
            return PreviewResult(error, failure=PreviewFailure(f"{label}: {message}", retry))
        return PreviewResult(_stack_preview(plan, price))

    async def refresh(self, action: Action, spec: Mapping[str, object]) -> StackPreview | None:
        """What changed outside Dockyard in the stack of a deployed resource (None: nothing,
        or no engine here to tell, or the refresh failed: drift is not worth a failed plan)."""
        engine, _ = engine_for(self._engines, action.kind.value, spec)
        if engine is None:
            return None
        resource = to_stack_resource(
            action.project, action.kind.value, action.name, action.path, spec
        )
        try:
            plan = await engine.refresh(resource)
        except StackError as exc:
            log.info("refreshing %s failed: %s", resource.stack_name, exc)
            return None
        if plan.is_noop:
            return None
        return _stack_preview(plan, self.estimate(action.kind.value, spec))


def _unrun(stack: str, price: Estimate, error: str) -> StackPreview:
    return StackPreview(stack, per_hour=price.per_hour, error=error, price_basis=price.basis)


def _stack_preview(plan: StackPlan, price: Estimate) -> StackPreview:
    steps = tuple(
        PreviewStep(step.op.value, step.name, step.type, tuple(step.diffs)) for step in plan.changes
    )
    return StackPreview(plan.stack, steps, price.per_hour, price_basis=price.basis)


LOCAL_PRICE = Estimate(0.0, "local/SSH capacity: $0 here")
SLURM_PRICE = Estimate(0.0, "Slurm allocations: $0 here (the cluster does its own accounting)")
KUBE_PRICE = Estimate(0.0, "Kubernetes pods: $0 here (the cluster does its own accounting)")


def estimate(
    kind: str,
    spec: Mapping[str, object],
    *,
    catalog: Sequence[CatalogRow],
    prices: Sequence[PriceRow],
) -> Estimate:
    """Estimated $/h of a fleet, volume or gateway at `spec`: a cloud one from the catalog
    (`stacks.catalog.pricing`), a local or SSH one $0, an unsupported backend unknown."""
    engine = select_engine(kind, spec).engine
    if engine == "local":
        return LOCAL_PRICE
    if engine == "slurm":
        return SLURM_PRICE
    if engine == "kubernetes":
        return KUBE_PRICE
    if engine is None:
        return Estimate(None, "no price: no engine runs this backend")
    if kind == "fleet":
        try:
            nodes = node_count(spec)
        except (ValueError, TypeError) as exc:
            return Estimate(None, f"no price: {exc}")
        return fleet_estimate(spec, catalog, nodes=nodes)
    if kind == "volume":
        return volume_estimate(spec, prices)
    return gateway_estimate(spec, prices)


def placement_warnings(store: Store, project_id: str, actions: Sequence[Action]) -> list[str]:
    """Runs of the plan that no instance of the project could ever hold, and why.

    Informational (the jobs worker fails such a run with dstack's `no offers` reason):
    only checked against instances that are up, so capacity still being provisioned
    never produces a warning, nor does a run an elastic fleet would grow for.
    """
    runs = [a for a in actions if a.kind.is_run and a.action.changes and a.spec is not None]
    if not runs:
        return []
    candidates = store.placement_candidates(project_id)
    if not candidates:
        return []
    fleets = elastic_fleets(store, project_id, candidates, job_id="")
    warnings = []
    for action in runs:
        req = requirements_of(action.spec or {})
        placed = place_job(req, candidates)
        if isinstance(placed, NoFit) and not placed.wait:
            growth = choose_growth(req, 1, fleets)
            if isinstance(growth, Growth):
                continue
            label = f"{action.kind.value} {action.name!r} ({action.path})"
            warnings.append(f"{label}: {failure_message(placed.message, growth)}")
    return warnings
