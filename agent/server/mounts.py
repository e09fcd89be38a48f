"""Which host paths a Docker job may bind-mount: never the agent's or the server's data.

A job's `volumes` (instance volumes `/host/path:/path`, and the local backend's volume
directories) become bind mounts. A config writer must not mount the data dirs, where the
admin token, the database, the secrets key and other jobs' specs live, nor a directory
above them (`/`, `/root`, …), which holds them too; nor the Docker engine's socket
(`DOCKER_SOCKETS`), which is root on the host. `mount_problem` is the pure check:
the host path, resolved, may be neither inside a protected directory nor above one,
unless it is inside a directory meant for volumes (the server's `<data-dir>/volumes`).
The Docker executor calls it for each volume when a job is submitted.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

# The Docker engine's socket: a container that mounts it is root on the host.
DOCKER_SOCKETS = (Path("/run/docker.sock"), Path("/var/run/docker.sock"))


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def mount_problem(
    host_path: str, protected: Sequence[Path], volume_dirs: Sequence[Path] = ()
) -> str | None:
    """Why `host_path` may not be bind-mounted into a job, or None when it may."""
    resolved = Path(os.path.realpath(host_path))
    if any(_inside(resolved, Path(os.path.realpath(v))) for v in volume_dirs):
        return None
    for root in protected:
        real = Path(os.path.realpath(root))
        if _inside(resolved, real) or _inside(real, resolved):
            return (
                f"volume {host_path}: it holds {real} (Dockyard's data or the Docker "
                "engine's socket), which no job may mount; mount another directory"
            )
    return None
