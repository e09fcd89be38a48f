"""The key file of an SSH host's agent SSH server (`engine.hostkeys`): the control plane's
line and one line per user who may reach the fleet's jobs — its project's members and the
global admins, with a stored key pair — limited to that project; the server settings that
say where the agent goes on the host."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest

from agent.deploy import session_port_for
from agent.ssh.server import key_projects, user_key_line
from agent.tunnel import SSHTarget
from reconciler.adapters.db.models import Fleet
from reconciler.adapters.db.store import Store
from reconciler.adapters.user_keys import UserKeys
from reconciler.engine.hostkeys import host_keys_text, keys_text
from reconciler.errors import UsageError
from reconciler.settings import Settings
from tests.store.members import set_member


class Box:
    def encrypt(self, plaintext: str) -> str:
        return plaintext

    def decrypt(self, ciphertext: str) -> str:
        return ciphertext


def test_keys_text_is_the_control_line_then_users_with_a_key_limited_to_their_projects() -> None:
    text = keys_text(
        "ssh-ed25519 AAAAserver dockyard",
        {"u1": "ssh-ed25519 AAAAone", "u3": "ssh-ed25519 AAAAthree"},
        {"u1": ["main"], "u2": ["main"]},  # u2 has no key pair; u3 may not reach the fleet
    )
    lines = text.splitlines()
    assert lines == [
        "ssh-ed25519 AAAAserver dockyard",
        user_key_line("ssh-ed25519 AAAAone", ["main"]),
    ]
    assert keys_text("", {}, {}) == ""


def test_host_keys_text_names_the_fleets_members_and_admins(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", migrate=True)
    main, other = store.get_or_create_project("main"), store.get_or_create_project("other")
    member, admin = store.create_user("ann"), store.create_user("root2", global_role="admin")
    outsider = store.create_user("eve")
    set_member(store, main.id, "ann", "user")
    set_member(store, other.id, "eve", "admin")
    fleet = store.add(Fleet(project_id=main.id, name="ssh", spec={}, status="active",
                            created_at=store.now()))  # fmt: skip
    data_dir = tmp_path / "data"
    keys = UserKeys(data_dir, Box())
    pairs = {u.id: keys.pair(u.id, u.name, []) for u in (member, admin, outsider)}
    server_key = asyncssh.generate_private_key("ssh-ed25519")
    key_path = tmp_path / "id_ed25519"
    server_key.write_private_key(str(key_path))
    target = SSHTarget("127.0.0.1", 22, identity_file=str(key_path))

    lines = host_keys_text(store, data_dir, fleet.id, target).splitlines()

    assert lines[0] == server_key.export_public_key().decode().strip()
    assert sorted(lines[1:]) == sorted(
        user_key_line(pairs[u.id].public_key, ["main"]) for u in (member, admin)
    )
    assert pairs[outsider.id].public_key.split()[1] not in "\n".join(lines)
    gone = host_keys_text(store, data_dir, "no-such-fleet", target).splitlines()
    assert gone == lines[:1]
    environment = {"DOCKYARD_ROLE": "user", "DOCKYARD_PROJECTS": "main"}
    assert key_projects(environment) == frozenset({"main"})


def test_the_agent_dir_and_port_are_server_settings() -> None:
    default = Settings.from_env({})
    assert (default.ssh_agent_dir, default.ssh_agent_port) == (".dockyard/agent", 10998)
    assert session_port_for(10998) == 10997  # never dstack-runner's 10999
    env = {"DOCKYARD_SSH_AGENT_DIR": "/srv/dockyard-agent", "DOCKYARD_SSH_AGENT_PORT": "20100"}
    settings = Settings.from_env(env)
    assert (settings.ssh_agent_dir, settings.ssh_agent_port) == ("/srv/dockyard-agent", 20100)
    for hostile in ("-rf", " x", "a\nb"):  # it lands (quoted) in remote shell commands
        with pytest.raises(UsageError, match="ssh_agent_dir"):
            Settings.from_env({"DOCKYARD_SSH_AGENT_DIR": hostile})
    with pytest.raises(UsageError, match="ssh_agent_port"):
        Settings.from_env({"DOCKYARD_SSH_AGENT_PORT": "80"})
