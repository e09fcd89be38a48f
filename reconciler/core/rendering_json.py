"""The plan as JSON for programs (pure). The shape is documented in docs/plan.md:

`{"commit", "base", "errors": [{"path", "line", "column", "field", "message"}],
"actions": [{"action", "kind", "name", "project", "path", "reason",
"fields": [{"field", "old", "new"}]}], "summary": {"create": n, ...}}`; an action also has
`preview` (`{"stack", "steps": [{"op", "name", "type", "diffs"}], "counts": {"create": n,
…}, "per_hour", "price_basis", "error"}`) when it was previewed and `"drift": true` when it restores
what changed outside Git; a plan made without a server has `unchecked` (lines); a plan
whose valid files deserve a word has `warnings` (the shape of `errors`, never failing it).

The output is canonical: same plan, same bytes (spec values have their keys sorted).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.domain.plan import Action, Plan, PlanError, StackPreview


def to_json_dict(plan: Plan) -> dict[str, Any]:
    """The documented JSON object of a plan."""
    data: dict[str, Any] = {
        "commit": plan.commit,
        "base": plan.base,
        "errors": [error_to_dict(error) for error in plan.errors],
        "actions": [action_to_dict(action) for action in plan.actions],
        "summary": plan.summary,
    }
    if plan.unchecked:
        data["unchecked"] = list(plan.unchecked)
    if plan.warnings:
        data["warnings"] = [error_to_dict(warning) for warning in plan.warnings]
    return data


def error_to_dict(error: PlanError) -> dict[str, Any]:
    return {
        "path": error.path,
        "line": error.line,
        "column": error.column,
        "field": error.field,
        "message": error.message,
    }


def action_to_dict(action: Action) -> dict[str, Any]:
    data = _action_core(action)
    if action.preview is not None:
        data["preview"] = preview_to_dict(action.preview)
    if action.drift:
        data["drift"] = True
    if action.violations:
        data["violations"] = list(action.violations)
    if action.approved_by:
        data["approved_by"] = list(action.approved_by)
    return data


def preview_to_dict(preview: StackPreview) -> dict[str, Any]:
    return {
        "stack": preview.stack,
        "steps": [
            {"op": s.op, "name": s.name, "type": s.type, "diffs": list(s.diffs)}
            for s in preview.steps
        ],
        "counts": preview.counts,
        "per_hour": preview.per_hour,
        "price_basis": preview.price_basis,
        "error": preview.error,
    }


def _action_core(action: Action) -> dict[str, Any]:
    return {
        "action": action.action.value,
        "kind": action.kind.value,
        "name": action.name,
        "project": action.project,
        "path": action.path,
        "reason": action.reason,
        "fields": [
            {"field": c.field, "old": canonical(c.old), "new": canonical(c.new)}
            for c in action.fields
        ],
    }


def canonical(value: Any) -> Any:
    """A JSON-able copy of `value` with mapping keys sorted, so output is byte-stable."""
    if isinstance(value, Mapping):
        return {str(key): canonical(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [canonical(item) for item in value]
    return value
