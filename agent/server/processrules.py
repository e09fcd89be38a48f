"""What a process job (no container) may not ask for: the process executor's refusals.

`ProcessExecutor.check` calls `process_job_problem` when a job is submitted. A process
job runs on the host, so what only a container can give is refused with a message rather
than silently dropped: `privileged: true` (and `docker: true`, which the server renders
as `privileged`) would be root on the host; instance volumes are bind-mounted only by a
sandbox that can (`mounts_volumes`), and then only from the roots the operator allows
(`mounts.volume_problem`, the same rule as Docker jobs). Pure: no I/O beyond resolving the
volumes' links.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent.protocol import JobSpec
from agent.server.mounts import volume_problem


def process_job_problem(
    spec: JobSpec,
    allowed_roots: Sequence[Path],
    protected: Sequence[Path],
    volume_dirs: Sequence[Path] = (),
    *,
    mounts_volumes: bool = False,
) -> str | None:
    """Why `spec` cannot run as a process job here, or None when it can."""
    if spec.privileged:
        return (
            "privileged: a process job runs on the host without a container, so "
            "`privileged: true` (or `docker: true`) cannot be given to it; set an `image:` "
            "on a host with Docker, or drop the option"
        )
    if spec.volumes and not mounts_volumes:
        paths = ", ".join(volume.host_path for volume in spec.volumes)
        return (
            f"volumes ({paths}): a process job here gets no host directory mounted (no "
            "sandbox of this host mounts volumes); set an `image:` on a host with Docker, "
            "or drop `volumes`"
        )
    for volume in spec.volumes:
        problem = volume_problem(volume.host_path, allowed_roots, protected, volume_dirs)
        if problem is not None:
            return problem
    return None
