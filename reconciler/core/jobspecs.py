"""Pure rendering of a run's normalized spec into its jobs and the agent's job specs.

A run has jobs = replicas x nodes (services: replicas or replica groups; tasks: nodes or
node groups; dev environments: one). The runs worker calls `expand_jobs` to know which
jobs a deployment needs; the jobs worker calls `requirements_of` to place a job and
`render_agent_job` to build what it submits to the host agent. Specs are the dicts of
`schemas` models' `normalized()`; no I/O here.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.core.cloning import clone_commands
from reconciler.core.inactivity import inactivity_limit
from reconciler.core.scheduling import Requirements, place_key
from reconciler.core.uploads import repo_dir
from reconciler.errors import PermanentError
from schemas.caveats import resolve_working_dir
from schemas.requirements import Range, resources_of

_SECRET_RE = re.compile(r"\$\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
DEFAULT_STOP_DURATION = 300


@dataclass(frozen=True, slots=True)
class JobSlot:
    """One job of a deployment: which replica, which node, which group's settings."""

    replica_num: int
    job_num: int
    group_name: str | None
    nodes: int  # nodes of this job's group (multi-node tasks)
    spec: Mapping[str, Any]  # the run spec merged with the group's overrides


def _replica_count(value: Any) -> int:
    """Replicas a service starts with: the range's min, but at least one.

    A range that may scale to zero still starts with one replica, so the service answers
    right after a deploy; the autoscaler takes it down to `min` after `scale_down_delay`.
    """
    if isinstance(value, Mapping):
        return max(int(value.get("min") or 0), 1)
    if isinstance(value, int):
        return value
    return 1


def _merge_group(spec: Mapping[str, Any], group: Mapping[str, Any]) -> dict[str, Any]:
    merged = {k: v for k, v in spec.items() if k != "groups"}
    for key, value in group.items():
        if key in ("name", "nodes", "replicas", "count", "scaling", "router"):
            continue
        if value is not None:
            merged[key] = value
    return merged


def expand_jobs(spec: Mapping[str, Any], *, replicas: int | None = None) -> list[JobSlot]:
    """The jobs one deployment of the run needs, in (replica, job) order."""
    run_type = spec.get("type")
    groups = spec.get("groups") or []
    if run_type == "service":
        if groups:
            slots: list[JobSlot] = []
            replica = 0
            for group in groups:
                count = _replica_count(group.get("replicas", group.get("count")))
                for _ in range(count):
                    slots.append(
                        JobSlot(replica, 0, group.get("name"), 1, _merge_group(spec, group))
                    )
                    replica += 1
            return slots
        count = replicas if replicas is not None else _replica_count(spec.get("replicas"))
        return [JobSlot(r, 0, None, 1, spec) for r in range(count)]
    if run_type == "task" and groups:
        total = sum(int(g.get("nodes") or 1) for g in groups)
        slots = []
        job_num = 0
        for group in groups:
            for _ in range(int(group.get("nodes") or 1)):
                slots.append(
                    JobSlot(0, job_num, group.get("name"), total, _merge_group(spec, group))
                )
                job_num += 1
        return slots
    nodes = int(spec.get("nodes") or 1) if run_type == "task" else 1
    return [JobSlot(0, n, None, nodes, spec) for n in range(nodes)]


_DEFAULT_MEMORY = {"min": 8.0, "max": None}
_DEFAULT_DISK = {"size": {"min": 100.0, "max": None}}


def requirements_of(spec: Mapping[str, Any]) -> Requirements:
    """Placement requirements from a (group-merged) run spec's resources and profile.

    dstack's implicit minimums (`memory: 8GB..`, `disk: 100GB..`) size *new* cloud
    instances; the instances a job is placed on here already exist (this host, SSH hosts,
    fleets provisioned for their own `resources`), so only minimums the user wrote count:
    a laptop with 7.6 GB or a host with 80 GB free still runs a default task.
    """
    res = spec.get("resources") or {}
    parsed = resources_of(res)
    gpu = res.get("gpu")
    gpu_set = isinstance(gpu, Mapping)
    disk = res.get("disk")
    return Requirements(
        cpu=parsed.cpu or Range(2, None),
        cpu_arch=parsed.cpu_arch,
        memory_gb=(
            Range(None, None)
            if res.get("memory") == _DEFAULT_MEMORY
            else parsed.memory_gib or Range(8, None)
        ),
        disk_gb=parsed.disk_gib if isinstance(disk, Mapping) and disk != _DEFAULT_DISK else None,
        gpu_count=(parsed.gpu_count or Range(1, None)) if gpu_set else Range(0, None),
        gpu_names=parsed.gpu_names if gpu_set else (),
        gpu_vendor=parsed.gpu_vendor if gpu_set else None,
        gpu_memory_gb=parsed.gpu_memory_gib if gpu_set else None,
        spot_policy=spec.get("spot_policy") or "on-demand",
        max_price=spec.get("max_price"),
        fleets=tuple(_ref_name(f) for f in spec.get("fleets") or ()),
        instances=tuple(_instance_name(i) for i in spec.get("instances") or ()),
        host_ports=host_ports_of(spec),
    )


