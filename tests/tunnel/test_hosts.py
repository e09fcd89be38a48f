"""`ssh_config` of a fleet to SSH targets: per-host overrides, defaults, clear errors."""

from __future__ import annotations

import os

import pytest

from agent.ssh.hosts import SSHConfigError, to_targets
from agent.tunnel import SSHTarget
from schemas.fleets import SSHParams


def test_hosts_inherit_the_fleet_fields_and_override_them() -> None:
    fleet = SSHParams.model_validate(
        {
            "user": "ubuntu",
            "identity_file": "~/.ssh/id_fleet",
            "proxy_jump": {"hostname": "bastion", "user": "jump", "identity_file": "/k/jump"},
            "hosts": [
                "10.0.0.1",
                {"hostname": "10.0.0.2", "port": 2222, "user": "root", "identity_file": "/k/r"},
            ],
        }
    )
    first, second = to_targets(fleet)
    bastion = SSHTarget("bastion", 22, user="jump", identity_file="/k/jump")
    home = os.path.expanduser("~")
    assert first == SSHTarget(
        "10.0.0.1", 22, user="ubuntu", identity_file=f"{home}/.ssh/id_fleet", proxy_jump=bastion
    )
    assert second == SSHTarget(
        "10.0.0.2", 2222, user="root", identity_file="/k/r", proxy_jump=bastion
    )


def test_a_host_without_user_is_named_in_the_error() -> None:
    fleet = SSHParams.model_validate({"identity_file": "/k", "hosts": ["gpu-7"]})
    with pytest.raises(SSHConfigError, match="host gpu-7: no user"):
        to_targets(fleet)
