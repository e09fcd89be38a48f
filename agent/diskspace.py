"""Free disk space checks: is any watched filesystem below its threshold?

The agent watches its data dir and Docker's root dir: below `min_free` it refuses new jobs
(`no_capacity`, with the reason) and its healthcheck says so. The server watches its data
dir the same way: below the threshold it stops copying job logs (the agent keeps them; they
are copied once space returns) and `/healthcheck` and `/metrics` report it. Each `check()`
asks the kernel again (`statvfs`, microseconds), so recovery needs no restart.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

Usage = Callable[[Path], int]
"""Free bytes of the filesystem holding a path (`shutil.disk_usage(path).free`)."""

DEFAULT_MIN_FREE = 1024**3


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


@dataclass(frozen=True, slots=True)
class DiskState:
    """Free bytes per watched name, and the reason new work is refused (empty: none)."""

    free: Mapping[str, int]
    min_free: int
    problem: str = ""

    @property
    def low(self) -> bool:
        return bool(self.problem)


@dataclass(frozen=True)
class DiskWatch:
    """Watches `paths` (name → directory) against `min_free` bytes."""

    paths: Mapping[str, Path]
    min_free: int = DEFAULT_MIN_FREE
    usage: Usage = free_bytes

    def check(self) -> DiskState:
        free: dict[str, int] = {}
        short: list[str] = []
        for name, path in self.paths.items():
            try:
                free[name] = self.usage(path)
            except OSError:  # not there (yet): nothing to measure
                continue
            if free[name] < self.min_free:
                short.append(f"{name} {path} has {_mib(free[name])} free")
        problem = ""
        if short:
            problem = (
                f"disk almost full: {', '.join(short)} (below {_mib(self.min_free)}); "
                "free some space: new work waits until then"
            )
        return DiskState(free, self.min_free, problem)


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def docker_root(environ: Mapping[str, str] | None = None) -> Path | None:
    """Docker's root dir when it is the usual local one and readable, else None."""
    env = os.environ if environ is None else environ
    root = Path(env.get("DOCKYARD_DOCKER_ROOT", "/var/lib/docker"))
    return root if root.is_dir() else None