def place_key_of(spec: Mapping[str, Any], nodes: int) -> str:
    """`scheduling.place_key` of a job's (group-merged) spec: stored when it is submitted."""
    return place_key(requirements_of(spec), nodes)


def host_ports_of(spec: Mapping[str, Any]) -> frozenset[int]:
    """Ports a job binds on the host itself: a process's ports (containers get their own
    network namespace, with ports mapped when they share an instance)."""
    return frozenset() if spec.get("image") else frozenset(container_ports(spec))


def _ref_name(ref: Any) -> str:
    if isinstance(ref, Mapping):
        return str(ref.get("name"))
    return str(ref).rsplit("/", 1)[-1]


def _instance_name(ref: Any) -> str:
    if isinstance(ref, Mapping):
        return str(ref.get("name") or ref.get("instance") or ref.get("hostname"))
    return str(ref)


def env_of(spec: Mapping[str, Any]) -> dict[str, str]:
    """The run's `env` as a mapping, from the list (`K=V`) or the mapping form."""
    env = spec.get("env") or {}
    if isinstance(env, Mapping):
        return {str(k): "" if v is None else str(v) for k, v in env.items()}
    result: dict[str, str] = {}
    for item in env:
        key, _, value = str(item).partition("=")
        result[key] = value
    return result


def interpolate_secrets(value: str, secrets: Mapping[str, str]) -> str:
    """Replace `${{ secrets.NAME }}`; a missing secret is a permanent error naming it."""

    def _sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in secrets:
            raise PermanentError(f"secret {name!r} is not set: add it with `dockyard secret set`")
        return secrets[name]

    return _SECRET_RE.sub(_sub, value)


def shell_commands(spec: Mapping[str, Any]) -> list[str]:
    """The commands a job runs: dev environments run `init` then stay up."""
    if spec.get("type") == "dev-environment":
        return [*list(spec.get("init") or ()), "sleep infinity"]
    return [str(c) for c in spec.get("commands") or ()]


def join_commands(commands: Sequence[str]) -> str:
    """dstack joins commands with ` && ` into one shell script."""
    return " && ".join(commands)


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """Where the nodes of a multi-node task are, for the `DSTACK_*` environment."""

    node_ips: tuple[str, ...]
    gpus_per_node: int


def dstack_env(
    *, run_name: str, slot: JobSlot, cluster: ClusterInfo, working_dir: str
) -> dict[str, str]:
    """The `DSTACK_*` variables every job gets, as dstack sets them."""
    nodes = len(cluster.node_ips) or 1
    return {
        "DSTACK_RUN_NAME": run_name,
        "DSTACK_NODES_NUM": str(nodes),
        "DSTACK_NODE_RANK": str(slot.job_num),
        "DSTACK_MASTER_NODE_IP": cluster.node_ips[0] if cluster.node_ips else "127.0.0.1",
        "DSTACK_NODES_IPS": "\n".join(cluster.node_ips) or "127.0.0.1",
        "DSTACK_GPUS_PER_NODE": str(cluster.gpus_per_node),
        "DSTACK_GPUS_NUM": str(cluster.gpus_per_node * nodes),
        "DSTACK_MPI_HOSTFILE": f"{working_dir}/.dstack/mpi-hostfile",
        "DSTACK_WORKING_DIR": working_dir,
        "DSTACK_REPO_DIR": working_dir,
    }


def container_ports(spec: Mapping[str, Any]) -> list[int]:
    """The container ports a job exposes: the service `port` first, then `ports`."""
    ports: list[int] = []
    port = spec.get("port")
    if isinstance(port, Mapping):
        ports.append(int(port.get("container_port") or 0))
    elif isinstance(port, int):
        ports.append(port)
    for item in spec.get("ports") or ():
        value = item.get("container_port") if isinstance(item, Mapping) else item
        if value and int(value) not in ports:
            ports.append(int(value))
    return [p for p in ports if p]


def stop_duration_of(spec: Mapping[str, Any]) -> int:
    value = spec.get("stop_duration")
    if value == "off":
        return 0
    return int(value) if isinstance(value, int) else DEFAULT_STOP_DURATION


