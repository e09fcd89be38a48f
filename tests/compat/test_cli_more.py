"""dstack 0.22.5's CLI against `dockyard server`, beyond tasks: services and dev environments
(detached), `offer`, `event`, `metrics`, `secret`, `volume`, `gateway`, and a run that Git
owns (refused with `dockyard apply`'s message).
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.compat.conftest import Dstack, free_port

pytestmark = pytest.mark.slow

SERVICE = """type: service
name: web
port: {port}
commands:
  - python3 -m http.server {port}
"""

DEV = """type: dev-environment
name: dev
ide: vscode
"""


def test_service_and_dev_environment_detached(dstack: Dstack) -> None:
    dstack.write("web.dstack.yml", SERVICE.format(port=free_port()))
    dstack.write("dev.dstack.yml", DEV)
    assert "Run web submitted" in dstack.ok("apply", "-f", "web.dstack.yml", "-y", "-d")
    assert "Run dev submitted" in dstack.ok("apply", "-f", "dev.dstack.yml", "-y", "-d")
    dstack.wait_status("web", "running")
    dstack.wait_status("dev", "running")
    listed = json.loads(dstack.ok("ps", "--json"))
    names = {r["run_spec"]["run_name"]: r for r in listed["runs"]}
    assert names["web"]["service"]["url"].endswith("/proxy/services/main/web/")
    assert names["dev"]["run_spec"]["configuration"]["type"] == "dev-environment"
    metrics = dstack.ok("metrics", "web")
    assert "cpu" in metrics  # dstack's table; no samples are kept yet ("no data")
    for name in ("web", "dev"):
        dstack.ok("stop", name, "-x", "-y")
    for name in ("web", "dev"):
        dstack.wait_status(name, "terminated", "failed", "done")


def test_offer_lists_the_fleets_instances(dstack: Dstack) -> None:
    out = dstack.ok("offer")
    assert "local-0" in out and "ssh" in out
    none = dstack.ok("offer", "--gpu", "H100")
    assert "local-0" not in none and "No matching instance offers" in none
    offers = json.loads(dstack.ok("offer", "--json"))
    assert offers["offers"][0]["instance"]["name"] == "local-0"


def test_event_lists_what_happened(dstack: Dstack) -> None:
    dstack.write("evt.dstack.yml", "type: task\nname: evt\ncommands: [echo hi]\n")
    dstack.ok("apply", "-f", "evt.dstack.yml", "-y", "-d")
    dstack.wait_status("evt", "done")
    out = dstack.ok("event")
    assert "[run evt]" in out and "running" in out


def test_secrets_set_list_get_delete(dstack: Dstack) -> None:
    assert "OK" in dstack.ok("secret", "set", "HF_TOKEN", "hf-value")
    listed = dstack.ok("secret", "list")
    assert "HF_TOKEN" in listed and "hf-value" not in listed
    assert "hf-value" in dstack.ok("secret", "get", "HF_TOKEN")
    dstack.ok("secret", "delete", "HF_TOKEN", "-y")
    assert "HF_TOKEN" not in dstack.ok("secret", "list")


def test_volume_and_gateway_apply_list_delete(dstack: Dstack) -> None:
    dstack.write("vol.dstack.yml", "type: volume\nname: data\nbackend: aws\nregion: us-east-1\n")
    unsized = dstack("apply", "-f", "vol.dstack.yml", "-y")  # our own check, as a CLI error
    assert unsized.returncode == 1 and "size: set `size` to create a volume" in unsized.stdout
    dstack.write(
        "vol.dstack.yml", "type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 10GB\n"
    )
    dstack.write(
        "gw.dstack.yml",
        "type: gateway\nname: gw\nbackend: aws\nregion: us-east-1\ndomain: example.com\n",
    )
    assert "data" not in dstack.ok("volume", "list")
    assert "example.com" not in dstack.ok("gateway", "list")
    if shutil.which("pulumi") is None:  # cloud volumes need the Pulumi engine
        for path in ("vol.dstack.yml", "gw.dstack.yml"):
            blocked = dstack("apply", "-f", path, "-y")
            assert blocked.returncode == 1 and "Pulumi CLI not found" in blocked.stdout
        return
    dstack.ok("apply", "-f", "vol.dstack.yml", "-y")
    dstack.ok("apply", "-f", "gw.dstack.yml", "-y")
    assert "data" in dstack.ok("volume", "list")
    assert "example.com" in dstack.ok("gateway", "list")
    assert "Volume data deleted" in dstack.ok("volume", "delete", "data", "-y")
    assert "Gateway deleted" in dstack.ok("gateway", "delete", "gw", "-y")
