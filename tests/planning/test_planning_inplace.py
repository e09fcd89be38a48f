"""dstack's in-place update rules, per kind, with real config models."""

from __future__ import annotations

import pytest

from reconciler.domain.plan import ActionKind, Rollout
from tests.planning.factories import change, fields_of

SERVICE = """
type: service
name: web
image: nginx
port: 80
replicas: 1
"""
SCALED = """
type: service
name: web
image: nginx
port: 80
gateway: gw
replicas: 1..4
scaling:
  metric: rps
  target: 10
"""
GROUPS = """
type: service
name: web
image: nginx
port: 80
groups:
  - name: prefill
    replicas: 1
    commands: [a]
  - name: router
    replicas: 1
    commands: [b]
    router:
      type: smg
"""


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (SERVICE, SERVICE.replace("replicas: 1", "replicas: 3"), "replicas"),
        (SCALED, SCALED.replace("target: 10", "target: 20"), "scaling"),
        (SCALED, SCALED.replace("gateway: gw", "gateway: gw2"), "gateway"),
        (SERVICE, SERVICE + "priority: 50\n", "priority"),
        (GROUPS, GROUPS.replace("commands: [a]", "commands: [a2]"), "groups"),
    ],
    ids=["replicas", "scaling", "gateway", "priority", "groups"],
)
def test_service_immediate_fields_update_at_once(old: str, new: str, field: str) -> None:
    action = change(old, new)
    assert action.action is ActionKind.UPDATE
    assert action.rollout is Rollout.IMMEDIATE
    assert {f.split(".")[0] for f in fields_of(action)} == {field}
    assert "applied at once" in action.reason


@pytest.mark.parametrize(
    ("new", "field"),
    [
        (SERVICE.replace("nginx", "nginx:1.27"), "image"),
        (SERVICE + "commands: [nginx -g daemon off]\n", "commands"),
        (SERVICE + "env:\n  A: b\n", "env"),
        (SERVICE + "resources:\n  gpu: 24GB\n", "resources"),
        (SERVICE.replace("port: 80", "port: 8080"), "port"),
        (SERVICE + "https: true\n", "https"),
    ],
    ids=["image", "commands", "env", "resources", "port", "https-unset-to-true"],
)
def test_service_rolling_fields_roll(new: str, field: str) -> None:
    action = change(SERVICE, new)
    assert action.action is ActionKind.UPDATE
    assert action.rollout is Rollout.ROLLING
    assert field in {f.split(".")[0] for f in fields_of(action)}
    assert "rolling update" in action.reason


def test_service_rolling_and_immediate_fields_together_roll_and_say_both() -> None:
    new = SERVICE.replace("nginx", "nginx:2").replace("replicas: 1", "replicas: 2")
    action = change(SERVICE, new)
    assert action.rollout is Rollout.ROLLING
    assert "`image`" in action.reason
    assert "applied at once: `replicas`" in action.reason


@pytest.mark.parametrize(
    ("new", "forced"),
    [
        (SERVICE + "auth: false\n", "auth"),
        (SERVICE + "model: llama\n", "model"),
        (SERVICE + "strip_prefix: false\n", "strip_prefix"),
        (SERVICE + "spot_policy: spot\n", "spot_policy"),
        (SERVICE + "https: false\n", "https"),
    ],
    ids=["auth", "model", "strip_prefix", "profile-field", "https-to-false"],
)
def test_service_fields_outside_the_whitelist_force_a_replace(new: str, forced: str) -> None:
    action = change(SERVICE, new.replace("nginx", "nginx:2"))
    assert action.action is ActionKind.REPLACE
    assert action.forced_by == (forced,)
    assert "image" in fields_of(action)  # every changed field is listed, not only the culprit
    assert f"`{forced}` cannot change in place" in action.reason


def test_service_router_group_change_forces_a_replace() -> None:
    action = change(GROUPS, GROUPS.replace("type: smg", "type: dynamo"))
    assert action.action is ActionKind.REPLACE
    assert action.forced_by == ("groups.router",)


DEV = """
type: dev-environment
name: dev
ide: vscode
inactivity_duration: 2h
"""


def test_dev_environment_inactivity_duration_is_in_place() -> None:
    action = change(DEV, DEV.replace("2h", "4h"))
    assert action.action is ActionKind.UPDATE
    assert fields_of(action) == {"inactivity_duration"}


def test_dev_environment_ide_change_is_a_replace() -> None:
    action = change(DEV, DEV.replace("vscode", "cursor"))
    assert action.action is ActionKind.REPLACE
    assert action.forced_by == ("ide",)


CLOUD = """
type: fleet
name: gpu
nodes: 0..2
backends: [aws]
placement: cluster
"""


