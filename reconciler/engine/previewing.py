"""The preview stage: dry-run every changing action before anything is applied.

Capacity actions (fleets, volumes, gateways being created, updated or replaced) are
previewed by the `stacks` engine that would bring them up: `select_engine` picks it from
the spec, the engine must be available on this host (a cloud fleet without a `pulumi` CLI
is *blocked*, with the engine's message), and its `preview` must succeed. Run actions are
not previewed against live capacity here: placement happens in the jobs worker, which
waits for capacity or fails the run with dstack's reasons.

`Previewer.preview(plan)` returns one `PreviewFailure` per failed preview (empty: all
good); the reconcile aborts the whole pass when the list is not empty (Argo's whole-sync
dry-run), and queues a retry when a failure is transient (a stack busy with a worker's
`up`, a cloud API blip).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.adapters.db.store import Store
from reconciler.core.elastic import Growth, choose_growth, failure_message
from reconciler.core.jobspecs import requirements_of
from reconciler.core.scheduling import NoFit, place_job
from reconciler.domain.plan import Action, ActionKind, Plan
from reconciler.engine.outcomes import outcome_of
from reconciler.engine.workers.growing import elastic_fleets
from reconciler.engine.workers.placing import load_candidates
from stacks.protocol import (
    Engine,
    EngineName,
    ResourceKind,
    StackError,
    StackResource,
    select_engine,
)

_PREVIEWED = frozenset({ActionKind.CREATE, ActionKind.UPDATE, ActionKind.REPLACE})


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
        return None, f"the {choice.engine} engine is not configured on this server"
    availability = engine.available()
    if not availability:
        return None, availability.message
    return engine, ""


@dataclass(frozen=True, slots=True)
class PreviewFailure:
    """One action whose preview failed: the line shown, and when to try again (if ever)."""

    line: str
    retry_after: float | None = None


class Previewer:
    """Previews the capacity actions of a plan with the configured engines."""

    def __init__(self, engines: Mapping[EngineName, Engine]) -> None:
        self._engines = engines

    async def preview(self, plan: Plan) -> list[PreviewFailure]:
        actions = [a for a in plan.actions if a.action in _PREVIEWED and not a.kind.is_run]
        failures = await asyncio.gather(*(self._preview_one(a) for a in actions))
        return [failure for failure in failures if failure is not None]

    async def _preview_one(self, action: Action) -> PreviewFailure | None:
        label = f"{action.kind.value} {action.name!r} ({action.path})"
        spec = dict(action.spec or {})
        engine, why = engine_for(self._engines, action.kind.value, spec)
        if engine is None:
            return PreviewFailure(f"{label}: blocked: {why}")
        resource = to_stack_resource(
            action.project, action.kind.value, action.name, action.path, spec
        )
        try:
            await engine.preview(resource)
        except StackError as exc:
            outcome = outcome_of(exc)
            if outcome is None:
                return PreviewFailure(f"{label}: {exc}")
            return PreviewFailure(f"{label}: {outcome.event}", outcome.retry_after)
        return None


def placement_warnings(store: Store, project_id: str, actions: Sequence[Action]) -> list[str]:
    """Runs of the plan that no instance of the project could ever hold, and why.

    Informational (the jobs worker fails such a run with dstack's `no offers` reason):
    only checked against instances that are up, so capacity still being provisioned
    never produces a warning, nor does a run an elastic fleet would grow for.
    """
    runs = [a for a in actions if a.kind.is_run and a.action.changes and a.spec is not None]
    if not runs:
        return []
    candidates = load_candidates(store, project_id)
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
