"""The plan as JSON for programs (pure). The shape is documented in docs/plan.md:

`{"commit", "base", "errors": [{"path", "line", "column", "field", "message"}],
"actions": [{"action", "kind", "name", "project", "path", "reason",
"fields": [{"field", "old", "new"}]}], "summary": {"create": n, ...}}`

The output is canonical: same plan, same bytes (spec values have their keys sorted).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reconciler.domain.plan import Action, Plan, PlanError


def to_json_dict(plan: Plan) -> dict[str, Any]:
    """The documented JSON object of a plan."""
    return {
        "commit": plan.commit,
        "base": plan.base,
        "errors": [error_to_dict(error) for error in plan.errors],
        "actions": [action_to_dict(action) for action in plan.actions],
        "summary": plan.summary,
    }


def error_to_dict(error: PlanError) -> dict[str, Any]:
    return {
        "path": error.path,
        "line": error.line,
        "column": error.column,
        "field": error.field,
        "message": error.message,
    }


def action_to_dict(action: Action) -> dict[str, Any]:
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


def render_json(plan: Plan) -> str:
    """The plan as indented JSON text, ending with a newline."""
    return json.dumps(to_json_dict(plan), indent=2, ensure_ascii=False, default=str) + "\n"
