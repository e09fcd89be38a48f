"""GCP programs under Pulumi mocks: accelerators, scheduling, disks, DNS, outputs."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from stacks.programs.config import fleet_config, gateway_config, volume_config
from stacks.programs.gcp import gcp_fleet, gcp_gateway, gcp_volume, labels
from stacks.programs.registry import build_program
from tests.stacks.programs import SETTINGS, fleet, resource
from tests.stacks.pulumi_mocks import RecordingMocks, run_program

A100_SPOT = {
    "backends": ["gcp"],
    "resources": {"gpu": "A100:80GB:8"},
    "spot_policy": "spot",
    "nodes": {"min": 0, "target": 2, "max": 4},
    "placement": "cluster",
    "tags": {"Team": "ML Infra"},
}


def _run_fleet(spec: dict[str, Any]) -> tuple[dict[str, Any], RecordingMocks]:
    cfg = fleet_config(fleet("big", spec), SETTINGS)
    return run_program(lambda: gcp_fleet(cfg))


def test_spot_fleet_accelerators_and_scheduling() -> None:
    _, mocks = _run_fleet(A100_SPOT)
    insts = mocks.of_type("compute/instance:Instance")
    assert [i.name for i in insts] == ["big-0", "big-1"]
    inst = insts[0].inputs
    assert inst["machineType"] == "a2-ultragpu-8g"
    assert inst["zone"] == "us-central1-a"
    assert inst["guestAccelerators"] == [{"count": 8, "type": "nvidia-a100-80gb"}]
    assert inst["scheduling"] == {
        "automaticRestart": False,
        "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE",
        "preemptible": True,
        "provisioningModel": "SPOT",
    }
    assert inst["bootDisk"]["initializeParams"]["size"] == 100
    assert inst["tags"] == ["dockyard-main-big"]
    assert inst["labels"]["team"] == "ml-infra"
    counts = Counter((r.type, r.name) for r in mocks.resources)
    assert set(counts.values()) == {1}


def test_on_demand_scheduling_restarts_and_terminates_on_maintenance() -> None:
    _, mocks = _run_fleet({"backends": ["gcp"], "resources": {"gpu": "T4"}, "nodes": 1})
    inst = mocks.one("compute/instance:Instance").inputs
    assert inst["machineType"] == "n1-standard-8"
    assert inst["guestAccelerators"] == [{"count": 1, "type": "nvidia-tesla-t4"}]
    assert inst["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert inst["scheduling"]["provisioningModel"] == "STANDARD"
    assert inst["scheduling"]["automaticRestart"] is True
    assert "resourcePolicies" not in inst
    assert mocks.of_type("resourcePolicy:ResourcePolicy") == []


def test_cluster_placement_policy() -> None:
    _, mocks = _run_fleet(A100_SPOT)
    policy = mocks.one("compute/resourcePolicy:ResourcePolicy").inputs
    assert policy["groupPlacementPolicy"] == {"collocation": "COLLOCATED", "vmCount": 2}
    for inst in mocks.of_type("compute/instance:Instance"):
        assert inst.inputs["resourcePolicies"].endswith("/big-placement")


def test_firewall_and_metadata() -> None:
    _, mocks = _run_fleet(A100_SPOT)
    fw = mocks.one("compute/firewall:Firewall").inputs
    assert fw["allows"] == [{"ports": ["22"], "protocol": "tcp"}]
    assert fw["targetTags"] == ["dockyard-main-big"]
    meta = mocks.named("big-0").inputs["metadata"]
    assert meta["ssh-keys"] == f"ubuntu:{SETTINGS.ssh_public_key}"
    doc = json.loads(meta["user-data"].split("\n", 1)[1])
    assert doc["ssh_authorized_keys"] == [SETTINGS.ssh_public_key]
    assert "-m agent serve" in doc["write_files"][0]["content"]


def test_fleet_outputs() -> None:
    out, _ = _run_fleet(A100_SPOT)
    first = out["instances"][0]
    assert first["hostname"].startswith("203.0.113.")
    assert (first["backend"], first["zone"], first["spot"]) == ("gcp", "us-central1-a", True)
    assert first["price"] == 16.2202 and first["user"] == "ubuntu"
    assert out["network_tag"] == "dockyard-main-big"


def test_volume_disk_and_registration() -> None:
    spec = {"backend": "gcp", "region": "europe-west4", "size": 250}
    cfg = volume_config(resource("volume", "ds", spec))
    out, mocks = run_program(lambda: gcp_volume(cfg))
    disk = mocks.one("compute/disk:Disk").inputs
    assert (disk["zone"], disk["size"], disk["type"]) == ("europe-west4-a", 250, "pd-balanced")
    assert out["volume_id"] == "ds-disk"

    spec2 = {"backend": "gcp", "region": "europe-west4", "volume_id": "disk-existing"}
    out2, mocks2 = run_program(lambda: gcp_volume(volume_config(resource("volume", "o", spec2))))
    assert mocks2.resources == [] and out2["size"] == 200 and out2["registered"]


def test_gateway_static_address_and_dns() -> None:
    spec = {"backend": "gcp", "region": "us-central1", "domain": "gw.example.com"}
    cfg = gateway_config(resource("gateway", "gw", spec), SETTINGS)
    out, mocks = run_program(lambda: gcp_gateway(cfg))
    vm = mocks.one("compute/instance:Instance").inputs
    nic = vm["networkInterfaces"][0]
    assert nic["accessConfigs"][0]["natIp"] == "198.51.100.8"
    boot = vm["bootDisk"]["initializeParams"]  # what the plan's gateway price counts
    assert (boot["size"], boot["type"]) == (20, "pd-standard")
    record = mocks.one("dns/recordSet:RecordSet").inputs
    assert record["name"] == "*.gw.example.com."
    assert record["managedZone"] == "gw-example-com"
    assert record["rrdatas"] == ["198.51.100.8"]
    web = [f.inputs for f in mocks.of_type("firewall:Firewall") if f.name == "gw-web-fw"]
    assert web[0]["allows"] == [{"ports": ["80", "443"], "protocol": "tcp"}]
    assert out["hostname"] == "198.51.100.8"


def test_labels_are_sanitized() -> None:
    assert labels({"Cost.Center": "R&D 42"}) == {"cost-center": "r-d-42"}


def test_registry_sets_stack_config() -> None:
    program = build_program(fleet("big", A100_SPOT), SETTINGS)
    assert program.backend == "gcp"
    assert program.config == {
        "gcp:region": "us-central1",
        "gcp:zone": "us-central1-a",
        "gcp:project": "proj-1",
    }

    def run() -> dict[str, object]:
        program.run()
        return {}

    _, mocks = run_program(run)
    assert len(mocks.of_type("compute/instance:Instance")) == 2
