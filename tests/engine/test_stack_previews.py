"""Stack previews of the one plan function: every create/update/replace/delete of a fleet,
volume or gateway carries its estimated $/h (what it counts, or why there is none), and a
delete carries the engine's own destroy preview — the resources that delete removes.

Engines at the stacks seam: the real local engine (directories under a temp dir) and the
cloud double (clouds are the one place a fake is allowed)."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from reconciler.core.rendering_markdown import render_markdown
from reconciler.domain.kinds import Kind
from reconciler.domain.plan import ActionKind, Plan, StackPreview
from reconciler.engine.planning import plan_commit
from reconciler.engine.previewing import Previewer
from stacks.local import LocalEngine, LocalSettings
from stacks.protocol import StackFailed, StackPlan, StackResource
from tests.engine.cloud_double import CloudDouble
from tests.planning.factories import POLICY, deployed, live, one, policy, resource, state

FLEET = resource("type: fleet\nname: cloud\nbackends: [aws]\nnodes: 2\nresources: {gpu: A10G}\n")
VOLUME = resource("type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 100GB\n")
GATEWAY = resource(
    "type: gateway\nname: gw\nbackend: gcp\nregion: europe-west4\ndomain: gw.example.com\n"
)
HERE = resource("type: fleet\nname: here\nnodes: 1\n")


def preview_of(result: Plan, name: str) -> StackPreview:
    preview = one(result, name).preview
    assert preview is not None
    return preview


async def test_creates_of_a_cloud_fleet_volume_and_gateway_carry_their_price() -> None:
    planned = await plan_commit(
        state(FLEET, VOLUME, GATEWAY, HERE), POLICY, live(), base=None,
        previewer=Previewer({"pulumi": CloudDouble(), "local": CloudDouble()}),
    )  # fmt: skip
    fleet, volume = preview_of(planned.plan, "cloud"), preview_of(planned.plan, "data")
    gateway, here = preview_of(planned.plan, "gw"), preview_of(planned.plan, "here")
    assert (fleet.per_hour, fleet.price_basis) == (
        2.012,
        "2 x aws us-east-1 g5.xlarge (on-demand) at $1.006/h",
    )
    # 100 GB of gp3 at $0.08/GB-month over a 730-hour month
    assert (volume.per_hour, volume.price_basis) == (0.011, "100 GB gp3 $0.08/GB-month")
    # e2-small + its static address + a 20 GB pd-standard boot disk
    assert gateway.per_hour == pytest.approx(0.018438 + 0.005 + 20 * 0.044 / 730, abs=1e-4)
    assert gateway.price_basis == (
        "e2-small $0.018438/h + IPv4 $0.005/h + 20 GB pd-standard $0.044/GB-month"
    )
    assert (here.per_hour, here.price_basis) == (0.0, "local/SSH capacity: $0 here")
    markdown = render_markdown(planned.plan)
    assert "🔍 stack `main-volume-data`: no changes · est. $0.011/h (100 GB gp3" in markdown
    assert "est. $0.0246/h (e2-small $0.018438/h + IPv4" in markdown


async def test_a_blocked_cloud_volume_still_says_what_it_would_cost() -> None:
    planned = await plan_commit(
        state(VOLUME), POLICY, live(), base=None, previewer=Previewer({}),
    )  # fmt: skip
    volume = one(planned.plan, "data")
    assert volume.action is ActionKind.BLOCKED and volume.preview is not None
    assert volume.preview.error and volume.preview.per_hour == 0.011


@pytest.mark.parametrize(
    ("yaml", "per_hour", "basis"),
    [
        (
            "type: volume\nname: vv\nbackend: aws\nregion: ap-south-1\nsize: 10GB\n",
            None,
            "no price: no list price for disk gp3 in aws ap-south-1",
        ),
        (
            "type: volume\nname: vv\nbackend: aws\nregion: us-east-1\nvolume_id: vol-1\n",
            0.0,
            "registers an existing volume: Dockyard neither creates nor deletes it",
        ),
        (
            "type: gateway\nname: vv\nbackend: aws\nregion: us-east-1\ndomain: d.example.com\n"
            "instance_type: m5.large\n",
            None,
            "no price: no list price for instance m5.large in aws us-east-1",
        ),
    ],
)
async def test_a_resource_without_a_list_price_says_why(
    yaml: str, per_hour: float | None, basis: str
) -> None:
    desired = resource(yaml)
    planned = await plan_commit(
        state(desired), POLICY, live(), base=None, previewer=Previewer({"pulumi": CloudDouble()})
    )
    preview = preview_of(planned.plan, "vv")
    assert (preview.per_hour, preview.price_basis) == (per_hour, basis)


async def test_each_delete_carries_what_it_removes_and_its_saving(tmp_path: Path) -> None:
    local = LocalEngine(LocalSettings(tmp_path, getpass.getuser()))
    cloud = CloudDouble()
    await cloud.up(StackResource("main", "fleet", "cloud", FLEET.path, FLEET.spec))
    await local.up(StackResource("main", "fleet", "here", HERE.path, HERE.spec))
    observed = live(deployed(FLEET, status="active"), deployed(HERE, status="active"))
    planned = await plan_commit(
        state(files=0), policy(allow_empty=True), observed, base="c1",
        previewer=Previewer({"pulumi": cloud, "local": local}),
    )  # fmt: skip
    assert [(a.kind, a.action) for a in planned.plan.actions] == [
        (Kind.FLEET, ActionKind.DELETE),
        (Kind.FLEET, ActionKind.DELETE),
    ]
    fleet, here = preview_of(planned.plan, "cloud"), preview_of(planned.plan, "here")
    assert [(s.op, s.name) for s in fleet.steps] == [("delete", "cloud-0"), ("delete", "cloud-1")]
    assert fleet.per_hour == -2.012 and fleet.price_basis is not None
    assert fleet.price_basis.startswith("saves 2 x aws us-east-1 g5.xlarge")
    assert [(s.op, s.name, s.type) for s in here.steps] == [("delete", "host/here-0", "local:host")]
    assert here.per_hour == 0.0
    # a preview deletes nothing: the local stack still holds its host
    assert (await local.preview_destroy(StackResource("main", "fleet", "here", "", {}))).steps
    markdown = render_markdown(planned.plan)
    assert "🔍 stack `main-fleet-cloud`: 2 to delete · est. -$2.012/h (saves 2 x aws" in markdown
    assert "- delete `host/here-0` local:host" in markdown
    assert not planned.failures


class BusyCloud(CloudDouble):
    async def preview_destroy(self, resource: StackResource) -> StackPlan:
        raise StackFailed("stack main-fleet-cloud is locked by another update")


async def test_a_failed_destroy_preview_says_why_and_does_not_stop_the_pass() -> None:
    planned = await plan_commit(
        state(files=0), policy(allow_empty=True), live(deployed(FLEET, status="active")),
        base="c1", previewer=Previewer({"pulumi": BusyCloud()}),
    )  # fmt: skip
    fleet = preview_of(planned.plan, "cloud")
    assert one(planned.plan, "cloud").action is ActionKind.DELETE and not planned.failures
    assert fleet.error is not None and "destroy preview failed" in fleet.error
    assert "locked by another update" in fleet.error and fleet.per_hour == -2.012


async def test_a_delete_on_a_server_without_pulumi_is_blocked_with_why() -> None:
    planned = await plan_commit(
        state(files=0), policy(allow_empty=True), live(deployed(FLEET, status="active")),
        base="c1", previewer=Previewer({}),
    )  # fmt: skip
    fleet = one(planned.plan, "cloud")
    assert fleet.action is ActionKind.BLOCKED and fleet.preview is not None
    assert fleet.preview.error is not None and "not configured" in fleet.preview.error