@pytest.mark.parametrize(
    "new",
    [
        CLOUD.replace("0..2", "1..4"),
        CLOUD.replace("[aws]", "[aws, gcp]"),
        CLOUD + "spot_policy: spot\n",
        CLOUD + "max_price: 2.5\n",
        CLOUD + "resources:\n  gpu: A100\n",
    ],
    ids=["nodes", "backends", "spot_policy", "max_price", "resources"],
)
def test_cloud_fleet_whitelisted_fields_update_in_place(new: str) -> None:
    action = change(CLOUD, new)
    assert action.action is ActionKind.UPDATE
    assert action.rollout is Rollout.IMMEDIATE


@pytest.mark.parametrize(
    ("new", "forced"),
    [
        (CLOUD.replace("placement: cluster", "placement: any"), "placement"),
        (CLOUD + "blocks: 2\n", "blocks"),
        (CLOUD + "idle_duration: 1h\n", "idle_duration"),
    ],
)
def test_cloud_fleet_other_fields_force_a_replace(new: str, forced: str) -> None:
    action = change(CLOUD, new)
    assert action.action is ActionKind.REPLACE
    assert action.forced_by == (forced,)
    assert "delete and re-create the fleet" in action.reason


SSH = """
type: fleet
name: gpu
ssh_config:
  user: ubuntu
  identity_file: ~/.ssh/id
  hosts:
    - 10.0.0.1
    - hostname: 10.0.0.2
      identity_file: ~/.ssh/k2
"""


def test_switching_a_fleet_between_cloud_and_ssh_is_a_replace() -> None:
    action = change(CLOUD, SSH)
    assert action.action is ActionKind.REPLACE
    assert "between cloud and SSH" in action.reason


def test_ssh_fleet_adding_and_removing_hosts_is_in_place() -> None:
    added = SSH.replace("    - 10.0.0.1\n", "    - 10.0.0.1\n    - 10.0.0.3\n")
    assert change(SSH, added).action is ActionKind.UPDATE
    removed = SSH.replace("    - 10.0.0.1\n", "")
    assert change(SSH, removed).action is ActionKind.UPDATE


def test_ssh_fleet_identity_file_of_a_host_may_change_in_place() -> None:
    action = change(SSH, SSH.replace("~/.ssh/k2", "~/.ssh/k3"))
    assert action.action is ActionKind.UPDATE
    assert fields_of(action) == {"ssh_config.hosts"}


def test_ssh_fleet_writing_a_host_as_a_mapping_is_not_a_change_of_the_host() -> None:
    spelled = SSH.replace("    - 10.0.0.1\n", "    - hostname: 10.0.0.1\n")
    assert change(SSH, spelled).action is ActionKind.UPDATE


def test_ssh_fleet_changing_a_kept_host_or_the_user_is_a_replace() -> None:
    port = SSH.replace(
        "      identity_file: ~/.ssh/k2\n", "      identity_file: ~/.ssh/k2\n      port: 2222\n"
    )
    assert change(SSH, port).forced_by == ("ssh_config.hosts",)
    user = SSH.replace("user: ubuntu", "user: root")
    action = change(SSH, user)
    assert action.action is ActionKind.REPLACE
    assert action.forced_by == ("ssh_config.user",)


GATEWAY = """
type: gateway
name: gw
backend: aws
region: us-east-1
domain: example.com
"""


def test_gateway_domain_default_replicas_are_in_place() -> None:
    action = change(GATEWAY, GATEWAY.replace("example.com", "example.org") + "replicas: 2\n")
    assert action.action is ActionKind.UPDATE
    assert fields_of(action) == {"domain", "replicas"}


def test_gateway_region_change_is_a_replace() -> None:
    action = change(GATEWAY, GATEWAY.replace("us-east-1", "eu-west-1"))
    assert action.action is ActionKind.REPLACE
    assert action.forced_by == ("region",)


def test_failed_gateway_is_replaced_even_for_in_place_fields() -> None:
    action = change(GATEWAY, GATEWAY.replace("example.com", "example.org"), status="failed")
    assert action.action is ActionKind.REPLACE
    assert "has failed" in action.reason


VOLUME = """
type: volume
name: data
backend: aws
region: us-east-1
size: 100GB
"""


def test_any_volume_change_is_a_data_destroying_replace() -> None:
    action = change(VOLUME, VOLUME.replace("100GB", "200GB"))
    assert action.action is ActionKind.REPLACE
    assert action.destroys_data
    assert action.forced_by == ("size",)
    assert "data on the volume is lost" in action.reason
    assert [(c.field, c.old, c.new) for c in action.fields] == [("size", 100.0, 200.0)]
