"""Which paths are dstack configurations: `*.dstack.yml`, `*.dstack.yaml`, `.dstack.yml`.

Pure predicates over path strings; the CLI (`dockyard validate DIR`) and the reconciler's
snapshot loader walk their trees and filter with these.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

_SUFFIXES = (".dstack.yml", ".dstack.yaml")


def is_config_path(path: str) -> bool:
    """True for `x.dstack.yml`, `x.dstack.yaml`, `.dstack.yml` and `.dstack.yaml`."""
    name = PurePosixPath(path.replace("\\", "/")).name
    return name in (".dstack.yml", ".dstack.yaml") or name.endswith(_SUFFIXES)


def select_config_paths(paths: Iterable[str]) -> list[str]:
    """The configuration paths among `paths`, sorted, without duplicates."""
    return sorted({path for path in paths if is_config_path(path)})
