"""Optional instance volumes (dstack's `optional: true`): skipped when they cannot attach.

dstack lets a run with `{instance_path, path, optional: true}` run where instance volumes
cannot be mounted, without that volume; a volume without `optional` is never dropped. The
job manager (`agent.server.jobs.JobManager.submit`) calls `skip_unattachable` with the
chosen executor's own check before it checks the job: each optional volume the executor
refuses (outside the allowed roots, a missing directory the sandbox cannot bind, a
process job without a sandbox) is taken out of the spec and named, with the reason, in
the job's notice (the server records it as an event of the job); the job then runs
without it. A non-optional volume still refuses the job with its reason. Only a volume
that the executor refuses on its own counts: a job refused for anything else is left
as it is, so that its own refusal is what the caller sees.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.protocol import JobSpec, VolumeMount


def skip_unattachable(
    spec: JobSpec, check: Callable[[JobSpec], str | None]
) -> tuple[JobSpec, list[str]]:
    """`spec` without the optional volumes `check` refuses, and a line for each skipped."""
    optional = [volume for volume in spec.volumes if volume.optional]
    if not optional or check(spec.model_copy(update={"volumes": []})) is not None:
        return spec, []
    skipped: list[tuple[VolumeMount, str]] = []
    for volume in optional:
        problem = check(spec.model_copy(update={"volumes": [volume]}))
        if problem is not None:
            skipped.append((volume, problem))
    if not skipped:
        return spec, []
    gone = {id(volume) for volume, _ in skipped}
    kept = [volume for volume in spec.volumes if id(volume) not in gone]
    lines = [
        f"optional volume {volume.host_path} (at {volume.container_path}) skipped, the job "
        f"runs without it: {problem}"
        for volume, problem in skipped
    ]
    return spec.model_copy(update={"volumes": kept}), lines
