"""Capacity deleted outside Dockyard is drift in the plan (pure): a fleet or volume Git
declares whose deletion by hand finished is a `create` marked `drift` ("was deleted outside
Dockyard … will restore"); one being deleted right now is a `noop` marked `drift`; the PR
comment lists both under drift, apart from the PR's own changes."""

from __future__ import annotations

from dataclasses import replace

from reconciler.core.planning import plan
from reconciler.core.rendering_json import to_json_dict
from reconciler.core.rendering_markdown import render_markdown
from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import ActionKind
from tests.planning.factories import POLICY, deployed, one, resource, state

GPU = resource("type: fleet\nname: gpu\nnodes: 1\n", path="fleets/gpu.dstack.yml")
DATA = resource("type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 10GB\n")
NEW = resource("type: fleet\nname: fresh\nnodes: 1\n")


def test_capacity_deleted_by_hand_is_restored_as_drift() -> None:
    gone = replace(deployed(GPU, commit="a" * 40), status="deleted")
    observed = ObservedState("main", (deployed(DATA),), vanished=(gone,))
    result = plan(state(GPU, DATA, NEW), observed, POLICY)
    gpu, fresh = one(result, "gpu"), one(result, "fresh")
    assert (gpu.action, gpu.drift) == (ActionKind.CREATE, True)
    assert gpu.reason == (
        "drift: fleet `gpu` was deleted outside Dockyard (last applied from "
        "fleets/gpu.dstack.yml@aaaaaaaaaaaa), but fleets/gpu.dstack.yml declares it: will "
        "restore, create it again"
    )
    assert (fresh.action, fresh.drift) == (ActionKind.CREATE, False)
    markdown = render_markdown(result)
    own, drift = markdown.split("#### Drift: changed outside Git, not by this PR")
    assert "<code>fresh</code>" in own and "<code>gpu</code>" not in own
    assert "was deleted outside Dockyard" in drift
    data = to_json_dict(result)
    assert [a["name"] for a in data["actions"] if a.get("drift")] == ["gpu"]
    assert data["summary"]["create"] == 2


def test_capacity_being_deleted_by_hand_is_drift_until_it_is_gone() -> None:
    deleting = deployed(DATA, status="deleting")
    data = one(plan(state(DATA), ObservedState("main", (deleting,)), POLICY), "data")
    assert (data.action, data.drift) == (ActionKind.NOOP, True)
    assert data.reason.startswith("drift: volume `data` is being deleted outside Dockyard")
    assert data.reason.endswith("the next plan will restore it (create it again)")


def test_without_a_record_of_the_deletion_it_is_a_plain_create() -> None:
    gpu = one(plan(state(GPU), ObservedState("main"), POLICY), "gpu")
    assert (gpu.action, gpu.drift) == (ActionKind.CREATE, False)
    assert gpu.reason == "new fleet declared in fleets/gpu.dstack.yml"
