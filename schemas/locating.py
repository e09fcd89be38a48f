"""Pydantic validation errors -> `Problem`s pointing at the YAML key or value at fault.

Called by `parsing.parse_config` only when validation failed (valid files never pay for
it). Walks the composed node tree along each error's `loc`, skipping pydantic's union and
tag labels, and turns messages into short sentences with hints ("did you mean
`commands`?") computed from the model's field names or the allowed values.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import ErrorDetails

from schemas.base import FieldConflict
from schemas.configs import CONFIG_MODELS
from schemas.problems import Problem, excerpt

Loc = tuple[str | int, ...]
# Keys a model renames before validation: error `loc` name -> names the user may have written.
_ALIASES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"groups": ("replicas",), "replicas": ("count",)}
)
_TYPE_LABELS = frozenset({"[key]", "bool", "int", "float", "str", "none", "list", "dict"})
_EXPECTED: Mapping[str, str] = MappingProxyType(
    {
        "GPUSpec": "a GPU spec like `A100:40GB:2`, `24GB..` or a mapping",
        "CPUSpec": "a CPU spec like `8`, `arm:8..` or a mapping",
        "MemoryRange": "a memory size or range like `24GB..`",
        "IntRange": "a count or range like `2..8`",
        "DiskSpec": "a disk size like `200GB..`",
        "PortMapping": "a port like `8080` or `80:8080`",
        "FleetNodesSpec": "a node count or range like `0..4`",
    }
)
_PATTERNS: Mapping[str, str] = MappingProxyType(
    {
        r"^[a-z][a-z0-9-]{1,40}$": (
            "use 2-41 lowercase letters, digits or `-`, starting with a letter"
        ),
        r"^[a-z0-9][a-z0-9-]{0,39}$": "use 1-40 lowercase letters, digits or `-`",
    }
)


def locate_errors(
    errors: Iterable[ErrorDetails], root: yaml.Node | None, model: type[BaseModel], path: str
) -> list[Problem]:
    """One `Problem` per distinct field, messages of union alternatives merged."""
    merged: dict[tuple[int, int, str], Problem] = {}
    for error in errors:
        problem = _to_problem(error, root, model, path)
        key = (problem.line, problem.column, problem.field)
        if key in merged:
            earlier = merged[key]
            if problem.message not in earlier.message:
                merged[key] = Problem(
                    path,
                    earlier.line,
                    earlier.column,
                    earlier.field,
                    f"{earlier.message}, or {problem.message}",
                    earlier.hint or problem.hint,
                )
        else:
            merged[key] = problem
    return sorted(merged.values(), key=lambda p: (p.line, p.column, p.field))


def _to_problem(
    error: ErrorDetails, root: yaml.Node | None, model: type[BaseModel], path: str
) -> Problem:
    loc: Loc = tuple(error["loc"])
    conflict = (error.get("ctx") or {}).get("error")
    if isinstance(conflict, FieldConflict):
        loc = loc + conflict.field
    kind = error["type"]
    node, field_path, rest = _walk(root, loc, want_key=kind in ("extra_forbidden", "invalid_key"))
    rest = [item for item in rest if not (isinstance(item, str) and _is_label(item))]
    if rest and (kind == "missing" or not isinstance(node, yaml.ScalarNode)):
        # The key is absent from the YAML (missing, or a conflict with a defaulted field).
        field_path, rest = [*field_path, *rest], rest[-1:] if kind == "missing" else []
    field = _format_field(field_path)
    message, hint = _message(error, rest, model, field_path)
    line, column = (1, 1)
    if node is not None:
        line, column = node.start_mark.line + 1, node.start_mark.column + 1
    return Problem(path, line, column, field, message, hint)


def _walk(
    root: yaml.Node | None, loc: Loc, *, want_key: bool
) -> tuple[yaml.Node | None, list[str | int], list[str | int]]:
    """Follow `loc` in the node tree: (deepest node, path walked, loc items left over)."""
    node: yaml.Node | None = root
    walked: list[str | int] = []
    items = [item for item in loc if not (isinstance(item, str) and item.startswith("~"))]
    for index, item in enumerate(items):
        last = index == len(items) - 1
        key_error = not last and items[index + 1] == "[key]"  # the key itself is invalid
        found = _child(node, item, want_key=(want_key and last) or key_error)
        if found is None:
            if isinstance(item, str) and not last and _is_label(item):
                continue
            return node, walked, items[index:]
        node, name = found
        walked.append(name)
    return node, walked, []


def _is_label(item: str) -> bool:
    """Pydantic's names for union members and dict keys, as opposed to field names."""
    return item in _TYPE_LABELS or not re.fullmatch(r"[a-z_][a-z0-9_]*", item)


