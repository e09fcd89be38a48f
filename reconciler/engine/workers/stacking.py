"""What the capacity workers share: bring a row's stack up, destroy it, record the result.

Volumes and gateways are one stack each (`<project>-<kind>-<name>`); fleets are a stack
plus instances. `StackRows` drives the stack part for any of these rows, the same way:

- `submitted` → the engine chosen by `select_engine` must be available (a cloud resource
  without Pulumi is *blocked*: the row fails with the engine's message until its spec
  changes); `up` returns outputs, written with the ready status;
- `terminating` → `destroy`; the row becomes `terminated` and leaves the live set, and the
  inventory row is dropped only now that the deletion is confirmed (a failed destroy keeps
  it, so the next pass retries instead of forgetting a paid resource).

Every engine error goes through `outcomes`: retryable ones leave the status alone and set
the message and the next due time; the others fail the row. Writes are fenced by the lease.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, cast, get_args

from reconciler.domain.inventory import CapacityKind, CapacityRecord
from reconciler.engine.outcomes import Outcome, Verdict, outcome_of
from reconciler.engine.previewing import engine_for, to_stack_resource
from reconciler.engine.workers import WorkerDeps
from stacks.protocol import Engine, StackError, StackOutputs, StackResource

DELETING = "deleting"


@dataclass(frozen=True, slots=True)
class Stacked:
    """The engine and resource of a row, or why there is none."""

    engine: Engine | None
    resource: StackResource
    blocked: str = ""


class StackRows:
    """Stack operations and fenced writes for rows of one kind (`"fleet"`, `"volume"`,
    `"gateway"`), loaded as `CapacityRecord`s."""

    def __init__(self, deps: WorkerDeps, kind: str) -> None:
        if kind not in get_args(CapacityKind):
            raise ValueError(f"not a capacity kind: {kind!r}")
        self.deps = deps
        self.kind = cast(CapacityKind, kind)

    async def load(self, row_id: str, token: str) -> CapacityRecord | None:
        """The row with its project's name and config path, if this lease still holds it."""
        return await asyncio.to_thread(self.deps.store.load_capacity, self.kind, row_id, token)

    async def stacked(self, row: CapacityRecord) -> Stacked:
        spec = dict(row.spec or {})
        resource = to_stack_resource(row.project, self.kind, row.name, row.path, spec)
        engine, why = engine_for(self.deps.engines, self.kind, spec)
        return Stacked(engine, resource, why)

    async def write(self, row: CapacityRecord, token: str, **values: Any) -> bool:
        """Fenced write of the row; False when the lease was lost (nothing written)."""
        return await asyncio.to_thread(
            self.deps.store.write_capacity, self.kind, row.id, token, values
        )

    async def event(self, row: CapacityRecord, message: str) -> None:
        await asyncio.to_thread(
            self.deps.store.append_event,
            project_id=row.project_id,
            target_type=self.kind,
            target_id=row.id,
            target_name=row.name,
            message=message,
        )

    async def set_resource(self, row: CapacityRecord, status: str, message: str = "") -> None:
        if row.resource_id is not None:
            await asyncio.to_thread(
                self.deps.store.set_resource_status, row.resource_id, status, message
            )

    async def up(
        self, row: CapacityRecord, token: str, *, nodes: int | None = None
    ) -> StackOutputs | Outcome:
        """Bring the row's stack up; outputs, or the classified failure (already written).

        `nodes` sets a fleet's instance count for this `up` (`StackResource.nodes`): an
        elastic fleet grows or shrinks through it; None means the spec's count."""
        stacked = await self.stacked(row)
        if stacked.engine is None:
            return await self.fail(row, token, f"blocked: {stacked.blocked}")
        try:
            return await stacked.engine.up(replace(stacked.resource, nodes=nodes))
        except StackError as exc:
            return await self.record_failure(row, token, _classified(exc))

    async def destroy(self, row: CapacityRecord, token: str) -> Outcome | None:
        """Destroy the row's stack and confirm the deletion; the failure if it failed."""
        stacked = await self.stacked(row)
        if stacked.engine is not None:
            try:
                await stacked.engine.destroy(stacked.resource)
            except StackError as exc:
                return await self.record_failure(row, token, _classified(exc))
        if await self.write(row, token, status="terminated", status_message="", deleted=True):
            await self.event(row, f"{self.kind} {row.name} terminated")
            await asyncio.to_thread(confirm_deleted, self.deps, row.resource_id)
        return None

    async def fail(self, row: CapacityRecord, token: str, message: str) -> Outcome:
        if await self.write(row, token, status="failed", status_message=message):
            await self.event(row, f"{self.kind} {row.name} failed: {message}")
            await self.set_resource(row, "failed", message)
        return Outcome(Verdict.FAILED, message)

    async def record_failure(self, row: CapacityRecord, token: str, outcome: Outcome) -> Outcome:
        if not outcome.retries:
            return await self.fail(row, token, outcome.event)
        if row.status_message != outcome.event:
            await self.write(row, token, status_message=outcome.event)
            await self.event(row, f"{self.kind} {row.name}: {outcome.event}")
        return outcome


def confirm_deleted(deps: WorkerDeps, resource_id: str | None) -> None:
    """Drop the inventory row once its deletion is confirmed (only if it is being deleted)."""
    if resource_id is None:
        return
    deps.store.confirm_resource_deleted(resource_id, DELETING)


def _classified(exc: StackError) -> Outcome:
    """Every `StackError` subclass is classified; a bare one is a failed operation."""
    return outcome_of(exc) or Outcome(Verdict.RETRY, str(exc), retry_after=30.0)
