"""dstack 0.22.5's wire shapes of our runs, jobs, instances and plans (pure: dicts in, dicts out).

The REST API answers dstack's CLI and Python API (`dstack project add --url <dockyard>`)
with dstack's JSON where dstack has a model for it, and our own client reads the same
answers, so every shape here is a superset: dstack's fields plus ours (`slot`, `spec`,
`ssh_user`, `dockyard_backend`), which dstack's client ignores. Called by the web layer's
run and capacity queries and by its dstack routes; no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# dstack has no backend for this host or for SSH hosts; it calls SSH fleets `remote`.
_DSTACK_BACKENDS = frozenset({"aws", "gcp", "azure", "lambda", "runpod", "vastai", "kubernetes"})
DEFAULT_IMAGE = "dstackai/base:0.11-base-ubuntu22.04"
MIB_PER_GB = 1024


def strip_nulls(value: Any) -> Any:
    """`value` without the `null`s dstack's client dumps for every unset field."""
    if isinstance(value, Mapping):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def dstack_backend(backend: str | None) -> str:
    """The dstack `BackendType` a client can read: clouds as they are, the rest `remote`."""
    return backend if backend in _DSTACK_BACKENDS else "remote"


def _gpus(resources: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for gpu in resources.get("gpus") or []:
        if isinstance(gpu, Mapping):
            memory = gpu.get("memory_mib") or float(gpu.get("memory_gb") or 0) * MIB_PER_GB
            out.append(
                {
                    "name": str(gpu.get("name") or "gpu"),
                    "memory_mib": int(memory),
                    "vendor": str(gpu.get("vendor") or "nvidia"),
                }
            )
        else:
            out.append({"name": str(gpu), "memory_mib": 0, "vendor": "nvidia"})
    return out


def instance_type(name: str | None, resources: Mapping[str, Any] | None) -> dict[str, Any]:
    """dstack's `InstanceType {name, resources {cpus, memory_mib, gpus, spot, disk}}`."""
    res = resources or {}
    memory = res.get("memory_mib") or float(res.get("memory_gb") or 0) * MIB_PER_GB
    disk = res.get("disk_mib") or float(res.get("disk_gb") or 0) * MIB_PER_GB
    return {
        "name": name or "local",
        "resources": {
            "cpus": int(res.get("cpus") or 0),
            "memory_mib": int(memory),
            "gpus": _gpus(res),
            "spot": bool(res.get("spot", False)),
            "disk": {"size_mib": int(disk)},
        },
    }


def provisioning_data(instance: Mapping[str, Any]) -> dict[str, Any]:
    """dstack's `JobProvisioningData` of the instance a job runs on (plus our own fields)."""
    backend = instance.get("backend")
    return {
        "backend": dstack_backend(backend),
        "dockyard_backend": backend,
        "instance_type": instance_type(instance.get("instance_type"), instance.get("resources")),
        "instance_id": instance["instance_id"],
        "instance_name": instance.get("instance_name"),
        "hostname": instance.get("hostname"),
        "internal_ip": None,
        "region": instance.get("region") or "local",
        "price": float(instance.get("price") or 0.0),
        "username": instance.get("ssh_user") or "root",
        "ssh_user": instance.get("ssh_user"),
        "ssh_port": instance.get("ssh_port"),
        "dockerized": False,
        "resources": instance.get("resources"),
    }


def fleet_spec(stored: Any) -> dict[str, Any]:
    """dstack's `FleetSpec {configuration, profile}` around a stored fleet spec.

    The stored spec's own keys stay at the top level too, for our client."""
    spec = dict(stored) if isinstance(stored, Mapping) else {}
    configuration = spec.get("configuration", spec)
    return {
        **spec,
        "configuration": strip_nulls(configuration) if isinstance(configuration, Mapping) else {},
        "configuration_path": spec.get("configuration_path"),
        "profile": {},
        "autocreated": False,
    }


# dstack's statuses of volumes and gateways; ours beyond them (deleting) read as ready.
_CAPACITY_STATUSES = {
    "volume": ("submitted", "provisioning", "active", "failed"),
    "gateway": ("submitted", "provisioning", "running", "failed"),
}


def dstack_capacity_status(kind: str, status: str) -> str:
    known = _CAPACITY_STATUSES.get(kind, ())
    if status in known or not known:
        return status
    return "failed" if status in ("terminated",) else known[2]


def capacity_extras(
    configuration: Mapping[str, Any], outputs: Mapping[str, Any] | None, created_at: Any
) -> dict[str, Any]:
    """dstack's fields of a `Volume` / `Gateway` that our rows do not hold as such."""
    out = outputs or {}
    return {
        "user": "",
        "external": bool(configuration.get("volume_id")),
        "last_processed_at": created_at,
        "deleted": False,
        "volume_id": out.get("volume_id") or configuration.get("volume_id"),
        "default": bool(configuration.get("default", False)),
        "hostname": out.get("hostname") or out.get("ip_address"),
        "wildcard_domain": configuration.get("domain"),
        "backend": configuration.get("backend"),
        "region": configuration.get("region"),
    }


def _env(value: Any) -> dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    if isinstance(value, list):
        pairs = (str(item).partition("=") for item in value)
        return {k: v for k, _, v in pairs}
    return {}


def _commands(configuration: Mapping[str, Any]) -> list[str]:
    commands = configuration.get("commands")
    if isinstance(commands, list):
        return [str(c) for c in commands]
    init = configuration.get("init")
    return [str(c) for c in init] if isinstance(init, list) else []


def _ports(configuration: Mapping[str, Any]) -> list[dict[str, Any]]:
    apps = []
    for i, port in enumerate(configuration.get("ports") or []):
        if isinstance(port, Mapping):
            container, local = port.get("container_port"), port.get("local_port")
        elif isinstance(port, str) and ":" in port:
            local_text, _, container_text = port.partition(":")
            container, local = int(container_text), int(local_text) if local_text != "*" else None
        else:
            container, local = port, None
        if isinstance(container, int):
            apps.append({"port": container, "map_to_port": local, "app_name": f"app{i}"})
    return apps


def _service_port(configuration: Mapping[str, Any]) -> int | None:
    port = configuration.get("port")
    if isinstance(port, Mapping):
        port = port.get("container_port")
    return port if isinstance(port, int) else None


def job_spec(
    configuration: Mapping[str, Any],
    *,
    run_name: str,
    replica_num: int = 0,
    job_num: int = 0,
    jobs_per_replica: int = 1,
    stored: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """dstack's `JobSpec` of one job (and, for our client, the stored `slot` and `spec`)."""
    spec = (stored or {}).get("spec")
    source: Mapping[str, Any] = spec if isinstance(spec, Mapping) else configuration
    resources = configuration.get("resources")
    return {
        **(stored or {}),
        "replica_num": replica_num,
        "job_num": job_num,
        "job_name": f"{run_name}-{job_num}-{replica_num}",
        "jobs_per_replica": jobs_per_replica,
        "app_specs": _ports(configuration),
        "commands": _commands(source),
        "env": _env(source.get("env")),
        "image_name": str(source.get("image") or DEFAULT_IMAGE),
        "user": None,
        "privileged": bool(source.get("privileged", False)),
        "working_dir": source.get("working_dir"),
        "requirements": {"resources": dict(resources) if isinstance(resources, Mapping) else {}},
        "retry": None,
        "volumes": [],
        "service_port": _service_port(configuration),
    }


def offer(candidate: Mapping[str, Any]) -> dict[str, Any]:
    """dstack's `InstanceOfferWithAvailability` of one of our placement offers."""
    idle = candidate.get("availability") == "idle"
    return {
        "backend": dstack_backend(candidate.get("backend")),
        "instance": instance_type(candidate.get("instance"), candidate.get("resources")),
        "region": str(candidate.get("region") or candidate.get("fleet") or "local"),
        "price": float(candidate.get("price") or 0.0),
        "availability": "idle" if idle else "busy",
        "instance_runtime": "shim",
        "total_blocks": 1,
        "blocks": 1,
    }


def plan_action(action: str, current: Mapping[str, Any] | None) -> str:
    """dstack's `ApplyAction`: `update` for an in-place change or no change of a live run."""
    if current is not None and action in ("update", "noop"):
        return "update"
    return "create"


def run_plan(
    *,
    project: str,
    user: str,
    run_spec: Mapping[str, Any],
    configuration: Mapping[str, Any],
    offers: Sequence[Mapping[str, Any]],
    action: str,
    current: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """dstack's `RunPlan` for one posted `run_spec`, from our plan of it."""
    run_name = str(run_spec.get("run_name") or configuration.get("name") or "")
    converted = [offer(o) for o in offers]
    effective = {**run_spec, "run_name": run_name or None}
    return {
        "project_name": project,
        "user": user,
        "run_spec": effective,
        "effective_run_spec": effective,
        "job_plans": [
            {
                "job_spec": job_spec(configuration, run_name=run_name or "run"),
                "offers": converted,
                "total_offers": len(converted),
                "max_price": max((o["price"] for o in converted), default=None),
            }
        ],
        "current_resource": current,
        "action": plan_action(action, current),
    }


def log_events(data_b64: str, timestamp: str) -> list[dict[str, str]]:
    """One dstack `LogEvent` holding a chunk of a job's output (already base64)."""
    if not data_b64:
        return []
    return [{"timestamp": timestamp, "log_source": "stdout", "message": data_b64}]
