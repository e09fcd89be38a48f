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
  delete) and the estimated $/h of a cloud fleet at its new spec (bundled offers catalog,
  cheapest offer times its nodes). A delete destroys the whole stack; its $/h is the saving.

Run actions are not previewed here: placement happens in the jobs worker, which waits for
capacity or fails the run with dstack's reasons (`placement_warnings` reports those that
no instance up could ever hold).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.adapters.db.store import Store
from reconciler.core.elastic import Growth, choose_growth, failure_message
from reconciler.core.jobspecs import requirements_of
from reconciler.core.scheduling import NoFit, place_job
from reconciler.domain.plan import Action, ActionKind, PreviewStep, StackPreview
from reconciler.engine.outcomes import outcome_of
from reconciler.engine.workers.growing import elastic_fleets
from stacks.catalog import offers_for_spec
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
        self, engines: Mapping[EngineName, Engine], *, credentials: CredentialCheck | None = None
    ) -> None:
        self._engines = engines
        self._credentials = credentials

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

    async def preview(self, action: Action, spec: Mapping[str, object]) -> PreviewResult:
        """The preview of a changing capacity action whose (new, or for a delete old) spec
        is `spec`."""
        label = f"{action.kind.value} {action.name!r} ({action.path})"
        resource = to_stack_resource(
            action.project, action.kind.value, action.name, action.path, spec
        )
        price = per_hour(action.kind.value, spec)
        engine, why = engine_for(self._engines, action.kind.value, spec)
        if engine is not None and engine.name == "pulumi":
            missing = self._blocked_by_credentials(action.kind.value, spec)
            engine, why = (None, missing) if missing is not None else (engine, why)
        if engine is None:
            unrun = StackPreview(resource.stack_name, per_hour=price, error=why)
            return PreviewResult(unrun, blocked=why)
        if action.action is ActionKind.DELETE:
            steps = (PreviewStep("delete", resource.stack_name, "stack (every resource in it)"),)
            saving = -price if price is not None else None
            return PreviewResult(StackPreview(resource.stack_name, steps, saving))
        try:
            plan = await engine.preview(resource)
        except (StackUnavailable, StackUnsupported) as exc:
            unrun = StackPreview(resource.stack_name, per_hour=price, error=str(exc))
            return PreviewResult(unrun, blocked=str(exc))
        except StackError as exc:
            outcome = outcome_of(exc)
            message = f"{exc}" if outcome is None else outcome.event
            retry = None if outcome is None else outcome.retry_after
            error = StackPreview(resource.stack_name, per_hour=price, error=message)
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
        return _stack_preview(plan, per_hour(action.kind.value, spec))


def _stack_preview(plan: StackPlan, price: float | None) -> StackPreview:
    steps = tuple(
        PreviewStep(step.op.value, step.name, step.type, tuple(step.diffs)) for step in plan.changes
    )
    return StackPreview(plan.stack, steps, price)


def per_hour(kind: str, spec: Mapping[str, object]) -> float | None:
    """Estimated $/h of a cloud fleet (cheapest catalog offer x nodes); None otherwise."""
    backends = spec.get("backends")
    if kind != "fleet" or not isinstance(backends, list) or not backends:
        return None
    if not {str(b).lower() for b in backends} <= CLOUD_BACKENDS:
        return None
    try:
        offers = offers_for_spec(spec)
        nodes = node_count(spec)
    except (ValueError, TypeError):
        return None
    return round(offers[0].price * nodes, 4) if offers else None


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
