"""Warnings about valid configurations: what dstack 0.22.5 accepts but treats specially.

`config_warnings(config, text, path)` returns `Problem`s for forms that parse and apply but
deserve a word to the author — a relative `working_dir` (legacy: resolved under
`LEGACY_REPO_DIR`, as dstack does) and `spot_policy` on an SSH fleet (accepted and
ignored). Warnings never fail anything: `dockyard validate` prints them, plans carry them
beside their actions. Pure; the YAML is re-read (to point at the line) only when there is
something to say, so a clean file costs one look at its model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

import yaml

from schemas.loading import decode, load_document
from schemas.problems import Problem

LEGACY_REPO_DIR = "/workflow"
"""Where dstack (and Dockyard) resolve a relative `working_dir`."""


def resolve_working_dir(working_dir: str | None) -> str | None:
    """An absolute (or `~`) `working_dir` as is; a relative one under `LEGACY_REPO_DIR`."""
    if is_legacy_working_dir(working_dir):
        return str(PurePosixPath(LEGACY_REPO_DIR) / str(working_dir))
    return working_dir


def is_legacy_working_dir(working_dir: str | None) -> bool:
    return bool(working_dir) and not (
        str(working_dir).startswith("~") or PurePosixPath(str(working_dir)).is_absolute()
    )


def config_warnings(config: Any, text: str | bytes, path: str) -> tuple[Problem, ...]:
    """The warnings of one valid configuration (`parse_config`'s result and its text)."""
    found: list[tuple[str, str, str]] = []
    working_dir = getattr(config, "working_dir", None)
    if is_legacy_working_dir(working_dir):
        resolved = resolve_working_dir(working_dir)
        found.append(
            (
                "working_dir",
                f"a relative working_dir is legacy (dstack before 0.20): it resolves to {resolved}",
                "use an absolute path",
            )
        )
    if getattr(config, "ssh_config", None) is not None and config.spot_policy is not None:
        found.append(
            (
                "spot_policy",
                "an SSH fleet has no spot instances: spot_policy is ignored",
                "remove spot_policy",
            )
        )
    if not found:
        return ()
    return tuple(_located(text, path, field, message, hint) for field, message, hint in found)


def _located(text: str | bytes, path: str, field: str, message: str, hint: str) -> Problem:
    source, _ = decode(text, path)
    node = _key_node(load_document(source, path).node, (field,))
    if node is None:
        return Problem(path, 1, 1, field, message, hint)
    return Problem(path, node.start_mark.line + 1, node.start_mark.column + 1, field, message, hint)


def _key_node(node: yaml.Node | None, keys: Sequence[str]) -> yaml.Node | None:
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            return None
        node = next((k for k, _ in node.value if getattr(k, "value", None) == key), None)
    return node
