"""Blocked capacity and the runs that wait for it (`core.blocking`), and how previews,
drift and unchecked checks read in the JSON, markdown and table plans (pure)."""

from __future__ import annotations

import json
from dataclasses import replace

from rich.console import Console

from reconciler.core.blocking import BLOCKED_PREFIX, block_actions
from reconciler.core.planning import plan
from reconciler.core.rendering_json import to_json_dict
from reconciler.core.rendering_markdown import render_markdown
from reconciler.core.rendering_table import render_table
from reconciler.domain.desired import DesiredResource
from reconciler.domain.kinds import Kind, ResourceKey
from reconciler.domain.plan import ActionKind, Plan, PreviewStep, StackPreview
from reconciler.pr.document import read_report, report_to_json
from reconciler.pr.reviewing import PlanReport
from tests.planning.factories import POLICY, deployed, live, resource, state

CLOUD = resource("type: fleet\nname: cloud\nbackends: [aws]\nnodes: 1\n")
HERE = resource("type: fleet\nname: here\nnodes: 1\n")
DATA = resource("type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 10GB\n")
ANY = resource("type: task\nname: any\ncommands: [echo]\n")
PINNED = resource("type: task\nname: pinned\ncommands: [echo]\nfleets: [cloud]\n")
MOUNTS = resource("type: task\nname: mounts\ncommands: [echo]\nvolumes: [data:/data]\n")
WHY = "Pulumi CLI not found: install it"


def key(kind: Kind, name: str) -> ResourceKey:
    return ResourceKey("main", kind, name)


def blocked_plan(*resources: DesiredResource, reasons: dict[ResourceKey, str]) -> dict[str, str]:
    actions = block_actions(plan(state(*resources), live(), POLICY).actions, reasons)
    return {a.name: a.reason for a in actions if a.action is ActionKind.BLOCKED}


def test_a_blocked_fleet_blocks_only_the_runs_that_can_only_wait_for_it() -> None:
    blocked = blocked_plan(CLOUD, HERE, ANY, PINNED, reasons={key(Kind.FLEET, "cloud"): WHY})
    assert blocked == {
        "cloud": f"blocked: {WHY}",
        "pinned": f"blocked: waits for fleet `cloud`, which is blocked: {WHY}",
    }


def test_a_run_of_a_project_whose_every_fleet_is_blocked_waits_for_one() -> None:
    blocked = blocked_plan(CLOUD, ANY, reasons={key(Kind.FLEET, "cloud"): WHY})
    assert blocked["any"].startswith("blocked: waits for fleet `cloud`")


def test_a_run_mounting_a_blocked_volume_waits_for_it() -> None:
    blocked = blocked_plan(HERE, DATA, MOUNTS, ANY, reasons={key(Kind.VOLUME, "data"): WHY})
    assert set(blocked) == {"data", "mounts"}
    assert blocked["mounts"].startswith("blocked: waits for volume `data`")


def test_a_blocked_update_of_existing_capacity_leaves_its_runs_alone() -> None:
    grown = resource("type: fleet\nname: cloud\nbackends: [aws]\nnodes: 2\n")
    result = plan(state(grown, PINNED), live(deployed(CLOUD)), POLICY)
    actions = block_actions(result.actions, {key(Kind.FLEET, "cloud"): WHY})
    assert [(a.name, a.action) for a in actions if a.name in ("cloud", "pinned")] == [
        ("cloud", ActionKind.BLOCKED),
        ("pinned", ActionKind.CREATE),
    ]
    (cloud,) = [a for a in actions if a.action is ActionKind.BLOCKED]
    assert cloud.reason == f"{BLOCKED_PREFIX}{WHY}"


PREVIEW = StackPreview(
    "main-fleet-cloud",
    (PreviewStep("create", "cloud-0", "aws:ec2/instance:Instance", ("instanceType",)),),
    1.006,
    price_basis="1 x aws us-east-1 g5.xlarge (on-demand) at $1.006/h",
)


def previewed() -> Plan:
    result = plan(state(CLOUD, HERE), live(), POLICY)
    actions = tuple(replace(a, preview=PREVIEW) if a.name == "cloud" else a for a in result.actions)
    return replace(result, actions=actions)


