"""A cloud `Engine` double at the stacks seam (clouds are the one place a fake is allowed).

`up(resource)` returns `resource.nodes` instances (or the spec's `nodes.target`), indexed
like the Pulumi programs' (`<fleet>-<i>`); `where(i)` says where instance `i`'s agent
listens (default: nowhere reachable). Every `up` count is recorded in `ups`, and `size`
is what the stack holds now, so tests can check growth, shrinking and idempotence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stacks.programs.config import node_count
from stacks.protocol import (
    Availability,
    EngineName,
    StackOutputs,
    StackPlan,
    StackResource,
    StackStep,
    StepOp,
)

Where = Callable[[int], dict[str, Any]]


def unreachable(index: int) -> dict[str, Any]:
    return {"hostname": "127.0.0.1", "port": 1, "user": "root", "agent_port": 10998}


class CloudDouble:
    name: EngineName = "pulumi"

    def __init__(self, where: Where = unreachable) -> None:
        self.where = where
        self.ups: list[int] = []
        self.size: dict[str, int] = {}

    def available(self) -> Availability:
        return Availability(True)

    async def preview(self, resource: StackResource) -> StackPlan:
        return StackPlan(resource.stack_name)

    async def up(self, resource: StackResource) -> StackOutputs:
        nodes = node_count(resource.spec, resource.nodes)
        self.ups.append(nodes)
        self.size[resource.stack_name] = nodes
        instances = [
            {"name": f"{resource.name}-{i}", "backend": "aws", **self.where(i)}
            for i in range(nodes)
        ]
        return {"instances": instances}

    async def refresh(self, resource: StackResource) -> StackPlan:
        return StackPlan(resource.stack_name)

    async def preview_destroy(self, resource: StackResource) -> StackPlan:
        held = self.size.get(resource.stack_name, 0)
        steps = tuple(
            StackStep(StepOp.DELETE, f"{resource.name}-{i}", "aws:ec2/instance:Instance")
            for i in range(held)
        )
        return StackPlan(resource.stack_name, steps, {"delete": held} if held else {})

    async def destroy(self, resource: StackResource) -> None:
        self.size.pop(resource.stack_name, None)
