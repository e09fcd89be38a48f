"""The PR plan as JSON, and back: what `dockyard plan --server` prints and `pr comment` reads.

The object is the plan JSON of docs/plan.md (`commit`, `base`, `errors`, `actions`,
`summary`) with more keys, so it stays readable by anything that reads a plan:
- each action also has `rollout`, `forced_by`, `destroys_data` and `implicit` (and, as in
  every plan JSON, `preview` and `drift` where they apply; the plan `unchecked`);
- `cost` (when prices were computed): `{"total_delta": $/h, "actions": [{"kind", "name",
  "project", "new": {"per_hour", "offer", "jobs"} | null, "old": … | null, "delta",
  "unmatched"}]}`.

`read_report` accepts the plain plan JSON too (the extra keys default), so
`dockyard plan --base … --format json` can be posted as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.core.rendering_json import action_to_dict, to_json_dict
from reconciler.domain.issues import ConfigIssue
from reconciler.domain.kinds import Kind, ResourceKey
from reconciler.domain.plan import (
    Action,
    ActionKind,
    FieldChange,
    Plan,
    PreviewStep,
    Rollout,
    StackPreview,
)
from reconciler.engine.costing import ActionCost, PlanCost, Price
from reconciler.errors import UsageError
from reconciler.pr.reviewing import PlanReport


def report_to_json(report: PlanReport) -> dict[str, Any]:
    data = to_json_dict(report.plan)
    data["actions"] = [_action_json(action) for action in report.plan.actions]
    if report.cost is not None:
        data["cost"] = {
            "total_delta": report.cost.total_delta,
            "actions": [_cost_json(cost) for cost in report.cost.actions],
        }
    return data


def _action_json(action: Action) -> dict[str, Any]:
    return {
        **action_to_dict(action),
        "rollout": action.rollout.value if action.rollout else None,
        "forced_by": list(action.forced_by),
        "destroys_data": action.destroys_data,
        "implicit": action.implicit,
    }


def _price_json(price: Price | None) -> dict[str, Any] | None:
    if price is None:
        return None
    return {"per_hour": price.per_hour, "offer": price.offer, "jobs": price.jobs}


def _cost_json(cost: ActionCost) -> dict[str, Any]:
    return {
        "kind": cost.key.kind.value,
        "name": cost.key.name,
        "project": cost.key.project,
        "new": _price_json(cost.new),
        "old": _price_json(cost.old),
        "delta": round(cost.delta, 4),
        "unmatched": cost.unmatched,
    }


def read_report(data: Any, *, source: str = "the plan") -> PlanReport:
    """A `PlanReport` from plan JSON; `UsageError` naming `source` when it is not one."""
    try:
        if not isinstance(data, Mapping):
            raise TypeError("not a JSON object")
        plan = Plan(
            commit=str(data["commit"]),
            base=data.get("base"),
            errors=tuple(_issue(e) for e in data.get("errors") or ()),
            actions=tuple(_action(a) for a in data.get("actions") or ()),
            unchecked=tuple(str(line) for line in data.get("unchecked") or ()),
            warnings=tuple(_issue(w) for w in data.get("warnings") or ()),
        )
        cost = _cost(data["cost"]) if isinstance(data.get("cost"), Mapping) else None
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"{source} is not a Dockyard plan ({type(exc).__name__}: {exc}); "
            "make it with `dockyard plan --format json`"
        ) from None
    return PlanReport(plan, cost)


def _issue(data: Mapping[str, Any]) -> ConfigIssue:
    return ConfigIssue(
        str(data["path"]), data.get("line"), data.get("column"), data.get("field"),
        str(data["message"]),
    )  # fmt: skip


def _action(data: Mapping[str, Any]) -> Action:
    rollout = data.get("rollout")
    return Action(
        action=ActionKind(data["action"]),
        kind=Kind(data["kind"]),
        name=str(data["name"]),
        project=str(data.get("project") or "main"),
        path=data.get("path"),
        reason=str(data.get("reason") or ""),
        fields=tuple(
            FieldChange(str(f["field"]), f.get("old"), f.get("new"))
            for f in data.get("fields") or ()
        ),
        rollout=Rollout(rollout) if rollout else None,
        destroys_data=bool(data.get("destroys_data")),
        forced_by=tuple(str(f) for f in data.get("forced_by") or ()),
        implicit=bool(data.get("implicit")),
        preview=_preview(data.get("preview")),
        drift=bool(data.get("drift")),
        violations=tuple(str(v) for v in data.get("violations") or ()),
        approved_by=tuple(str(v) for v in data.get("approved_by") or ()),
    )


def _preview(data: Any) -> StackPreview | None:
    if not isinstance(data, Mapping):
        return None
    steps = tuple(
        PreviewStep(str(s["op"]), str(s["name"]), str(s.get("type") or ""),
                    tuple(str(d) for d in s.get("diffs") or ()))
        for s in data.get("steps") or ()
    )  # fmt: skip
    price = data.get("per_hour")
    error = data.get("error")
    basis = data.get("price_basis")
    return StackPreview(
        str(data.get("stack") or ""),
        steps,
        float(price) if price is not None else None,
        str(error) if error is not None else None,
        str(basis) if basis is not None else None,
    )


def _price(data: Any) -> Price | None:
    if not isinstance(data, Mapping):
        return None
    return Price(float(data["per_hour"]), str(data.get("offer") or ""), int(data.get("jobs", 1)))


def _cost(data: Mapping[str, Any]) -> PlanCost:
    return PlanCost(
        tuple(
            ActionCost(
                ResourceKey(str(c.get("project") or "main"), Kind(c["kind"]), str(c["name"])),
                _price(c.get("new")),
                _price(c.get("old")),
                bool(c.get("unmatched")),
            )
            for c in data.get("actions") or ()
        )
    )
