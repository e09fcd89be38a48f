"""A ``JobSpec`` as Docker container arguments, and the mapped ports back (pure, but for
``amd_device_groups``, which reads the device files' owners).

Commands are joined as dstack joins them, ``" && ".join(commands)``, and run by
``[shell, "-c", joined]`` under a small PID 1 (``CONTAINER_INIT``, the same shell) that
sends the job's output to its log file, bind-mounted into the container, and passes
SIGTERM on to the job's processes. The log holds exactly the bytes written, in order,
whether or not an agent runs meanwhile. With
an explicit ``entrypoint`` (``commands`` are then its arguments, unjoined), or with
neither, the image's program runs as it is and its output is copied from the engine's
logs (``dockerlogs.LogFollower``).

Network: ``host`` for a job that has the whole instance; ``bridge`` with each requested
port published on 127.0.0.1 (a fixed ``host_port``, or a free one the engine picks) when
the instance is shared. GPUs: for NVIDIA a device request on exactly the allocated
indices; for AMD the ROCm devices (`/dev/kfd`, `/dev/dri`) with the host groups that own
them (`gpu_groups`, numeric: the image may not know the names) and the allocated indices
in `HIP_VISIBLE_DEVICES`/`ROCR_VISIBLE_DEVICES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docker.types import DeviceRequest, LogConfig

from agent.protocol import GpuVendor, JobSpec, NetworkMode, PortMapping
from agent.server.executors.base import WAIT_FOR_CHILD
from agent.server.executors.proctable import MARKER_ENV

LABEL_JOB_ID = "dockyard.job-id"
LABEL_RUN_NAME = "dockyard.run-name"
LABEL_AGENT = "dockyard.agent"  # the agent (data dir) that runs it: strays are swept by it
PUBLISH_ADDRESS = "127.0.0.1"
CONTAINER_LOG = "/.dockyard/output.log"
# PID 1 of the container: output to the mounted log; SIGTERM (which the kernel does not
# deliver to a PID 1 without a handler) passed on to every process of the job; the
# job's exit status as the container's (the wait loop is the process wrapper's, see
# ``process.WRAPPER``). ``$0`` is the job's shell, ``$1`` its commands.
CONTAINER_INIT = (
    f"""exec >>{CONTAINER_LOG} 2>&1
trap 'trap "" HUP INT TERM; kill -TERM 0 2>/dev/null' HUP INT TERM
"$0" -c "$1" </dev/null &
"""
    + WAIT_FOR_CHILD
    + 'exit "$status"\n'
)
# ``local`` keeps bytes as written; the engine keeps up to 400 MB while the agent is away
AMD_DEVICES = ("/dev/kfd", "/dev/dri")  # ROCm's compute and render devices
LOG_OPTIONS = {"max-size": "100m", "max-file": "4"}


def container_name(job_id: str) -> str:
    return f"dockyard-{job_id}"


def is_logging_to_file(spec: JobSpec) -> bool:
    """True when the job's shell writes its output to the bind-mounted log file."""
    return spec.entrypoint is None and bool(spec.commands)


