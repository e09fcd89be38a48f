"""`ssh_config` of a fleet to its hosts (`schemas.sshhosts`) and SSH targets
(`agent.ssh.hosts`): per-host overrides, defaults, and a host's jump host kept all the way
to the target the server tunnels to its agent through (`engine.agents.AgentDirectory`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from agent.ssh.hosts import to_target
from agent.tunnel import SSHTarget, TunnelPool
from reconciler.adapters.db.capacity import HostRecord
from reconciler.domain.inventory import InstanceRecord
from reconciler.engine.agents import AgentDirectory
from schemas.fleets import SSHParams
from schemas.sshhosts import FleetHost, JumpHost, fleet_hosts, spec_fleet_hosts
from stacks.local import LocalSettings, desired_items
from stacks.protocol import StackResource

FLEET = {
    "user": "ubuntu",
    "identity_file": "~/.ssh/id_fleet",
    "proxy_jump": {"hostname": "bastion", "user": "jump", "identity_file": "/k/jump"},
    "hosts": [
        "10.0.0.1",
        {"hostname": "10.0.0.2", "port": 2222, "user": "root", "identity_file": "/k/r"},
        {"hostname": "10.0.0.3", "proxy_jump": {"hostname": "b2", "port": 2200, "user": "j2",
                                                "identity_file": "/k/j2"}},
    ],
}  # fmt: skip
BASTION = JumpHost("bastion", 22, "jump", "/k/jump")


def test_hosts_inherit_the_fleet_fields_and_override_them() -> None:
    first, second, third = fleet_hosts(SSHParams.model_validate(FLEET))
    assert first == FleetHost(0, "10.0.0.1", 22, "ubuntu", "~/.ssh/id_fleet", BASTION, None, 1)
    assert second == FleetHost(1, "10.0.0.2", 2222, "root", "/k/r", BASTION, None, 1)
    assert third.proxy_jump == JumpHost("b2", 2200, "j2", "/k/j2")
    assert to_target(second) == SSHTarget(
        "10.0.0.2",
        2222,
        user="root",
        identity_file="/k/r",
        proxy_jump=SSHTarget("bastion", 22, user="jump", identity_file="/k/jump"),
    )


def test_a_host_without_user_or_key_gets_the_defaults() -> None:
    (host,) = spec_fleet_hosts({"ssh_config": {"hosts": ["gpu-7"]}}) or []
    assert (host.user, host.identity_file, host.proxy_jump) == (None, None, None)
    assert to_target(host, default_key="/srv/key") == SSHTarget(
        "gpu-7", 22, user="root", identity_file="/srv/key"
    )
    assert spec_fleet_hosts({"nodes": 2}) is None


def test_the_jump_reaches_the_stack_and_the_recorded_instance(tmp_path: Path) -> None:
    """The local engine lists each host with its jump; the instance the fleets worker records
    for it (`HostRecord.resources`) gives back the same target, jump included."""
    resource = StackResource("main", "fleet", "lab", "f.yml", {"ssh_config": FLEET})
    items = desired_items(resource, LocalSettings(data_dir=tmp_path, user="me"))
    assert items["host/10.0.0.1"]["props"]["proxy_jump"] == BASTION.as_record()
    hosts = fleet_hosts(SSHParams.model_validate(FLEET))
    directory = AgentDirectory(TunnelPool(), identity_file="/srv/key")
    for host in hosts:
        target = to_target(host)
        record = HostRecord(
            f"lab-{host.index}",
            target.hostname,
            target.port,
            target.user,
            10998,
            "ssh",
            identity_file=target.identity_file,
            proxy_jump=host.proxy_jump,
        )
        instance = InstanceRecord(
            id=f"i{host.index}",
            fleet_id="f",
            project_id="p",
            name=record.name,
            status="idle",
            created_at=datetime.now(UTC),
            hostname=record.hostname,
            ssh_port=record.ssh_port,
            ssh_user=record.ssh_user,
            agent_port=record.agent_port,
            resources=record.resources,
        )
        assert directory.address(instance).target == target
