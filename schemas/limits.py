"""How much one configuration file may cost to read: `ConfigLimits` and the bounded pre-pass.

`parsing.parse_config` calls `measure` before it composes or builds anything: the file's
size, then one streaming pass over libyaml's events that counts every value the document
would have once YAML aliases (`*name`) are expanded and how deeply it nests. A file over
a limit is refused with a `Problem` that names the limit and how to raise it, before any
alias is expanded (a "billion laughs" file of 470 bytes stops after `max_values` events,
not after composing 10^9 values). The server passes its settings in
(`--config-max-bytes`, `--config-max-values`, `--config-max-depth`); the CLI reads the
same `DOCKYARD_CONFIG_MAX_*` variables (docs/security.md, "Limits").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from schemas.problems import Problem

_BaseLoader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_CONFIG_BYTES = 1024 * 1024
MAX_CONFIG_VALUES = 10_000
MAX_CONFIG_DEPTH = 64


@dataclass(frozen=True, slots=True)
class ConfigLimits:
    """The bounds one configuration file is read within (defaults: docs/security.md)."""

    max_bytes: int = MAX_CONFIG_BYTES
    max_values: int = MAX_CONFIG_VALUES
    max_depth: int = MAX_CONFIG_DEPTH


DEFAULT_LIMITS = ConfigLimits()


def _raise_hint(setting: str) -> str:
    return (
        f"raise it with DOCKYARD_CONFIG_MAX_{setting.upper()} "
        f"(`dockyard server --config-max-{setting}`)"
    )


def size_problem(size: int, path: str, limits: ConfigLimits) -> Problem | None:
    """A problem when the file has more bytes than `limits.max_bytes`."""
    if size <= limits.max_bytes:
        return None
    return Problem(
        path,
        1,
        1,
        "",
        f"the file is {size} bytes, over the limit of {limits.max_bytes} bytes "
        "for one configuration (config-max-bytes)",
        _raise_hint("bytes"),
    )


def measure(text: str, path: str, limits: ConfigLimits) -> Problem | None:
    """A problem when the document expands to too many values or nests too deeply.

    Streams libyaml's events once, stopping at the first limit passed; YAML errors are
    left to the loader (it reports them with their line and column).
    """
    loader = _BaseLoader(text)
    try:
        return _walk_events(loader, path, limits)
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()


def _walk_events(loader: Any, path: str, limits: ConfigLimits) -> Problem | None:
    values = 0
    sizes: dict[str, int] = {}  # anchor -> values it expands to
    open_nodes: list[tuple[str | None, int]] = []
    while loader.check_event():
        event = loader.get_event()
        if isinstance(event, yaml.AliasEvent):
            values += sizes.get(event.anchor or "", 1)
        elif isinstance(event, yaml.ScalarEvent):
            values += 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            values += 1
            open_nodes.append((event.anchor, values))
            if len(open_nodes) > limits.max_depth:
                return _depth_problem(event, path, limits)
        elif isinstance(event, yaml.CollectionEndEvent) and open_nodes:
            anchor, start = open_nodes.pop()
            if anchor is not None:
                sizes[anchor] = values - start + 1
        if values > limits.max_values:
            return _values_problem(event, path, limits)
    return None


def _values_problem(event: Any, path: str, limits: ConfigLimits) -> Problem:
    mark = event.start_mark
    return Problem(
        path,
        mark.line + 1,
        mark.column + 1,
        "",
        f"the document has more than {limits.max_values} values once YAML aliases (`*name`) "
        "are expanded (config-max-values)",
        "use fewer aliases or split the configuration; " + _raise_hint("values"),
    )


def _depth_problem(event: Any, path: str, limits: ConfigLimits) -> Problem:
    mark = event.start_mark
    return Problem(
        path,
        mark.line + 1,
        mark.column + 1,
        "",
        f"the document nests deeper than {limits.max_depth} levels (config-max-depth)",
        _raise_hint("depth"),
    )