def to_container_kwargs(
    spec: JobSpec, log_path: str, gpu_groups: Sequence[int] = (), agent_tag: str = ""
) -> dict[str, Any]:
    """Keyword arguments of ``docker.DockerClient.containers.create`` for ``spec``."""
    labels = {**spec.labels, LABEL_JOB_ID: spec.id, LABEL_RUN_NAME: spec.run_name}
    if agent_tag:
        labels[LABEL_AGENT] = agent_tag
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "name": container_name(spec.id),
        "labels": labels,
        "environment": {**spec.env, MARKER_ENV: spec.id, "DOCKYARD_RUN_NAME": spec.run_name},
        "privileged": spec.privileged,
        "log_config": LogConfig(type="local", config=LOG_OPTIONS),
        "volumes": {
            volume.host_path: {
                "bind": volume.container_path,
                "mode": "ro" if volume.read_only else "rw",
            }
            for volume in spec.volumes
        },
    }
    if spec.entrypoint is not None:
        kwargs["entrypoint"] = spec.entrypoint
        kwargs["command"] = spec.commands or None
    elif is_logging_to_file(spec):
        kwargs["entrypoint"] = [spec.shell, "-c"]
        kwargs["command"] = [CONTAINER_INIT, spec.shell, " && ".join(spec.commands)]
        kwargs["volumes"][log_path] = {"bind": CONTAINER_LOG, "mode": "rw"}
    if spec.working_dir:
        kwargs["working_dir"] = spec.working_dir
    if spec.user:
        kwargs["user"] = spec.user
    if spec.network_mode == NetworkMode.HOST:
        kwargs["network_mode"] = "host"
    else:
        kwargs["ports"] = {
            f"{port.container_port}/tcp": (PUBLISH_ADDRESS, port.host_port)
            if port.host_port
            else (PUBLISH_ADDRESS,)
            for port in spec.ports
        }
    if spec.gpus:
        _add_gpus(kwargs, spec, gpu_groups)
    if spec.shm_size_mib:
        kwargs["shm_size"] = f"{spec.shm_size_mib}m"
    if spec.cpus:
        kwargs["nano_cpus"] = int(spec.cpus * 1e9)
    if spec.memory_mib:
        kwargs["mem_limit"] = f"{spec.memory_mib}m"
    return kwargs


def amd_device_groups(spec: JobSpec, dev: Path = Path("/dev")) -> list[int]:
    """The host groups owning ROCm's devices (`video`, `render`), for an AMD job: the
    container joins them by number. Reads the device files: called by the executor."""
    if not spec.gpus or spec.gpu_vendor != GpuVendor.AMD:
        return []
    paths = [dev / "kfd", *sorted((dev / "dri").glob("renderD*"))]
    return sorted({path.stat().st_gid for path in paths if path.exists()})


def _add_gpus(kwargs: dict[str, Any], spec: JobSpec, gpu_groups: Sequence[int]) -> None:
    if spec.gpu_vendor == GpuVendor.AMD:
        visible = ",".join(str(index) for index in spec.gpus)
        kwargs["environment"].update(HIP_VISIBLE_DEVICES=visible, ROCR_VISIBLE_DEVICES=visible)
        kwargs["devices"] = [f"{device}:{device}:rwm" for device in AMD_DEVICES]
        if gpu_groups:
            kwargs["group_add"] = [str(gid) for gid in sorted(set(gpu_groups))]
        return
    kwargs["device_requests"] = [
        DeviceRequest(
            driver="nvidia",
            device_ids=[str(index) for index in spec.gpus],
            capabilities=[["gpu"]],
        )
    ]


def to_port_mappings(spec: JobSpec, attrs: dict[str, Any]) -> list[PortMapping]:
    """The published ports of a started container (``attrs`` from inspect)."""
    if spec.network_mode == NetworkMode.HOST:
        return [
            PortMapping(container_port=p.container_port, host_port=p.container_port)
            for p in spec.ports
        ]
    published = (attrs.get("NetworkSettings") or {}).get("Ports") or {}
    mappings = []
    for port in spec.ports:
        bindings = published.get(f"{port.container_port}/tcp") or []
        host_ports = [int(b["HostPort"]) for b in bindings if b.get("HostPort")]
        if host_ports:
            mappings.append(
                PortMapping(container_port=port.container_port, host_port=host_ports[0])
            )
    return mappings


def to_pull_fraction(layers: dict[str, tuple[int, int]], event: dict[str, Any]) -> float | None:
    """Record one event of an image pull in ``layers``; the fraction of bytes done so far.

    Events carry ``id`` (a layer) and ``progressDetail {current, total}`` while a layer
    downloads or extracts; others (``Pulling fs layer``, ``Pull complete``) have no sizes.
    """
    detail = event.get("progressDetail") or {}
    if event.get("id") and detail.get("total"):
        layers[str(event["id"])] = (int(detail.get("current", 0)), int(detail["total"]))
    if not layers:
        return None
    done = sum(current for current, _ in layers.values())
    total = sum(size for _, size in layers.values())
    return min(done / total, 1.0)
