"""AWS programs under Pulumi mocks: wire inputs, names, outputs."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from stacks.programs.aws import aws_fleet, aws_gateway, aws_volume
from stacks.programs.config import fleet_config, gateway_config, volume_config
from tests.stacks.programs import SETTINGS, fleet, resource
from tests.stacks.pulumi_mocks import RecordingMocks, run_program

A10G_SPOT = {
    "backends": ["aws"],
    "resources": {"gpu": "A10G:4", "disk": "300GB.."},
    "spot_policy": "spot",
    "max_price": 3,
    "nodes": 2,
    "placement": "cluster",
    "tags": {"team": "ml", "dockyard-project": "spoofed"},
}


def _run_fleet(spec: dict[str, Any]) -> tuple[dict[str, Any], RecordingMocks]:
    cfg = fleet_config(fleet("train", spec), SETTINGS)
    return run_program(lambda: aws_fleet(cfg), {"aws:region": cfg.region})


def _names_unique(mocks: RecordingMocks) -> None:
    counts = Counter((r.type, r.name) for r in mocks.resources)
    assert all(n == 1 for n in counts.values()), counts


def test_spot_fleet_instances() -> None:
    _, mocks = _run_fleet(A10G_SPOT)
    insts = mocks.of_type("ec2/instance:Instance")
    assert [i.name for i in insts] == ["train-0", "train-1"]
    first = insts[0].inputs
    assert first["instanceType"] == "g5.12xlarge"
    assert first["ami"] == "ami-0123"
    assert first["instanceMarketOptions"] == {
        "marketType": "spot",
        "spotOptions": {
            "instanceInterruptionBehavior": "terminate",
            "maxPrice": "3",
            "spotInstanceType": "one-time",
        },
    }
    assert first["rootBlockDevice"] == {
        "deleteOnTermination": True,
        "volumeSize": 300,
        "volumeType": "gp3",
    }
    assert first["availabilityZone"] == "us-east-1a"
    assert first["keyName"] == "train-key-kp"
    assert first["vpcSecurityGroupIds"] == ["train-sg-id"]
    assert "aws:ec2/getAmi:getAmi" in mocks.calls
    _names_unique(mocks)


def test_placement_group_for_cluster() -> None:
    _, mocks = _run_fleet(A10G_SPOT)
    group = mocks.one("ec2/placementGroup:PlacementGroup")
    assert group.inputs["strategy"] == "cluster"
    for inst in mocks.of_type("ec2/instance:Instance"):
        assert inst.inputs["placementGroup"] == "train-pg-physical"


def test_on_demand_fleet_has_no_market_options_nor_placement() -> None:
    out, mocks = _run_fleet({"backends": ["aws"], "resources": {"gpu": "L4"}, "nodes": 1})
    (inst,) = mocks.of_type("ec2/instance:Instance")
    assert "instanceMarketOptions" not in inst.inputs
    assert "placementGroup" not in inst.inputs
    assert mocks.of_type("placementGroup:PlacementGroup") == []
    assert inst.inputs["rootBlockDevice"]["volumeSize"] == 100
    assert out["placement_group"] is None


def test_security_group_rules() -> None:
    _, mocks = _run_fleet(A10G_SPOT)
    sg = mocks.one("ec2/securityGroup:SecurityGroup").inputs
    assert sg["ingress"] == [
        {"cidrBlocks": ["0.0.0.0/0"], "fromPort": 22, "protocol": "tcp", "toPort": 22},
        {"fromPort": 0, "protocol": "-1", "self": True, "toPort": 0},
    ]
    assert sg["egress"] == [
        {"cidrBlocks": ["0.0.0.0/0"], "fromPort": 0, "protocol": "-1", "toPort": 0}
    ]


def test_tags_user_first_ours_win() -> None:
    _, mocks = _run_fleet(A10G_SPOT)
    tags = mocks.named("train-1").inputs["tags"]
    assert tags == {
        "team": "ml",
        "dockyard-project": "main",
        "dockyard-fleet": "train",
        "dockyard-stack": "main-fleet-train",
        "Name": "main-train-1",
    }
    assert mocks.one("ec2/keyPair:KeyPair").inputs["tags"]["dockyard-fleet"] == "train"


def test_user_data_installs_agent_and_authorizes_server() -> None:
    _, mocks = _run_fleet(A10G_SPOT)
    user_data = mocks.named("train-0").inputs["userData"]
    assert user_data.startswith("#cloud-config\n")
    doc = json.loads(user_data.split("\n", 1)[1])
    assert doc["ssh_authorized_keys"] == [SETTINGS.ssh_public_key]
    unit = doc["write_files"][0]
    assert unit["path"] == "/etc/systemd/system/dockyard-agent.service"
    assert "-m agent serve --data-dir /var/lib/dockyard --http-port 10999" in unit["content"]
    assert "--allow-user ubuntu" in unit["content"], "the login user may call the root agent"
    commands = [" ".join(c) for c in doc["runcmd"]]
    assert any("pip install --quiet dockyard==0.1.0" in c for c in commands)
    assert "systemctl enable --now dockyard-agent.service" in commands
    assert mocks.one("ec2/keyPair:KeyPair").inputs["publicKey"] == SETTINGS.ssh_public_key


def test_fleet_outputs() -> None:
    out, _ = _run_fleet(A10G_SPOT)
    assert out["security_group_id"] == "train-sg-id"
    assert out["instances"][1] == {
        "name": "train-1",
        "instance_id": "train-1-id",
        "hostname": out["instances"][1]["hostname"],
        "internal_ip": out["instances"][1]["internal_ip"],
        "port": 22,
        "user": "ubuntu",
        "backend": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "instance_type": "g5.12xlarge",
        "spot": True,
        "price": 2.2688,
    }
    assert out["instances"][0]["hostname"] != out["instances"][1]["hostname"]
    assert out["instances"][0]["hostname"].startswith("203.0.113.")


def test_zero_nodes_is_a_template_without_instances() -> None:
    out, mocks = _run_fleet({"backends": ["aws"], "resources": {"gpu": "L4"}, "nodes": "0..4"})
    assert out["instances"] == []
    assert mocks.of_type("ec2/instance:Instance") == []
    assert "aws:ec2/getAmi:getAmi" not in mocks.calls


def test_volume_created_in_zone() -> None:
    spec = {"backend": "aws", "region": "us-west-2", "size": "200GB", "tags": {"a": "b"}}
    cfg = volume_config(resource("volume", "data", spec))
    out, mocks = run_program(lambda: aws_volume(cfg))
    vol = mocks.one("ebs/volume:Volume").inputs
    assert (vol["availabilityZone"], vol["size"], vol["type"]) == ("us-west-2a", 200, "gp3")
    assert vol["tags"]["Name"] == "main-data" and vol["tags"]["a"] == "b"
    assert out["volume_id"] == "data-id" and out["registered"] is False


def test_volume_registers_existing_id() -> None:
    spec = {"backend": "aws", "region": "us-east-1", "volume_id": "vol-existing"}
    cfg = volume_config(resource("volume", "old", spec))
    out, mocks = run_program(lambda: aws_volume(cfg))
    assert mocks.resources == []
    assert mocks.calls == ["aws:ebs/getVolume:getVolume"]
    assert out["volume_id"] == "vol-existing" and out["size"] == 500 and out["registered"]


def test_gateway_instance_eip_and_wildcard_record() -> None:
    spec = {"backend": "aws", "region": "us-east-1", "domain": "${{ run.project_name }}.ai.org"}
    cfg = gateway_config(resource("gateway", "gw", spec), SETTINGS)
    out, mocks = run_program(lambda: aws_gateway(cfg))
    assert mocks.one("ec2/instance:Instance").inputs["instanceType"] == "t3.small"
    assert mocks.one("ec2/eip:Eip").inputs["instance"] == "gw-vm-id"
    record = mocks.one("route53/record:Record").inputs
    assert record == {
        "name": "*.main.ai.org",
        "type": "A",
        "ttl": 300,
        "records": ["198.51.100.7"],
        "zoneId": "Z0123",
    }
    ports = [r["fromPort"] for r in mocks.one("securityGroup:SecurityGroup").inputs["ingress"]]
    assert ports == [22, 80, 443]
    user_data = mocks.one("ec2/instance:Instance").inputs["userData"]
    assert "reverse_proxy https://dockyard.example.com" in user_data
    assert out["domain"] == "main.ai.org" and out["hostname"] == "198.51.100.7"
    _names_unique(mocks)
