"""Program inputs (pure): validation before any cloud resource, node counts, user data."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stacks.programs.cloudinit import agent_user_data
from stacks.programs.config import (
    ProgramSettings,
    fleet_config,
    gateway_config,
    node_count,
    volume_config,
)
from stacks.protocol import StackProgramError
from tests.stacks.programs import SETTINGS, fleet, resource


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [(3, 3), ("2..5", 2), ("0..4", 0), ({"min": 1, "target": 3, "max": 5}, 3), ({"min": 2}, 2)],
)
def test_node_count(nodes: Any, expected: int) -> None:
    assert node_count({"nodes": nodes}) == expected
    assert node_count({"nodes": nodes}, override=7) == 7


def test_fleet_without_offers_names_file_and_resource() -> None:
    res = fleet("nope", {"backends": ["aws"], "resources": {"gpu": "B200"}})
    with pytest.raises(StackProgramError) as info:
        fleet_config(res, SETTINGS)
    assert (info.value.path, info.value.name) == ("fleets/nope.dstack.yml", "nope")
    assert "no offer matches" in str(info.value)


def test_fleet_zone_must_belong_to_the_offer_region() -> None:
    spec = {"backends": ["aws"], "resources": {"gpu": "L4"}, "availability_zones": ["eu-west-1a"]}
    with pytest.raises(StackProgramError, match="eu-west-1a is not in us-east-1"):
        fleet_config(fleet("z", spec), SETTINGS)
    spec["regions"] = ["eu-west-1"]
    assert fleet_config(fleet("z", spec), SETTINGS).zone == "eu-west-1a"


@pytest.mark.parametrize(
    ("kind", "spec", "message"),
    [
        ("volume", {"backend": "aws", "size": 10}, "region is required"),
        ("volume", {"backend": "gcp", "region": "us-central1"}, "size is required"),
        ("volume", {"backend": "azure", "region": "x", "size": 1}, "backend azure"),
        ("gateway", {"backend": "aws", "region": "us-east-1"}, "domain are required"),
        (
            "gateway",
            {"backend": "gcp", "region": "r", "domain": "d.org", "load_balancer": {"type": "alb"}},
            "not supported",
        ),
        (
            "gateway",
            {"backend": "aws", "region": "r", "domain": "d.org", "replicas": 2},
            "replicas",
        ),
    ],
)
def test_volume_and_gateway_validation(kind: Any, spec: dict[str, Any], message: str) -> None:
    res = resource(kind, "r", spec)
    with pytest.raises(StackProgramError, match=message):
        if kind == "volume":
            volume_config(res)
        else:
            gateway_config(res, SETTINGS)


def test_gateway_without_certificate_serves_plain_http() -> None:
    spec = {"backend": "aws", "region": "us-east-1", "domain": "x.org", "certificate": None}
    cfg = gateway_config(resource("gateway", "g", spec), SETTINGS)
    assert "http://*.x.org {" in cfg.user_data and "on_demand" not in cfg.user_data


def test_agent_ssh_port_adds_authorized_keys_file() -> None:
    settings = ProgramSettings(ssh_public_key="ssh-ed25519 K s", agent_ssh_port=10022)
    doc = json.loads(agent_user_data(settings).split("\n", 1)[1])
    paths = [f["path"] for f in doc["write_files"]]
    assert "/etc/dockyard/authorized_keys" in paths
    assert (
        "--ssh-port 10022 --authorized-keys /etc/dockyard/authorized_keys"
        in (doc["write_files"][0]["content"])
    )
