"""The stacks side reads what `schemas` produces: normalized specs from real YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from schemas import parse_config
from stacks.catalog import offers_for_spec, requirements_from_spec
from stacks.local import LocalEngine, LocalSettings
from stacks.programs.config import fleet_config, gateway_config, node_count, volume_config
from stacks.protocol import StackResource, select_engine
from tests.stacks.programs import SETTINGS


def _normalized(text: str, path: str = "x.dstack.yml") -> dict[str, Any]:
    return parse_config(text, path).normalized()


CLOUD_FLEET = """type: fleet
name: gpu
nodes: 1..2
backends: [aws]
spot_policy: auto
placement: cluster
resources:
  gpu: A10G:4
  disk: 300GB..
"""


def test_cloud_fleet_requirements_offers_and_config() -> None:
    spec = _normalized(CLOUD_FLEET, "fleets/gpu.dstack.yml")
    assert select_engine("fleet", spec).engine == "pulumi"
    req = requirements_from_spec(spec)
    assert (req.gpu_names, req.gpu_count.min, req.disk_size_gib) == (("A10G",), 4, 300)
    offers = offers_for_spec(spec)
    assert offers[0].instance_type == "g5.12xlarge" and offers[0].spot
    res = StackResource("main", "fleet", "gpu", "fleets/gpu.dstack.yml", spec, offers)
    cfg = fleet_config(res, SETTINGS)
    assert (cfg.nodes, cfg.cluster, cfg.disk_gib) == (1, True, 300)
    assert node_count(spec) == 1


async def test_ssh_fleet_from_normalized_spec(tmp_path: Path) -> None:
    spec = _normalized(
        """type: fleet
name: on-prem
ssh_config:
  user: ubuntu
  identity_file: ~/.ssh/id
  hosts: [10.0.0.1, {hostname: 10.0.0.2, port: 2222}]
"""
    )
    assert select_engine("fleet", spec).engine == "local"
    engine = LocalEngine(LocalSettings(data_dir=tmp_path, user="me"))
    out = await engine.up(StackResource("main", "fleet", "on-prem", "f.dstack.yml", spec))
    assert [(i["hostname"], i["port"], i["user"], i["blocks"]) for i in out["instances"]] == [
        ("10.0.0.1", 22, "ubuntu", 1),
        ("10.0.0.2", 2222, "ubuntu", 1),
    ]


def test_volume_and_gateway_from_normalized_specs() -> None:
    vol = _normalized("type: volume\nname: data\nbackend: gcp\nregion: us-central1\nsize: 100GB\n")
    cfg = volume_config(StackResource("main", "volume", "data", "v.dstack.yml", vol))
    assert (cfg.zone, cfg.size_gib, cfg.volume_id) == ("us-central1-a", 100, None)
    gw = _normalized("type: gateway\nname: gw\nbackend: aws\nregion: us-east-1\ndomain: a.org\n")
    gcfg = gateway_config(StackResource("main", "gateway", "gw", "g.dstack.yml", gw), SETTINGS)
    assert gcfg.instance_type == "t3.small" and "on_demand" in gcfg.user_data