def test_a_preview_reads_in_json_markdown_and_table_and_round_trips() -> None:
    result = previewed()
    cloud = next(a for a in to_json_dict(result)["actions"] if a["name"] == "cloud")
    assert cloud["preview"] == {
        "stack": "main-fleet-cloud",
        "steps": [
            {"op": "create", "name": "cloud-0", "type": "aws:ec2/instance:Instance",
             "diffs": ["instanceType"]}
        ],
        "counts": {"create": 1, "update": 0, "replace": 0, "delete": 0},
        "per_hour": 1.006,
        "price_basis": "1 x aws us-east-1 g5.xlarge (on-demand) at $1.006/h",
        "error": None,
    }  # fmt: skip
    markdown = render_markdown(result)
    assert (
        "🔍 stack `main-fleet-cloud`: 1 to create · est. $1.006/h "
        "(1 x aws us-east-1 g5.xlarge (on-demand) at $1.006/h)"
    ) in markdown
    assert "- create `cloud-0` aws:ec2/instance:Instance (`instanceType`)" in markdown
    console = Console(width=200, record=True)
    console.print(render_table(result))
    assert "stack main-fleet-cloud: 1 to create, est. $1.006/h (1 x aws" in console.export_text()
    again = read_report(json.loads(json.dumps(report_to_json(PlanReport(result)))))
    assert next(a for a in again.plan.actions if a.name == "cloud").preview == PREVIEW


def test_a_preview_that_could_not_run_says_why_on_its_action() -> None:
    failed = replace(PREVIEW, steps=(), error="quota exceeded")
    result = previewed()
    result = replace(
        result,
        actions=tuple(replace(a, preview=failed) if a.preview else a for a in result.actions),
    )
    assert "🔍 stack `main-fleet-cloud`: ⚠️ no preview: quota exceeded · est. $1.006/h" in (
        render_markdown(result)
    )
    unpriced = replace(failed, per_hour=None, price_basis="no price: no list price for ipv4")
    result = replace(
        result,
        actions=tuple(replace(a, preview=unpriced) if a.preview else a for a in result.actions),
    )
    assert "no preview: quota exceeded · no price: no list price for ipv4" in (
        render_markdown(result)
    )


WEB = resource("type: service\nname: web\nport: 80\ncommands: [serve]\n")


def test_drift_is_its_own_section_after_the_pr_changes() -> None:
    stopped = deployed(WEB, status="terminated")
    stopped = replace(stopped, finished=True)
    result = plan(state(WEB, ANY), live(stopped), POLICY)
    web = next(a for a in result.actions if a.name == "web")
    assert web.drift and web.reason.startswith("drift: service `web` is terminated outside Git")
    markdown = render_markdown(result)
    own, drift = markdown.split("#### Drift: changed outside Git, not by this PR")
    assert "<code>any</code>" in own and "<code>web</code>" not in own
    assert "<code>web</code>" in drift and "will restore" in drift
    assert [a["name"] for a in to_json_dict(result)["actions"] if a.get("drift")] == ["web"]


def test_an_offline_plan_lists_what_it_could_not_check() -> None:
    result = replace(plan(state(ANY), live(), POLICY), unchecked=("stack previews: no server",))
    assert to_json_dict(result)["unchecked"] == ["stack previews: no server"]
    assert "> - stack previews: no server" in render_markdown(result)
    assert "unchecked" not in to_json_dict(replace(result, unchecked=()))


BASIS = "1 x aws us-east-1 g5.xlarge (on-demand) at $1.006/h"


def test_many_previews_keep_the_comment_under_the_limit() -> None:
    fleets = [
        resource(f"type: fleet\nname: f{i:03}\nbackends: [aws]\nnodes: 1\n") for i in range(300)
    ]
    steps = tuple(
        PreviewStep("create", f"instance-{n}", "aws:ec2/instance:Instance", ("instanceType",))
        for n in range(30)
    )
    result = plan(state(*fleets), live(), POLICY)
    actions = tuple(
        replace(a, preview=StackPreview(f"main-fleet-{a.name}", steps, 1.006, price_basis=BASIS))
        for a in result.actions
    )
    markdown = render_markdown(replace(result, actions=actions), limit=65_536)
    assert len(markdown) < 65_536
    assert "- … and 10 more steps" in markdown  # 20 steps shown per action
    assert "✂️ Truncated:" in markdown and "more block(s)" in markdown
    assert f"· est. $1.006/h ({BASIS})" in markdown  # prices stay within the limit
