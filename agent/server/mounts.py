"""Which host paths a job may mount: only below the operator's volume roots, never
Dockyard's data or the Docker socket.

A job's `volumes` (instance volumes `/host/path:/path`, and the local backend's volume
directories) become bind mounts. Whoever writes a config must get no more than a job's
rights on the host, so a host path is refused unless, resolved (`os.path.realpath`: a
symlink counts where it points), it lies

- inside a directory meant for volumes (`volume_dirs`: the agent's `--volume-dir`, the
  local backend's `<server data dir>/volumes`), or
- inside one of the roots the operator allows for data disks (`allowed_roots`: the
  agent's `--volume-root`, env `DOCKYARD_AGENT_VOLUME_ROOTS`; default
  `DEFAULT_VOLUME_ROOTS`), and neither inside nor above a protected directory (the data
  dirs, where the admin token, the database, the secrets key and other jobs' specs live,
  and the Docker engine's socket, `DOCKER_SOCKETS`, which is root on the host).

So `/`, `/etc`, `/root`, `/home`, `/proc`, `/sys`, `/dev` and the socket are refused
unless an operator names them as roots, and a data dir even then. `volume_problem` is the
check; it reads the filesystem only to resolve links. The Docker executor calls it when a
job is submitted (`check`) and again right before the container is created, then hands the
engine the resolved path (`resolved_volume`), so a link planted under an allowed root
after the submit is seen. What remains is the window between that second check and the
engine's mount, in which a writer of a directory on the path could swap a component for a
link (docs/security.md, "Jobs and the host"). `processrules.process_job_problem` applies
the same check to process jobs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

# The Docker engine's socket: a container that mounts it is root on the host.
DOCKER_SOCKETS = (Path("/run/docker.sock"), Path("/var/run/docker.sock"))

# Where data disks are usually mounted: the agent's `--volume-root` default.
DEFAULT_VOLUME_ROOTS = (Path("/mnt"), Path("/data"), Path("/srv"), Path("/scratch"))

VOLUME_ROOTS_SETTING = (
    "the agent's --volume-root (env DOCKYARD_AGENT_VOLUME_ROOTS; for the local fleet the "
    "server's DOCKYARD_LOCAL_VOLUME_ROOTS)"
)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def resolved_volume(host_path: str) -> str:
    """The path the engine is given for `host_path`: its links resolved (as checked)."""
    return str(_real(host_path))


def parse_roots(text: str) -> tuple[Path, ...]:
    """`DOCKYARD_AGENT_VOLUME_ROOTS`'s value: colon-separated absolute paths."""
    roots = tuple(Path(part) for part in text.split(":") if part.strip())
    relative = [str(root) for root in roots if not root.is_absolute()]
    if relative:
        raise ValueError(f"volume roots must be absolute paths, not {', '.join(relative)}")
    return roots


def volume_problem(
    host_path: str,
    allowed_roots: Sequence[Path],
    protected: Sequence[Path],
    volume_dirs: Sequence[Path] = (),
) -> str | None:
    """Why `host_path` may not be mounted into a job, or None when it may."""
    if not os.path.isabs(host_path):
        return f"volume {host_path}: an instance volume's host path must be absolute"
    resolved = _real(host_path)
    shown = host_path if str(resolved) == host_path else f"{host_path} (-> {resolved})"
    if any(_inside(resolved, _real(v)) for v in volume_dirs):
        return None
    if not any(_inside(resolved, _real(root)) for root in allowed_roots):
        where = ", ".join(str(root) for root in allowed_roots) or "none"
        return (
            f"volume {shown}: a job may mount host paths only below the volume roots this "
            f"host allows ({where}); use a directory there, or have the operator add a "
            f"root with {VOLUME_ROOTS_SETTING}"
        )
    for root in protected:
        real = _real(root)
        if _inside(resolved, real) or _inside(real, resolved):
            return (
                f"volume {shown}: it holds {real} (Dockyard's data or the Docker "
                "engine's socket), which no job may mount; mount another directory"
            )
    return None
