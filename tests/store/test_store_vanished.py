"""Capacity deleted outside Dockyard (`VanishedStore.deleted_outside_git`), on SQLite and
PostgreSQL: a fleet Git still declared when someone deleted it counts; one Git deleted, one
live (again), or any before a revision was applied, does not."""

from __future__ import annotations

from reconciler.adapters.db import Store
from reconciler.adapters.db.vanished import VanishedStore
from reconciler.core.planning import plan
from reconciler.core.rendering_json import to_json_dict
from reconciler.domain.desired import DesiredResource
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import Plan
from tests.planning.factories import policy, resource, state
from tests.store.conftest import FakeClock

GPU = resource("type: fleet\nname: gpu\nnodes: 1\n")
DATA = resource("type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 10GB\n")
STAGES = {"apply"}


def _apply(store: Store, result: Plan, revision: str) -> None:
    """One succeeded reconcile applying `result` (as the reconcile pass records it)."""
    project_id = store.get_or_create_project("main").id
    row = store.create_reconcile(project_id, trigger="api")
    store.set_reconcile_stage(row.id, "apply", plan=to_json_dict(result))
    assert store.apply_plan_batch(row.id, result.actions, applying_stages=STAGES) is not None
    store.finish_reconcile(row.id, status="succeeded", applied_revision=revision)


def _delete_by_hand(store: Store, kind: Kind, name: str) -> None:
    """`dockyard delete` / dstack's delete, then the stack worker confirming it."""
    project_id = store.get_or_create_project("main").id
    found = store.get_resource("main", kind.value, name)
    assert found is not None
    store.delete_resource_by_name(project_id, "main", kind, name)
    store.confirm_resource_deleted(found.id, "deleting")
    assert store.get_resource("main", kind.value, name) is None


def _vanished(store: Store) -> list[tuple[Kind, str, str]]:
    found = VanishedStore(store.engine, clock=store.clock).deleted_outside_git("main")
    return [(r.kind, r.name, r.status) for r in found]


def _plan(*resources: DesiredResource, observed: ObservedState | None = None) -> Plan:
    return plan(state(*resources), observed or ObservedState("main"), policy(volumes="delete"))


def test_capacity_git_declares_but_someone_deleted_counts(store: Store, clock: FakeClock) -> None:
    assert _vanished(store) == []  # no project, nothing applied
    _apply(store, _plan(GPU, DATA), "c1")
    assert _vanished(store) == []  # both live
    clock.advance(10)
    _delete_by_hand(store, Kind.FLEET, "gpu")
    assert _vanished(store) == [(Kind.FLEET, "gpu", "deleted")]
    observed = store.load_observed("main")
    assert [r.name for r in observed.resources] == ["data"]
    assert VanishedStore(store.engine).deleted_outside_git("nope") == ()


def test_capacity_git_deleted_or_that_is_live_again_does_not_count(
    store: Store, clock: FakeClock
) -> None:
    _apply(store, _plan(GPU, DATA), "c1")
    clock.advance(10)
    removed = plan(state(GPU), store.load_observed("main"), policy(volumes="delete"))
    _apply(store, removed, "c2")  # Git deletes the volume
    found = store.get_resource("main", "volume", "data")
    assert found is not None and found.status == "deleting"
    store.confirm_resource_deleted(found.id, "deleting")
    clock.advance(10)
    assert _vanished(store) == []  # Git's own delete is no drift
    _delete_by_hand(store, Kind.FLEET, "gpu")
    assert _vanished(store) == [(Kind.FLEET, "gpu", "deleted")]
    clock.advance(10)
    _apply(store, _plan(GPU, observed=store.load_observed("main")), "c3")  # restored
    assert _vanished(store) == []
