"""AWS programs: a fleet of GPU instances, an EBS volume, a gateway VM with DNS.

Pure Pulumi programs: each function declares resources for one config and returns a dict
of outputs (the inline wrapper in `stacks.programs.registry` exports them). The region
comes from the stack config `aws:region`, set by the engine; credentials from the
environment (`AWS_PROFILE`, `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, instance role).
Logical names are `<name>-<role>[-<n>]`, unique within the stack.
"""

from __future__ import annotations

from typing import Any

import pulumi_aws as aws

from stacks.catalog.pricing import VOLUME_DISK_TYPE
from stacks.programs.config import FleetConfig, GatewayConfig, VolumeConfig

GPU_AMI_NAME = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
UBUNTU_AMI_NAME = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"
CANONICAL_OWNER = "099720109477"


def _ami(name_pattern: str, owner: str) -> str:
    ami = aws.ec2.get_ami(
        most_recent=True,
        owners=[owner],
        filters=[{"name": "name", "values": [name_pattern]}],
    )
    return str(ami.id)


def _tcp(port: int, cidrs: tuple[str, ...]) -> aws.ec2.SecurityGroupIngressArgs:
    return aws.ec2.SecurityGroupIngressArgs(
        protocol="tcp", from_port=port, to_port=port, cidr_blocks=list(cidrs)
    )


def _egress_all() -> aws.ec2.SecurityGroupEgressArgs:
    return aws.ec2.SecurityGroupEgressArgs(
        protocol="-1", from_port=0, to_port=0, cidr_blocks=["0.0.0.0/0"]
    )


def _security_group(
    name: str, ports: list[int], cfg_cidrs: tuple[str, ...], *, cluster: bool, tags: dict[str, str]
) -> aws.ec2.SecurityGroup:
    ingress = [_tcp(p, cfg_cidrs) for p in ports]
    if cluster:
        ingress.append(
            aws.ec2.SecurityGroupIngressArgs(protocol="-1", from_port=0, to_port=0, self=True)
        )
    return aws.ec2.SecurityGroup(
        f"{name}-sg",
        description=f"Dockyard {name}: SSH and agent ports",
        ingress=ingress,
        egress=[_egress_all()],
        tags=tags,
    )


def _market_options(cfg: FleetConfig) -> aws.ec2.InstanceInstanceMarketOptionsArgs | None:
    if not cfg.offer.spot:
        return None
    spot = aws.ec2.InstanceInstanceMarketOptionsSpotOptionsArgs(
        spot_instance_type="one-time",
        instance_interruption_behavior="terminate",
        max_price=None if cfg.max_price is None else f"{cfg.max_price:g}",
    )
    return aws.ec2.InstanceInstanceMarketOptionsArgs(market_type="spot", spot_options=spot)


def _instance_entry(cfg: FleetConfig, index: int, inst: aws.ec2.Instance) -> dict[str, Any]:
    return {
        "name": f"{cfg.name}-{index}",
        "instance_id": inst.id,
        "hostname": inst.public_ip,
        "internal_ip": inst.private_ip,
        "port": 22,
        "user": cfg.settings.ssh_user,
        "backend": "aws",
        "region": cfg.region,
        "zone": inst.availability_zone,
        "instance_type": cfg.offer.instance_type,
        "spot": cfg.offer.spot,
        "price": cfg.offer.price,
    }


