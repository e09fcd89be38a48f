"""Program inputs: what a cloud program needs, built (purely) from a `StackResource`.

The Pulumi programs never read a spec dict: `fleet_config`, `volume_config` and
`gateway_config` validate the resource first and raise `StackProgramError` (naming the
file and the resource) before any cloud resource is declared. `ProgramSettings` carries
what comes from the server rather than the config repo: its SSH key, its URL, how the
agent is installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.requirements import parse_range
from stacks.catalog.pricing import DEFAULT_GATEWAY_TYPE
from stacks.catalog.requirements import requirements_from_spec
from stacks.offer import Offer
from stacks.programs.cloudinit import agent_user_data, gateway_user_data
from stacks.protocol import StackProgramError, StackResource

_GCP_ACCELERATORS = {
    ("T4", 16): "nvidia-tesla-t4",
    ("V100", 16): "nvidia-tesla-v100",
    ("L4", 24): "nvidia-l4",
    ("A100", 40): "nvidia-tesla-a100",
    ("A100", 80): "nvidia-a100-80gb",
    ("H100", 80): "nvidia-h100-80gb",
}


@dataclass(frozen=True, slots=True)
class ProgramSettings:
    """Server-side inputs of every program (from `Settings`, passed down)."""

    ssh_public_key: str
    server_url: str = "http://127.0.0.1:8000"
    agent_package: str = "dockyard"
    agent_http_port: int = 10999
    agent_ssh_port: int | None = None
    ssh_user: str = "ubuntu"
    ssh_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    gcp_project: str | None = None
    gcp_dns_zone: str | None = None
    aws_hosted_zone: str | None = None


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """One cloud fleet: `nodes` instances of `offer` (the cheapest chosen offer)."""

    project: str
    name: str
    offer: Offer
    nodes: int
    zone: str | None
    disk_gib: int
    cluster: bool
    max_price: float | None
    tags: Mapping[str, str]
    user_data: str
    settings: ProgramSettings

    @property
    def region(self) -> str:
        return self.offer.region


@dataclass(frozen=True, slots=True)
class VolumeConfig:
    project: str
    name: str
    backend: str
    region: str
    zone: str
    size_gib: int | None
    volume_id: str | None
    tags: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    project: str
    name: str
    backend: str
    region: str
    zone: str
    instance_type: str
    domain: str
    tags: Mapping[str, str]
    user_data: str
    settings: ProgramSettings = field(repr=False)


def accelerator_type(gpu_name: str, memory_gib: float) -> str:
    """The GCP accelerator type of a GPU (`A100`, 80 → `nvidia-a100-80gb`)."""
    key = (gpu_name.upper(), round(memory_gib))
    if key not in _GCP_ACCELERATORS:
        raise ValueError(f"no GCP accelerator type for {gpu_name} {memory_gib:g}GB")
    return _GCP_ACCELERATORS[key]


def node_count(spec: Mapping[str, Any], override: int | None = None) -> int:
    """Instances a fleet should have now: the override, else `nodes.target`, else `min`."""
    if override is not None:
        return override
    nodes = spec.get("nodes", 1)
    if isinstance(nodes, Mapping):
        target = nodes.get("target")
        return int(target if target is not None else nodes.get("min") or 0)
    low = parse_range(nodes).min
    return int(low or 0)


def resource_tags(resource: StackResource) -> dict[str, str]:
    """User tags, then ours (ours win: user tags never override backend tags)."""
    user = {str(k): str(v) for k, v in (resource.spec.get("tags") or {}).items()}
    return {
        **user,
        "dockyard-project": resource.project,
        f"dockyard-{resource.kind}": resource.name,
        "dockyard-stack": resource.stack_name,
    }


def _fail(resource: StackResource, message: str) -> StackProgramError:
    return StackProgramError(message, path=resource.path, name=resource.name)


def fleet_config(
    resource: StackResource, settings: ProgramSettings, nodes: int | None = None
) -> FleetConfig:
    """Pure: validate a cloud fleet and pick its offer (the first of `resource.offers`)."""
    spec = resource.spec
    if not resource.offers:
        raise _fail(resource, "no offer matches the fleet's resources; see `dockyard offer`")
    offer = resource.offers[0]
    zones = [str(z) for z in spec.get("availability_zones") or ()]
    zone = zones[0] if zones else (offer.zones[0] if offer.zones else None)
    if zone is not None and offer.zones and zone not in offer.zones:
        raise _fail(resource, f"availability zone {zone} is not in {offer.region}")
    try:
        disk = requirements_from_spec(spec).disk_size_gib
        if offer.backend == "gcp":
            accelerator_type(offer.gpu_name, offer.gpu_memory_gib)
    except ValueError as exc:
        raise _fail(resource, str(exc)) from exc
    return FleetConfig(
        project=resource.project,
        name=resource.name,
        offer=offer,
        nodes=node_count(spec, nodes),
        zone=zone,
        disk_gib=int(disk),
        cluster=spec.get("placement") == "cluster",
        max_price=float(spec["max_price"]) if spec.get("max_price") is not None else None,
        tags=resource_tags(resource),
        user_data=agent_user_data(settings),
        settings=settings,
    )


def _backend(resource: StackResource) -> str:
    backend = str(resource.spec.get("backend") or "").lower()
    if backend not in ("aws", "gcp"):
        raise _fail(resource, f"backend {backend or '(none)'} is not aws or gcp")
    return backend


def _default_zone(backend: str, region: str) -> str:
    return f"{region}a" if backend == "aws" else f"{region}-a"


def volume_config(resource: StackResource) -> VolumeConfig:
    """Pure: a cloud volume to create (`size`) or to register (`volume_id`)."""
    spec = resource.spec
    backend = _backend(resource)
    region = spec.get("region")
    if not region:
        raise _fail(resource, "region is required for an aws or gcp volume")
    volume_id = spec.get("volume_id")
    size = spec.get("size")
    if volume_id is None and size is None:
        raise _fail(resource, "size is required to create a volume (or give volume_id)")
    size_gib = None if size is None else int(parse_range(size, memory=True).min or 0)
    return VolumeConfig(
        project=resource.project,
        name=resource.name,
        backend=backend,
        region=str(region),
        zone=str(spec.get("availability_zone") or _default_zone(backend, str(region))),
        size_gib=size_gib,
        volume_id=None if volume_id is None else str(volume_id),
        tags=resource_tags(resource),
    )


def gateway_config(resource: StackResource, settings: ProgramSettings) -> GatewayConfig:
    """Pure: a gateway VM with a static IP and a wildcard DNS record for its domain."""
    spec = resource.spec
    backend = _backend(resource)
    region, domain = spec.get("region"), spec.get("domain")
    if not region or not domain:
        raise _fail(resource, "region and domain are required for an aws or gcp gateway")
    if spec.get("load_balancer") is not None or (spec.get("replicas") or 1) > 1:
        raise _fail(resource, "load_balancer and replicas > 1 are not supported for gateways yet")
    if spec.get("public_ip") is False:
        raise _fail(resource, "public_ip: false is not supported for gateways yet")
    domain = str(domain).replace("${{ run.project_name }}", resource.project).rstrip(".")
    tls = spec.get("certificate", {"type": "lets-encrypt"}) is not None
    return GatewayConfig(
        project=resource.project,
        name=resource.name,
        backend=backend,
        region=str(region),
        zone=_default_zone(backend, str(region)),
        instance_type=str(spec.get("instance_type") or DEFAULT_GATEWAY_TYPE[backend]),
        domain=domain,
        tags=resource_tags(resource),
        user_data=gateway_user_data(settings, domain=domain, tls=tls),
        settings=settings,
    )
