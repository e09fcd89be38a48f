"""JSON Schema of every configuration type, and one combined schema, for editors and CI.

Pure: builds dicts from the models. `dockyard schema --write` writes them to
`schemas/json/<type>.json` and `schemas/json/dstack-config.json`; a test fails when the
committed files differ from what the models generate. Editors pick them up through a
`# yaml-language-server: $schema=...` line.

A field's docstring (the string under its annotation) is its `description`. The models do
not read them when they are defined (pydantic's `use_attribute_docstrings` parses each
model's source at import: a third of the cost of importing `schemas`, paid by every
`dockyard plan`); `DocumentedSchema` reads them here, only when a schema is made.
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from typing import Annotated, Any

from pydantic import BaseModel, Field, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

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
        schema = adapter.json_schema(mode="validation", schema_generator=DocumentedSchema)
        schema["title"] = "VolumeConfiguration"
    else:
        schema = model.model_json_schema(mode="validation", schema_generator=DocumentedSchema)
    return {"$schema": DIALECT, **schema}


class DocumentedSchema(GenerateJsonSchema):
    """pydantic's JSON Schema, with each field's docstring as its `description`.

    Gives what `use_attribute_docstrings=True` gave: an explicit `Field(description=...)`
    wins, and a field's docstring is the one under its annotation in the class that
    declares it (a subclass that declares the field again without one has none).
    """

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        cls = schema["cls"]
        properties = json_schema.get("properties", {})
        if issubclass(cls, BaseModel):
            for name, info in cls.model_fields.items():
                doc = None if info.description is not None else declared_doc(cls, name)
                if doc is not None and name in properties:
                    properties[name] = _described(properties[name], doc)
        return json_schema


def _described(field_schema: dict[str, Any], doc: str) -> dict[str, Any]:
    """`field_schema` with `description`, placed where pydantic puts it: before the `title`
    it adds last (the output is key-sorted, except the value of a property named `default`).
    """
    keys = list(field_schema)
    at = len(keys) - 1 if keys and keys[-1] == "title" else len(keys)
    items = list(field_schema.items())
    return dict([*items[:at], ("description", doc), *items[at:]])


def declared_doc(cls: type, name: str) -> str | None:
    """The docstring of field `name` in the nearest class of `cls`'s MRO that declares it."""
    for klass in cls.__mro__:
        if name in vars(klass).get("__annotations__", {}):
            return field_docstrings(klass).get(name)
    return None


def field_docstrings(cls: type) -> dict[str, str]:
    """Field name -> the string literal right under its annotation in `cls`'s own body."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (e.g. frozen): no descriptions
        return {}
    tree = ast.parse(source).body[0]
    if not isinstance(tree, ast.ClassDef):
        return {}
    docs: dict[str, str] = {}
    for node, after in zip(tree.body, tree.body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


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
