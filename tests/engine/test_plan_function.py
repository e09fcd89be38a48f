"""The one plan function (`engine.planning.plan_commit`) with engines at the stacks seam:
a stack changed outside Dockyard is planned as its own drift action; without a previewer
the plan says what it could not check; an unsupported backend is blocked with its fix."""

from __future__ import annotations

from reconciler.core.policy import RepoPolicy
from reconciler.domain.plan import ActionKind
from reconciler.engine.planning import OFFLINE_UNCHECKED, plan_commit
from reconciler.engine.previewing import Previewer
from stacks.protocol import StackPlan, StackResource, StackStep, StepOp
from tests.engine.cloud_double import CloudDouble
from tests.planning.factories import deployed, live, resource, state

CLOUD = resource("type: fleet\nname: cloud\nbackends: [aws]\nnodes: 1\n")
POLICY = RepoPolicy()


class DriftedCloud(CloudDouble):
    """A cloud whose instance's type was changed by hand (its refresh says so)."""

    async def refresh(self, resource: StackResource) -> StackPlan:
        step = StackStep(StepOp.UPDATE, f"{resource.name}-0", "aws:ec2/instance:Instance",
                         ("instanceType",))  # fmt: skip
        return StackPlan(resource.stack_name, (step,), {"update": 1})


async def test_a_stack_changed_outside_dockyard_is_planned_as_drift_to_restore() -> None:
    observed = live(deployed(CLOUD, status="active"))
    previewer = Previewer({"pulumi": DriftedCloud()})

    planned = await plan_commit(
        state(CLOUD), POLICY, observed, base="c1", previewer=previewer, refresh=True
    )

    (action,) = planned.plan.actions
    assert (action.action, action.drift) == (ActionKind.UPDATE, True)
    assert action.reason.startswith("drift: its stack `main-fleet-cloud` changed outside")
    assert "1 update: `cloud-0`" in action.reason and action.reason.endswith("spec in Git")
    assert action.preview is not None and action.preview.steps[0].diffs == ("instanceType",)
    unrefreshed = await plan_commit(state(CLOUD), POLICY, observed, base="c1", previewer=previewer)
    assert unrefreshed.plan.actions[0].action is ActionKind.NOOP


class EmptiedCloud(CloudDouble):
    """A cloud whose every instance was deleted in its console (its refresh says so)."""

    async def refresh(self, resource: StackResource) -> StackPlan:
        steps = tuple(
            StackStep(StepOp.DELETE, f"{resource.name}-{i}", "aws:ec2/instance:Instance")
            for i in range(2)
        )
        return StackPlan(resource.stack_name, steps, {"delete": 2})


async def test_a_stack_whose_refresh_shows_everything_gone_was_deleted_outside() -> None:
    observed = live(deployed(CLOUD, status="active"))
    planned = await plan_commit(
        state(CLOUD), POLICY, observed, base="c1", previewer=Previewer({"pulumi": EmptiedCloud()}),
        refresh=True,
    )  # fmt: skip
    (action,) = planned.plan.actions
    assert (action.action, action.drift) == (ActionKind.UPDATE, True)
    assert action.reason == (
        "drift: fleet `cloud` was deleted outside Dockyard (the refresh of its stack "
        "`main-fleet-cloud` shows every resource gone: `cloud-0`, `cloud-1`), will restore: "
        "create it again at the spec in Git"
    )
    assert action.preview is not None and action.preview.per_hour == 0.526  # 1 x g4dn.xlarge


async def test_an_unchanged_stack_is_no_drift() -> None:
    observed = live(deployed(CLOUD, status="active"))
    planned = await plan_commit(
        state(CLOUD), POLICY, observed, base="c1", previewer=Previewer({"pulumi": CloudDouble()}),
        refresh=True,
    )  # fmt: skip
    assert [(a.action, a.drift) for a in planned.plan.actions] == [(ActionKind.NOOP, False)]


async def test_without_a_previewer_the_plan_says_what_it_did_not_check() -> None:
    planned = await plan_commit(state(CLOUD), POLICY, live(), base=None, previewer=None)
    assert planned.plan.unchecked == OFFLINE_UNCHECKED
    assert planned.plan.actions[0].action is ActionKind.CREATE and not planned.failures


async def test_an_unsupported_backend_is_blocked_with_its_fix() -> None:
    odd = resource("type: fleet\nname: odd\nbackends: [lambda]\nnodes: 1\n")
    planned = await plan_commit(
        state(odd), POLICY, live(), base=None, previewer=Previewer({"pulumi": CloudDouble()})
    )
    (action,) = planned.plan.actions
    assert action.action is ActionKind.BLOCKED
    assert action.reason == (
        "blocked: backend lambda is not supported by Dockyard: "
        "use aws, gcp, an SSH fleet (ssh_config) or the local fleet"
    )


async def test_a_cloud_without_credentials_on_this_host_is_blocked_with_the_fix() -> None:
    def credentials(backend: str) -> str | None:
        return f"no {backend} credentials: set them" if backend == "aws" else None

    previewer = Previewer({"pulumi": CloudDouble()}, credentials=credentials)
    planned = await plan_commit(state(CLOUD), POLICY, live(), base=None, previewer=previewer)
    (action,) = planned.plan.actions
    assert (action.action, action.reason) == (
        ActionKind.BLOCKED,
        "blocked: no aws credentials: set them",
    )
    assert action.preview is not None and action.preview.error == "no aws credentials: set them"
