"""Engine events → `StackStep`s: what the plan shows under a cloud resource's action.

Per-resource steps arrive only through `on_event`: `resource_pre_event.metadata` (a
`StepEventMetadata`) before each step and `res_outputs_event.metadata` after it; a
refresh learns what drifted only after reading the resource, so both are merged.
`StepCollector` keeps one step per URN, skips the root stack and provider resources,
folds the replacement ops (`replace`, `create-replacement`, `delete-replaced`) into one
`replace` step, and reads a `refresh` op as drift: gone → `delete`, changed keys →
`update`.
"""

from __future__ import annotations

import threading
from typing import Any

from stacks.protocol import StackPlan, StackStep, StepOp

_OPS = {
    "same": StepOp.SAME,
    "create": StepOp.CREATE,
    "update": StepOp.UPDATE,
    "delete": StepOp.DELETE,
    "replace": StepOp.REPLACE,
    "create-replacement": StepOp.REPLACE,
    "delete-replaced": StepOp.REPLACE,
    "import": StepOp.CREATE,
    "import-replacement": StepOp.REPLACE,
}
_RANK = {StepOp.SAME: 0, StepOp.UPDATE: 1, StepOp.CREATE: 2, StepOp.DELETE: 2, StepOp.REPLACE: 3}


def _value(op: Any) -> str:
    return str(getattr(op, "value", op))


def _is_internal(type_: str) -> bool:
    return type_ == "pulumi:pulumi:Stack" or type_.startswith("pulumi:providers:")


def to_step(metadata: Any) -> StackStep | None:
    """One `StepEventMetadata` → a step, or None for internal resources and reads."""
    type_ = str(metadata.type or "")
    if _is_internal(type_):
        return None
    op_name = _value(metadata.op)
    diffs = tuple(sorted(metadata.diffs or ()))
    if op_name == "refresh":
        op = StepOp.DELETE if metadata.new is None else StepOp.UPDATE if diffs else StepOp.SAME
    elif op_name in _OPS:
        op = _OPS[op_name]
    else:
        return None
    name = str(metadata.urn).rsplit("::", 1)[-1]
    keys = tuple(sorted(metadata.keys or ())) if op is StepOp.REPLACE else ()
    return StackStep(op, name, type_, diffs, keys)


def _merge(old: StackStep, new: StackStep) -> StackStep:
    """Two events for one resource (e.g. create-replacement, then delete-replaced)."""
    op = new.op if _RANK[new.op] >= _RANK[old.op] else old.op
    diffs = tuple(sorted(set(old.diffs) | set(new.diffs)))
    keys = tuple(sorted(set(old.replace_keys) | set(new.replace_keys)))
    return StackStep(op, new.name, new.type, diffs, keys if op is StepOp.REPLACE else ())


class StepCollector:
    """The `on_event` callback of one operation; thread-safe (events come from a thread)."""

    def __init__(self) -> None:
        self._steps: dict[tuple[str, str], StackStep] = {}
        self._guard = threading.Lock()

    def __call__(self, event: Any) -> None:
        found = getattr(event, "resource_pre_event", None) or getattr(
            event, "res_outputs_event", None
        )
        if found is None:
            return
        step = to_step(found.metadata)
        if step is None:
            return
        key = (step.type, step.name)
        with self._guard:
            old = self._steps.get(key)
            self._steps[key] = step if old is None else _merge(old, step)

    def plan(self, stack: str) -> StackPlan:
        """The collected steps (counts computed from them, without internal resources)."""
        with self._guard:
            steps = tuple(sorted(self._steps.values(), key=lambda s: (s.type, s.name)))
        counts: dict[str, int] = {}
        for step in steps:
            counts[step.op.value] = counts.get(step.op.value, 0) + 1
        return StackPlan(stack, steps, counts)