def aws_fleet(cfg: FleetConfig) -> dict[str, Any]:
    """`cfg.nodes` EC2 instances of the chosen offer, with key, security and placement."""
    tags = dict(cfg.tags)
    settings = cfg.settings
    ports = [22] + ([settings.agent_ssh_port] if settings.agent_ssh_port else [])
    key = aws.ec2.KeyPair(f"{cfg.name}-key", public_key=settings.ssh_public_key, tags=tags)
    sg = _security_group(cfg.name, ports, settings.ssh_cidrs, cluster=cfg.cluster, tags=tags)
    group = (
        aws.ec2.PlacementGroup(f"{cfg.name}-pg", strategy="cluster", tags=tags)
        if cfg.cluster
        else None
    )
    ami = _ami(GPU_AMI_NAME, "amazon") if cfg.nodes else None
    instances = []
    for index in range(cfg.nodes):
        inst = aws.ec2.Instance(
            f"{cfg.name}-{index}",
            instance_type=cfg.offer.instance_type,
            ami=ami,
            key_name=key.key_name,
            vpc_security_group_ids=[sg.id],
            availability_zone=cfg.zone,
            placement_group=group.name if group is not None else None,
            instance_market_options=_market_options(cfg),
            associate_public_ip_address=True,
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_size=cfg.disk_gib, volume_type="gp3", delete_on_termination=True
            ),
            user_data=cfg.user_data,
            tags={**tags, "Name": f"{cfg.project}-{cfg.name}-{index}"},
        )
        instances.append(_instance_entry(cfg, index, inst))
    return {
        "instances": instances,
        "security_group_id": sg.id,
        "placement_group": group.name if group is not None else None,
    }


def aws_volume(cfg: VolumeConfig) -> dict[str, Any]:
    """An EBS gp3 volume in the zone, or the registration of an existing `volume_id`."""
    if cfg.volume_id is not None:
        found = aws.ebs.get_volume(filters=[{"name": "volume-id", "values": [cfg.volume_id]}])
        return {
            "volume_id": found.volume_id,
            "availability_zone": found.availability_zone,
            "size": found.size,
            "region": cfg.region,
            "backend": "aws",
            "registered": True,
        }
    volume = aws.ebs.Volume(
        cfg.name,
        availability_zone=cfg.zone,
        size=cfg.size_gib,
        type=VOLUME_DISK_TYPE["aws"],
        tags={**cfg.tags, "Name": f"{cfg.project}-{cfg.name}"},
    )
    return {
        "volume_id": volume.id,
        "availability_zone": volume.availability_zone,
        "size": volume.size,
        "region": cfg.region,
        "backend": "aws",
        "registered": False,
    }


def aws_gateway(cfg: GatewayConfig) -> dict[str, Any]:
    """A gateway VM with an Elastic IP and a Route 53 record `*.<domain>` pointing at it."""
    tags = dict(cfg.tags)
    settings = cfg.settings
    key = aws.ec2.KeyPair(f"{cfg.name}-key", public_key=settings.ssh_public_key, tags=tags)
    sg = aws.ec2.SecurityGroup(
        f"{cfg.name}-sg",
        description=f"Dockyard gateway {cfg.name}: SSH, HTTP, HTTPS",
        ingress=[_tcp(22, settings.ssh_cidrs), _tcp(80, ("0.0.0.0/0",)), _tcp(443, ("0.0.0.0/0",))],
        egress=[_egress_all()],
        tags=tags,
    )
    inst = aws.ec2.Instance(
        f"{cfg.name}-vm",
        instance_type=cfg.instance_type,
        ami=_ami(UBUNTU_AMI_NAME, CANONICAL_OWNER),
        key_name=key.key_name,
        vpc_security_group_ids=[sg.id],
        user_data=cfg.user_data,
        tags={**tags, "Name": f"{cfg.project}-{cfg.name}"},
    )
    eip = aws.ec2.Eip(f"{cfg.name}-ip", instance=inst.id, domain="vpc", tags=tags)
    zone = aws.route53.get_zone(name=settings.aws_hosted_zone or cfg.domain, private_zone=False)
    aws.route53.Record(
        f"{cfg.name}-dns",
        zone_id=zone.zone_id,
        name=f"*.{cfg.domain}",
        type="A",
        ttl=300,
        records=[eip.public_ip],
    )
    return {
        "domain": cfg.domain,
        "hostname": eip.public_ip,
        "instance_id": inst.id,
        "url": f"https://*.{cfg.domain}",
        "backend": "aws",
        "region": cfg.region,
    }
