"""Base classes every configuration model derives from, and the error that names a field.

`StrictModel` is frozen, rejects unknown keys and coerces YAML numbers to `str` where a
string is expected (`python: 3.10`-style shorthands), like dstack. `ConfigModel` adds the
stable `normalized()` form and `spec_hash()` the planner diffs and stores. Validators raise
`FieldConflict` to pin a cross-field error on one field so `parse_config` can point at it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema


class StrictModel(BaseModel):
    """Immutable, unknown keys are errors, numbers coerced to `str` where a string is due."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        coerce_numbers_to_str=True,
        use_enum_values=True,
        allow_inf_nan=False,  # `.inf`/`.nan` would not survive the JSON normalized form
        # Validators are built when a model first validates, not at import: planning 1,000
        # tasks builds the task's models only (`dockyard plan`'s start-up, bench/cli.py).
        defer_build=True,
        # Field docstrings become JSON Schema descriptions when a schema is made
        # (`schemas.jsonschema.DocumentedSchema`), not by `use_attribute_docstrings`,
        # which would parse every model's source at import.
    )
    # JSON types also accepted through a shorthand (`count: 2..8`), for the JSON Schema.
    json_shorthands: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        if cls.json_shorthands:
            target = handler.resolve_ref_schema(schema)
            as_object = dict(target)
            target.clear()
            target["anyOf"] = [as_object, *({"type": kind} for kind in cls.json_shorthands)]
        return schema


class FieldConflict(ValueError):  # noqa: N818 - pydantic only converts ValueError
    """A validation error that belongs to `field` (a path relative to the validated model)."""

    def __init__(self, field: str | tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.field: tuple[str | int, ...] = (field,) if isinstance(field, str) else field


class ConfigModel(StrictModel):
    """A top-level configuration (one file): carries its `type` and optional `name`."""

    type: str
    name: str | None = None

    def normalized(self) -> dict[str, Any]:
        """Stable, JSON-able dict with defaults filled and shorthands resolved.

        Field names are dstack's. Parsing this dict again gives an equal model.
        """
        return self.model_dump(mode="json")

    def spec_hash(self) -> str:
        """sha256 hex of the canonical JSON of `normalized()`."""
        canonical = json.dumps(
            self.normalized(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def fill_field(model: BaseModel, name: str, value: Any) -> None:
    """Set a field of a frozen model from inside its own after-validator.

    Only for defaults filled during validation: the instance is brand new and not shared
    yet. Nested models are replaced by copies, never mutated.
    """
    if getattr(model, name) != value:
        object.__setattr__(model, name, value)


class EntityReference(StrictModel):
    """`name`, `project/name` or `{project, name}`: a fleet or gateway, maybe imported."""

    project: str | None = None
    name: str = Field(min_length=1)


def to_entity_reference(value: Any) -> Any:
    """Before-validator: `project/name` and `name` strings become `{project, name}`."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)  # YAML numbers read as names, as dstack does
    if not isinstance(value, str):
        return value
    parts = value.split("/")
    if any(not part for part in parts) or len(parts) > 2:
        raise ValueError("invalid reference: use `<name>` or `<project>/<name>`")
    if len(parts) == 1:
        return {"project": None, "name": parts[0]}
    return {"project": parts[0], "name": parts[1]}
