"""GCP programs: a fleet of GPU instances, a persistent disk, a gateway VM with DNS.

Pure Pulumi programs like `stacks.programs.aws`. The project and region come from the
stack config (`gcp:project`, `gcp:region`), set by the engine; credentials from the
environment (`GOOGLE_APPLICATION_CREDENTIALS` or application-default credentials).
GPUs are `guest_accelerators`; GPU VMs must terminate on host maintenance; spot VMs use
the SPOT provisioning model and are deleted when preempted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pulumi_gcp as gcp

from stacks.catalog.pricing import GATEWAY_BOOT_DISK, VOLUME_DISK_TYPE
from stacks.programs.config import FleetConfig, GatewayConfig, VolumeConfig, accelerator_type

GPU_IMAGE = (
    "projects/deeplearning-platform-release/global/images/family/common-cu124-ubuntu-2204-py310"
)
UBUNTU_IMAGE = "ubuntu-os-cloud/ubuntu-2404-lts-amd64"


def labels(tags: Mapping[str, str]) -> dict[str, str]:
    """GCP labels from tags: lowercase, `[a-z0-9_-]`, at most 63 characters."""

    def clean(text: str) -> str:
        return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]

    return {clean(k): clean(v) for k, v in tags.items()}


def _firewall(name: str, ports: list[int], sources: list[str], tag: str) -> gcp.compute.Firewall:
    return gcp.compute.Firewall(
        f"{name}-fw",
        network="default",
        direction="INGRESS",
        allows=[{"protocol": "tcp", "ports": [str(p) for p in ports]}],
        source_ranges=sources,
        target_tags=[tag],
    )


def _scheduling(spot: bool) -> gcp.compute.InstanceSchedulingArgs:
    return gcp.compute.InstanceSchedulingArgs(
        on_host_maintenance="TERMINATE",
        automatic_restart=not spot,
        preemptible=spot,
        provisioning_model="SPOT" if spot else "STANDARD",
        instance_termination_action="DELETE" if spot else None,
    )


def _boot_disk(
    image: str, size: int, disk_type: str | None = None
) -> gcp.compute.InstanceBootDiskArgs:
    params = gcp.compute.InstanceBootDiskInitializeParamsArgs(
        image=image, size=size, type=disk_type
    )
    return gcp.compute.InstanceBootDiskArgs(initialize_params=params)


def _nic(nat_ip: Any = None) -> gcp.compute.InstanceNetworkInterfaceArgs:
    access = gcp.compute.InstanceNetworkInterfaceAccessConfigArgs(nat_ip=nat_ip)
    return gcp.compute.InstanceNetworkInterfaceArgs(network="default", access_configs=[access])


def _metadata(user: str, key: str, user_data: str) -> dict[str, str]:
    return {"ssh-keys": f"{user}:{key.strip()}", "user-data": user_data}


def _nat_ip(inst: gcp.compute.Instance) -> Any:
    return inst.network_interfaces.apply(lambda nics: nics[0]["access_configs"][0]["nat_ip"])


def gcp_fleet(cfg: FleetConfig) -> dict[str, Any]:
    """`cfg.nodes` compute instances with the offer's GPUs as guest accelerators."""
    offer, settings = cfg.offer, cfg.settings
    tag = f"dockyard-{cfg.project}-{cfg.name}"[:63]
    ports = [22] + ([settings.agent_ssh_port] if settings.agent_ssh_port else [])
    fw = _firewall(cfg.name, ports, list(settings.ssh_cidrs), tag)
    policy = (
        gcp.compute.ResourcePolicy(
            f"{cfg.name}-placement",
            region=cfg.region,
            group_placement_policy={"collocation": "COLLOCATED", "vm_count": max(cfg.nodes, 2)},
        )
        if cfg.cluster
        else None
    )
    accelerator = accelerator_type(offer.gpu_name, offer.gpu_memory_gib)
    instances = []
    for index in range(cfg.nodes):
        inst = gcp.compute.Instance(
            f"{cfg.name}-{index}",
            machine_type=offer.instance_type,
            zone=cfg.zone,
            boot_disk=_boot_disk(GPU_IMAGE, cfg.disk_gib),
            guest_accelerators=[
                gcp.compute.InstanceGuestAcceleratorArgs(type=accelerator, count=offer.gpu_count)
            ],
            scheduling=_scheduling(offer.spot),
            network_interfaces=[_nic()],
            metadata=_metadata(settings.ssh_user, settings.ssh_public_key, cfg.user_data),
            tags=[tag],
            labels=labels(cfg.tags),
            resource_policies=policy.self_link if policy is not None else None,
        )
        instances.append(
            {
                "name": f"{cfg.name}-{index}",
                "instance_id": inst.instance_id,
                "hostname": _nat_ip(inst),
                "port": 22,
                "user": settings.ssh_user,
                "backend": "gcp",
                "region": cfg.region,
                "zone": cfg.zone,
                "instance_type": offer.instance_type,
                "spot": offer.spot,
                "price": offer.price,
            }
        )
    return {"instances": instances, "firewall": fw.name, "network_tag": tag}


def gcp_volume(cfg: VolumeConfig) -> dict[str, Any]:
    """A pd-balanced persistent disk in the zone, or the registration of `volume_id`."""
    if cfg.volume_id is not None:
        found = gcp.compute.get_disk(name=cfg.volume_id, zone=cfg.zone)
        return {
            "volume_id": found.name,
            "availability_zone": cfg.zone,
            "size": found.size,
            "region": cfg.region,
            "backend": "gcp",
            "registered": True,
        }
    disk = gcp.compute.Disk(
        cfg.name,
        zone=cfg.zone,
        size=cfg.size_gib,
        type=VOLUME_DISK_TYPE["gcp"],
        labels=labels(cfg.tags),
    )
    return {
        "volume_id": disk.name,
        "availability_zone": cfg.zone,
        "size": disk.size,
        "region": cfg.region,
        "backend": "gcp",
        "registered": False,
    }


def gcp_gateway(cfg: GatewayConfig) -> dict[str, Any]:
    """A gateway VM on a static address and a Cloud DNS record `*.<domain>` for it."""
    settings = cfg.settings
    tag = f"dockyard-gw-{cfg.project}-{cfg.name}"[:63]
    _firewall(f"{cfg.name}-ssh", [22], list(settings.ssh_cidrs), tag)
    _firewall(f"{cfg.name}-web", [80, 443], ["0.0.0.0/0"], tag)
    address = gcp.compute.Address(f"{cfg.name}-ip", region=cfg.region, labels=labels(cfg.tags))
    inst = gcp.compute.Instance(
        f"{cfg.name}-vm",
        machine_type=cfg.instance_type,
        zone=cfg.zone,
        boot_disk=_boot_disk(
            UBUNTU_IMAGE, GATEWAY_BOOT_DISK["gcp"][1], GATEWAY_BOOT_DISK["gcp"][0]
        ),
        network_interfaces=[_nic(address.address)],
        metadata=_metadata(settings.ssh_user, settings.ssh_public_key, cfg.user_data),
        tags=[tag],
        labels=labels(cfg.tags),
    )
    zone_name = settings.gcp_dns_zone or cfg.domain.replace(".", "-")
    gcp.dns.RecordSet(
        f"{cfg.name}-dns",
        managed_zone=zone_name,
        name=f"*.{cfg.domain}.",
        type="A",
        ttl=300,
        rrdatas=[address.address],
    )
    return {
        "domain": cfg.domain,
        "hostname": address.address,
        "instance_id": inst.instance_id,
        "url": f"https://*.{cfg.domain}",
        "backend": "gcp",
        "region": cfg.region,
    }
