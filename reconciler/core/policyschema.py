"""The JSON Schema of `.dockyard.yml` (the repo policy), for editors and CI (pure).

Built from the `RepoPolicy` model (`reconciler.core.policy`), so it says what the parser
accepts: unknown keys are refused everywhere, and a duration (`max_duration`,
`fetch_interval`, …) may be seconds or a string like `30s`, `5m`, `24h` — the model turns
those into seconds before checking them, which a plain model schema would not show.
`dockyard schema --write` writes it to `schemas/json/dockyard.json` next to the configs'
schemas (docs/policies.md, docs/configuration.md).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, BeforeValidator

from reconciler.core.policy import RepoPolicy, _to_seconds

POLICY_SCHEMA_NAME = "dockyard"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
DURATION_PATTERN = r"^\s*\d+\s*[smhdw]?\s*$"


def policy_schema() -> dict[str, Any]:
    """The JSON Schema of a `.dockyard.yml` file."""
    schema = RepoPolicy.model_json_schema(mode="validation")
    _allow_durations(RepoPolicy, schema, schema.get("$defs", {}))
    return {
        "$schema": DIALECT,
        **schema,
        "title": "Dockyard repo policy (.dockyard.yml)",
        "description": "The optional `.dockyard.yml` at the root of a config repo: project, "
        "paths, pruning, default fleet, fetch interval and `policy:` (limits, budget, "
        "approvers).",
    }


def _allow_durations(
    model: type[BaseModel], node: dict[str, Any], defs: dict[str, Any], depth: int = 0
) -> None:
    """Let each duration field of `model` (and of the models it holds) take a string."""
    properties = node.get("properties", {})
    for name, info in model.model_fields.items():
        if name not in properties or depth > 5:
            continue
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel) and kind.__name__ in defs:
            _allow_durations(kind, defs[kind.__name__], defs, depth + 1)
        elif any(_is_duration(m) for m in info.metadata):
            properties[name] = _or_duration(properties[name])


def _is_duration(meta: object) -> bool:
    return isinstance(meta, BeforeValidator) and meta.func is _to_seconds


def _or_duration(prop: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in prop.items() if k in ("default", "title", "description")}
    renamed = {"ge": "minimum", "le": "maximum"}  # constraints after a validator
    value = {renamed.get(k, k): v for k, v in prop.items() if k not in kept}
    text = {"type": "string", "pattern": DURATION_PATTERN}
    choices = value.get("anyOf", [value])
    return {**kept, "anyOf": [*choices, text]}
