"""JSON Schema of every configuration type, and one combined schema, for editors and CI.

Pure: builds dicts from the models. `dockyard schema --write` writes them to
`schemas/json/<type>.json` and `schemas/json/dstack-config.json`; a test fails when the
committed files differ from what the models generate. Editors pick them up through a
`# yaml-language-server: $schema=...` line.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from schemas.configs import CONFIG_MODELS
from schemas.volumes import VolumeConfiguration

DIALECT = "https://json-schema.org/draft/2020-12/schema"
COMBINED_NAME = "dstack-config"


def type_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of one configuration `type` (volumes: one of the backends)."""
    model = CONFIG_MODELS[kind]
    if model is None:
        adapter: TypeAdapter[Any] = TypeAdapter(
            Annotated[VolumeConfiguration, Field(discriminator="backend")]
        )
        schema = adapter.json_schema(mode="validation")
        schema["title"] = "VolumeConfiguration"
    else:
        schema = model.model_json_schema(mode="validation")
    return {"$schema": DIALECT, **schema}


def combined_schema(per_type: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One schema accepting any configuration, dispatched on `type`."""
    defs: dict[str, Any] = {}
    branches: list[dict[str, Any]] = []
    for kind, schema in per_type.items():
        body = {k: v for k, v in schema.items() if k not in ("$schema", "$defs")}
        defs.update(schema.get("$defs", {}))
        defs[body["title"]] = body
        branches.append(
            {
                "if": {"properties": {"type": {"const": kind}}, "required": ["type"]},
                "then": {"$ref": f"#/$defs/{body['title']}"},
            }
        )
    return {
        "$schema": DIALECT,
        "title": "dstack configuration (Dockyard)",
        "description": "A `.dstack.yml` file: dev-environment, task, service, fleet, volume, "
        "gateway or preset, chosen by `type`.",
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": list(per_type)}},
        "allOf": branches,
        "$defs": dict(sorted(defs.items())),
    }


def build_schemas() -> dict[str, str]:
    """File name -> JSON text for every schema file under `schemas/json/`."""
    per_type = {kind: type_schema(kind) for kind in CONFIG_MODELS}
    files = {f"{kind}.json": dump_schema(schema) for kind, schema in per_type.items()}
    files[f"{COMBINED_NAME}.json"] = dump_schema(combined_schema(per_type))
    return files


def dump_schema(schema: dict[str, Any]) -> str:
    """A schema as the committed files hold it."""
    return json.dumps(schema, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
