"""Field-level differences between two normalized specs (pure).

Specs are JSON-able dicts (`schemas` `normalized()`). Mappings are compared key by key and
reported as dotted paths (`resources.gpu.count`); lists and scalars are compared whole.
A key missing on one side reads as `None`. The top-level `type` and `name` are identity,
not fields, and are never reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.domain.plan import FieldChange

IDENTITY_FIELDS = frozenset({"type", "name"})


def diff_specs(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[FieldChange, ...]:
    """Every changed field of `new` against `old`, sorted by field path."""
    changes: list[FieldChange] = []
    keys = (set(old) | set(new)) - IDENTITY_FIELDS
    for key in sorted(keys):
        _diff_value(str(key), old.get(key), new.get(key), changes)
    return tuple(changes)


def _diff_value(path: str, old: Any, new: Any, out: list[FieldChange]) -> None:
    if old == new:
        return
    if isinstance(old, Mapping) and isinstance(new, Mapping) and old and new:
        for key in sorted(set(old) | set(new), key=str):
            _diff_value(f"{path}.{key}", old.get(key), new.get(key), out)
        return
    out.append(FieldChange(field=path, old=old, new=new))


def top_field(field: str) -> str:
    """The top-level field of a dotted path: `resources.gpu.count` → `resources`."""
    return field.split(".", 1)[0]