def render_agent_job(
    *,
    job_id: str,
    run_name: str,
    slot: JobSlot,
    gpus: Sequence[int],
    cluster: ClusterInfo,
    secrets: Mapping[str, str],
    executor: str,
    working_dir: str | None,
    labels: Mapping[str, str],
    archives: Sequence[Mapping[str, str]] = (),
    gpu_vendor: str = "nvidia",
    local_volumes: Mapping[str, str] = {},
) -> dict[str, Any]:
    """The body of the agent's `POST /jobs` for one job (see `agent.protocol.JobSpec`).

    `archives` (`{path, data}`) are the job's `repos`/`files`; `local_volumes` maps the
    names of the network volumes that are directories on this host to them (`agent_volumes`);
    `gpu_vendor` (the host's,
    `nvidia` or `amd`) says how the agent hands the `gpus` to the job. The paths in `DSTACK_*`
    go to `path_env`, which the agent resolves against the job's actual working dir (the
    image's, or the job's own directory, when the spec has none).
    """
    spec = slot.spec
    workdir = working_dir or resolve_working_dir(str(spec.get("working_dir") or "")) or ""
    env = {k: interpolate_secrets(v, secrets) for k, v in env_of(spec).items()}
    env.update(dstack_env(run_name=run_name, slot=slot, cluster=cluster, working_dir=workdir))
    base = workdir or "."
    path_env = {
        "DSTACK_WORKING_DIR": base,
        "DSTACK_REPO_DIR": repo_dir(spec, base),
        "DSTACK_MPI_HOSTFILE": posixpath.normpath(posixpath.join(base, ".dstack/mpi-hostfile")),
    }
    for name in path_env:
        env.pop(name, None)
    commands = [*clone_commands(spec), *shell_commands(spec)]
    entrypoint = spec.get("entrypoint")
    return {
        "id": job_id,
        "run_name": run_name,
        "executor": executor,
        "image": spec.get("image"),
        "commands": [join_commands(commands)] if commands else [],
        "entrypoint": shlex.split(entrypoint) if isinstance(entrypoint, str) else None,
        "shell": _shell(spec),
        "env": env,
        "working_dir": workdir or None,
        "ports": [{"container_port": p} for p in container_ports(spec)],
        "volumes": agent_volumes(spec, slot.job_num, local_volumes),
        "gpus": list(gpus),
        "shm_size_mib": _shm_mib(spec),
        "user": spec.get("user"),
        "privileged": bool(spec.get("privileged") or spec.get("docker")),
        "stop_duration": stop_duration_of(spec),
        "labels": dict(labels),
        "archives": [dict(archive) for archive in archives],
        "path_env": path_env,
        "watch_connections": inactivity_limit(spec) is not None,
        # Only when not the default: an agent of the same version started before this field
        # existed still takes every NVIDIA or CPU job.
        **({"gpu_vendor": gpu_vendor} if gpu_vendor != "nvidia" else {}),
    }


def volume_names(spec: Mapping[str, Any], job_num: int) -> list[str]:
    """The network volumes job `job_num` mounts (a list of names: one per node)."""
    names = []
    for volume in spec.get("volumes") or ():
        if isinstance(volume, Mapping) and volume.get("name"):
            name = volume["name"]
            listed = [name] if isinstance(name, str) else [str(n) for n in name]
            names.append(listed[job_num] if job_num < len(listed) else listed[-1])
    return names


def agent_volumes(
    spec: Mapping[str, Any], job_num: int = 0, local_volumes: Mapping[str, str] = {}
) -> list[dict[str, Any]]:
    """The spec's volumes as the agent's `VolumeMount`s (host dir -> path).

    Instance volumes as written: dstack's grammar has no read-only form (`/host:/path`, or
    `instance_path`/`path`), so none is read-only. A network volume (`name:/path`) is
    mounted when `local_volumes` has its directory on this host (a volume of the local
    engine, on the local fleet); else the job fails naming it: a job never runs without a
    volume it asked for, but for an instance volume marked `optional` (dstack's), which the
    agent skips where it cannot attach (`agent.server.optionalvolumes`).
    """
    mounts: list[dict[str, Any]] = []
    names = iter(volume_names(spec, job_num))
    for volume in spec.get("volumes") or ():
        if not isinstance(volume, Mapping):
            continue
        path = str(volume.get("path") or "")
        if volume.get("instance_path"):
            host = str(volume["instance_path"])
            optional = bool(volume.get("optional"))  # dstack's: may run without it
            mounts.append(
                {
                    "host_path": host,
                    "container_path": path,
                    "read_only": False,
                    "optional": optional,
                }
            )
            continue
        name = next(names)
        if name not in local_volumes:
            raise PermanentError(
                f"volumes: network volume {name!r} (at {path}) cannot be mounted on this "
                "host: only an active volume of the local engine mounts, on the local "
                "fleet; apply the volume first, or use an instance volume "
                "(`/host/dir:/path`) below a root the agent allows"
            )
        mounts.append(
            {"host_path": local_volumes[name], "container_path": path, "read_only": False}
        )
    return mounts


def _shell(spec: Mapping[str, Any]) -> str:
    shell = spec.get("shell")
    if shell in (None, "sh"):
        return "/bin/sh"
    if shell == "bash":
        return "/bin/bash"
    return str(shell)


def _shm_mib(spec: Mapping[str, Any]) -> int | None:
    shm = (spec.get("resources") or {}).get("shm_size")
    return int(float(shm) * 1024) if shm else None
