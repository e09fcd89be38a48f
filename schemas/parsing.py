"""`parse_config(text, path)`: one `.dstack.yml` document -> a frozen model or `ConfigError`.

The single entry point for reading user configurations (reconciler loading, CLI
`validate`/`apply`, the agent and stacks never parse YAML themselves). Fast path: load
YAML with libyaml, dispatch on `type`, validate; only when something is wrong are the
errors mapped back to lines and columns (`locating`). Never raises anything but
`ConfigError` for bad input. Every file is measured first (`limits`: size, values after
alias expansion, depth) so nothing is expanded past a bound, and at most
`MAX_PROBLEMS` problems are reported.
"""

from __future__ import annotations

import difflib
from typing import Any, cast

import yaml
from pydantic import ValidationError

from schemas.base import ConfigModel
from schemas.configs import CONFIG_MODELS, CONFIG_TYPES, AnyConfig
from schemas.limits import DEFAULT_LIMITS, ConfigLimits, measure, size_problem
from schemas.loading import Document, decode, load_document
from schemas.locating import locate_errors
from schemas.problems import ConfigError, Problem, excerpt
from schemas.volumes import VOLUME_MODELS

MAX_PROBLEMS = 50


def parse_config(text: str | bytes, path: str, limits: ConfigLimits = DEFAULT_LIMITS) -> AnyConfig:
    """Parse and validate one configuration file; raise `ConfigError` with every problem."""
    source = _bounded_source(text, path, limits)
    document = load_document(source, path)
    if document.problems and document.node is None:
        raise ConfigError(document.problems)
    model, dispatch_problem = select_model(document, path)
    if model is None:
        raise ConfigError([*document.problems, *filter(None, [dispatch_problem])])
    try:
        config = model.model_validate(document.data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        located = locate_errors(errors[:MAX_PROBLEMS], document.node, model, path)
        hidden = max(0, len(errors) - MAX_PROBLEMS)
        raise ConfigError(_capped(_in_order([*document.problems, *located]), hidden)) from None
    if document.problems:
        raise ConfigError(_capped(list(document.problems), 0))
    return cast(AnyConfig, config)


def _bounded_source(text: str | bytes, path: str, limits: ConfigLimits) -> str:
    """The decoded text, or `ConfigError` when it is over a limit (checked before loading)."""
    size = len(text) if isinstance(text, bytes) or text.isascii() else len(text.encode())
    too_big = size_problem(size, path, limits)
    if too_big is not None:
        raise ConfigError([too_big])
    source, problems = decode(text, path)
    if problems:
        raise ConfigError(problems)
    too_much = measure(source, path, limits)
    if too_much is not None:
        raise ConfigError([too_much])
    return source


def _capped(problems: list[Problem], hidden: int) -> list[Problem]:
    """At most `MAX_PROBLEMS`, plus one line saying how many more there were."""
    hidden += max(0, len(problems) - MAX_PROBLEMS)
    if not hidden:
        return problems
    shown = problems[:MAX_PROBLEMS]
    last = shown[-1]
    more = Problem(last.path, last.line, last.column, "", f"... and {hidden} more problems")
    return [*shown, more]


def parse_data(data: dict[str, Any], path: str = "<data>") -> AnyConfig:
    """Validate an already-loaded mapping (e.g. a stored `normalized()` spec)."""
    return parse_config(yaml.safe_dump(data, sort_keys=False), path)


def select_model(document: Document, path: str) -> tuple[type[ConfigModel] | None, Problem | None]:
    """The model for the document's `type` (and a volume's `backend`), or why there is none."""
    data, node = document.data, document.node
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        return None, _problem_at(node, path, "", f"the document is {what}", _TYPE_HINT)
    kind = data.get("type")
    if kind is None:
        return None, _problem_at(node, path, "type", "missing required field `type`", _TYPE_HINT)
    if not isinstance(kind, str) or kind not in CONFIG_MODELS:
        hint = _close(kind, CONFIG_TYPES) or _TYPE_HINT
        return None, _problem_at(
            _value(node, "type"), path, "type", f"unknown type {excerpt(kind)}", hint
        )
    model = CONFIG_MODELS[kind]
    if model is not None:
        return model, None
    backend = data.get("backend")
    if backend is None:
        return None, _problem_at(node, path, "backend", "missing required field `backend`", None)
    if not isinstance(backend, str) or backend not in VOLUME_MODELS:
        hint = _close(backend, VOLUME_MODELS) or "one of: " + ", ".join(VOLUME_MODELS)
        node_at = _value(node, "backend")
        return None, _problem_at(
            node_at, path, "backend", f"no volumes on {excerpt(backend)}", hint
        )
    return VOLUME_MODELS[backend], None


_TYPE_HINT = "set `type:` to one of " + ", ".join(CONFIG_TYPES)


def _close(given: Any, choices: Any) -> str | None:
    if not isinstance(given, str):
        return None
    close = difflib.get_close_matches(given, list(choices), n=1, cutoff=0.5)
    return f"did you mean `{close[0]}`?" if close else None


def _value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if getattr(key_node, "value", None) == key:
                return cast(yaml.Node, value_node)
    return node


def _problem_at(
    node: yaml.Node | None, path: str, field: str, message: str, hint: str | None
) -> Problem:
    if node is None:
        return Problem(path, 1, 1, field, message, hint)
    return Problem(path, node.start_mark.line + 1, node.start_mark.column + 1, field, message, hint)


def _in_order(problems: list[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: (p.line, p.column))


def peek_kind(
    text: str | bytes, limits: ConfigLimits = DEFAULT_LIMITS
) -> tuple[str | None, str | None]:
    """Best-effort `(type, name)` of a document, even an invalid one (for reports)."""
    try:
        source = _bounded_source(text, "", limits)
    except ConfigError:
        return None, None
    document = load_document(source, "")
    data = document.data
    if not isinstance(data, dict):
        return None, None
    kind, name = data.get("type"), data.get("name")
    return (
        kind if isinstance(kind, str) and kind in CONFIG_MODELS else None,
        name if isinstance(name, str) else None,
    )
