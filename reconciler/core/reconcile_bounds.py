"""How much of a reconcile is stored and answered: plans, outcomes and errors are bounded
in bytes (pure, no I/O).

A commit with 20,000 invalid configs plans 20,000 errors; stored whole in its reconcile
row (and the whole row sent by every `reconciles/list`) that is megabytes per pass. So:

- `bounded_plan`: a plan whose JSON passes `PLAN_BYTES` is stored summarised — its
  commit and base, its `summary` counts, the first `KEPT_ITEMS` errors, warnings and
  actions, and `summarised` saying how many of each there were and how big it was;
- `bounded_outcome`: the outcome's per-action list keeps its first `OUTCOME_ACTIONS`
  entries (`actions_omitted` counts the rest);
- `bounded_error`: the row's error line is at most `ERROR_CHARS` characters;
- `within_budget`: a list answer carries whole plans and outcomes up to `LIST_BYTES`,
  then each further row's plan and outcome as their short form (`brief_plan`,
  `brief_outcome`), so a `reconciles/list` of up to 1,000 rows stays a few MiB.

Called by the reconcile pass (`engine.reconciling`, before it writes the row) and the
reconciles read model (`adapters.db.readmodels.project`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

PLAN_BYTES = 64 * 1024
"""The most bytes of plan JSON stored in a reconcile row; larger plans are summarised."""
KEPT_ITEMS = 20
"""Errors, warnings and actions a summarised plan keeps (the first ones, in plan order)."""
OUTCOME_ACTIONS = 200
"""Per-action results an outcome keeps."""
ERROR_CHARS = 4000
"""The longest error line stored on a reconcile row."""
LIST_BYTES = 1024 * 1024
"""Plan and outcome bytes a list answer carries whole before it shortens the rest."""
BRIEF_ITEMS = 3
_MESSAGE_CHARS = 500


def json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


def bounded_plan(plan: Mapping[str, Any]) -> dict[str, Any]:
    """`plan` itself when its JSON is at most `PLAN_BYTES`, else its summary."""
    size = json_size(plan)
    if size <= PLAN_BYTES:
        return dict(plan)
    return _summary(plan, size, KEPT_ITEMS)


def brief_plan(plan: Any) -> Any:
    """The short form of a stored plan (counts and the first `BRIEF_ITEMS` errors)."""
    if not isinstance(plan, Mapping):
        return plan
    size = plan.get("summarised", {}).get("bytes") if _summarised(plan) else json_size(plan)
    return _summary(plan, int(size or 0), BRIEF_ITEMS, actions=0)


def _summarised(plan: Mapping[str, Any]) -> bool:
    return isinstance(plan.get("summarised"), Mapping)


def _summary(
    plan: Mapping[str, Any], size: int, keep: int, *, actions: int | None = None
) -> dict[str, Any]:
    before = plan.get("summarised") if _summarised(plan) else None
    counts = {name: _count(plan, name, before) for name in ("errors", "warnings", "actions")}
    summary: dict[str, Any] = {
        "commit": plan.get("commit"),
        "base": plan.get("base"),
        "errors": [_short(e) for e in _items(plan, "errors")[:keep]],
        "actions": [_short(a) for a in _items(plan, "actions")[: keep if actions is None else 0]],
        "summary": plan.get("summary") if isinstance(plan.get("summary"), Mapping) else {},
        "summarised": counts | {"bytes": size, "limit": PLAN_BYTES, "kept": keep},
    }
    warnings = _items(plan, "warnings")[:keep]
    if warnings:
        summary["warnings"] = [_short(w) for w in warnings]
    return summary


def _items(plan: Mapping[str, Any], name: str) -> list[Any]:
    value = plan.get(name)
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []


def _count(plan: Mapping[str, Any], name: str, before: Any) -> int:
    if isinstance(before, Mapping) and isinstance(before.get(name), int):
        return int(before[name])
    return len(_items(plan, name))


def _short(item: Any) -> Any:
    """An error, warning or action with its long strings cut (a message can quote YAML)."""
    if isinstance(item, str):
        return _cut(item)
    if not isinstance(item, Mapping):
        return item
    return {k: _cut(v) if isinstance(v, str) else v for k, v in item.items() if k != "preview"}


def _cut(text: str, limit: int = _MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bounded_outcome(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """`outcome` with at most `OUTCOME_ACTIONS` per-action results and short strings."""
    bounded = dict(outcome)
    actions = list(outcome.get("actions") or ())
    if len(actions) > OUTCOME_ACTIONS:
        bounded["actions"] = actions[:OUTCOME_ACTIONS]
        bounded["actions_omitted"] = len(actions) - OUTCOME_ACTIONS
    bounded["actions"] = [_short(a) for a in bounded.get("actions") or ()]
    for name in ("warnings", "blocked"):
        items = list(outcome.get(name) or ())
        if items:
            bounded[name] = [_short(i) for i in items[:OUTCOME_ACTIONS]]
    if isinstance(outcome.get("summary"), str):
        bounded["summary"] = _cut(outcome["summary"], ERROR_CHARS)
    return bounded


def brief_outcome(outcome: Any) -> Any:
    """The short form of a stored outcome: without its per-action lists."""
    if not isinstance(outcome, Mapping):
        return outcome
    brief = {k: v for k, v in outcome.items() if k not in ("actions", "warnings", "blocked")}
    for name in ("actions", "warnings", "blocked"):
        items = outcome.get(name)
        if isinstance(items, Sequence) and items:
            brief[f"{name}_omitted"] = len(items) + int(outcome.get(f"{name}_omitted") or 0)
    return brief


def bounded_error(error: str | None) -> str | None:
    return None if error is None else _cut(error, ERROR_CHARS)


def within_budget(plan: Any, outcome: Any, spent: int) -> tuple[Any, Any, int]:
    """A list row's plan and outcome, whole while `spent` (bytes so far) stays under
    `LIST_BYTES`, else their short forms; with the bytes spent after it."""
    size = json_size(plan) + json_size(outcome)
    if spent + size <= LIST_BYTES:
        return plan, outcome, spent + size
    plan, outcome = brief_plan(plan), brief_outcome(outcome)
    return plan, outcome, spent + json_size(plan) + json_size(outcome)