def _child(
    node: yaml.Node | None, item: str | int, *, want_key: bool
) -> tuple[yaml.Node, str | int] | None:
    if isinstance(node, yaml.MappingNode):
        item = item if isinstance(item, str) else str(item)  # a non-string key, e.g. `1:`
        for name in (item, *_ALIASES.get(item, ())):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == name:
                    return (key_node if want_key else value_node), name
        return None
    if (
        isinstance(node, yaml.SequenceNode)
        and isinstance(item, int)
        and 0 <= item < len(node.value)
    ):
        return node.value[item], item
    return None


def _format_field(parts: Sequence[str | int]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _message(
    error: ErrorDetails, rest: list[str | int], model: type[BaseModel], walked: list[str | int]
) -> tuple[str, str | None]:
    kind, msg = error["type"], error["msg"]
    if kind == "extra_forbidden":
        name = str(walked[-1]) if walked else "?"
        allowed = fields_at(model, [p for p in walked[:-1] if isinstance(p, str)])
        hint = _suggest(name, allowed)
        if hint is None and len(walked) == 1:
            hint = _owner_hint(name)
        return f"unknown field `{name}`", hint
    if kind == "missing":
        return f"missing required field `{rest[-1] if rest else '?'}`", None
    msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind in ("literal_error", "enum"):
        given = error.get("input")
        expected = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
        hint = _suggest(str(given), expected) if isinstance(given, str) else None
        return f"{_sentence(msg)} (got {excerpt(given)})", hint
    if kind in ("model_type", "model_attributes_type"):
        class_name = str((error.get("ctx") or {}).get("class_name", ""))
        wanted = _EXPECTED.get(class_name, "a mapping")
        return f"expected {wanted}, got {excerpt(error.get('input'))}", None
    if kind == "string_pattern_mismatch":
        pattern = str((error.get("ctx") or {}).get("pattern", ""))
        if pattern in _PATTERNS:
            return f"invalid name {excerpt(error.get('input'))}: {_PATTERNS[pattern]}", None
    prefix = f"{'.'.join(str(p) for p in rest)}: " if rest else ""
    return f"{prefix}{_sentence(msg)}", None


def _sentence(msg: str) -> str:
    """Lower-case pydantic's capitalised first word, but not an acronym (`GPU`)."""
    return msg[:1].lower() + msg[1:] if msg[1:2].islower() else msg


def _owner_hint(name: str) -> str | None:
    """`port` on a task: say which configuration types have that field."""
    owners = [
        kind
        for kind, model in CONFIG_MODELS.items()
        if model is not None and name in model.model_fields
    ]
    return f"`{name}` is a field of: {', '.join(owners)}" if owners else None


def _suggest(given: str, choices: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(given, list(choices), n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None


def fields_at(model: type[BaseModel], names: Sequence[str]) -> list[str]:
    """Field names of the model(s) reached from `model` along field `names`."""
    models: list[type[BaseModel]] = [model]
    for name in names:
        next_models: list[type[BaseModel]] = []
        for current in models:
            info = current.model_fields.get(name)
            if info is not None:
                next_models.extend(_models_in(info.annotation))
        models = next_models or models
    return sorted({field for current in models for field in current.model_fields})


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            found.extend(_models_in(arg))
    return found
