"""Membership changes reach an SSH host's agent without redeploying it.

The server deploys its agent to the tests' loopback sshd (`sshfleet`); the key file of that
agent's SSH server for users holds the keys of who may reach the fleet's jobs. A user outside
the fleet's project is refused by the host's agent (key unknown there); added to the project,
the same key opens a session in the job (the fleets worker writes the host's key file again:
`web.dstack_attach.sync_user_keys` makes the fleet due, `store.wake_ssh_fleets`); removed, it
is refused again; added again and then deleted as a user, refused again. The session goes
straight to the host agent's SSH server (`127.0.0.1:<session port>` of the host), as dstack's
hops end there.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.compat.sshfleet import SSHFleet, ssh_fleet  # noqa: F401 - the module's fixture
from tests.web.serving import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's client"),
]

TASK = """type: task
name: sshmembers
commands:
  - sleep 3600
"""


def _session(fleet: SSHFleet, key: Path) -> subprocess.CompletedProcess[str]:
    """`echo hi` in the run's job, straight at the host agent's SSH server for users."""
    command = ["ssh", "-p", str(fleet.session_port), "-i", str(key), "-F", "/dev/null"]
    command += ["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
    command += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    return subprocess.run(
        [*command, "sshmembers@127.0.0.1", "echo", "hi"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _let_in(fleet: SSHFleet, key: Path) -> bool:
    done = _session(fleet, key)
    return done.returncode == 0 and done.stdout.strip() == "hi"


def _refused(fleet: SSHFleet, key: Path) -> bool:
    done = _session(fleet, key)
    return done.returncode != 0 and "Permission denied" in done.stderr


def _user_key(fleet: SSHFleet, name: str) -> tuple[Path, str]:
    server = fleet.dstack.server
    with server.client(server.admin_token) as http:
        made = http.post("/api/users/create", json={"username": name, "global_role": "user"})
        assert made.status_code == 200, made.text
    with server.client(made.json()["creds"]["token"]) as http:
        pair = http.post("/api/users/get_my_user").json()
    path = fleet.dstack.home / f"{name}_key"
    path.write_text(pair["ssh_private_key"])
    path.chmod(0o600)
    return path, str(pair["ssh_public_key"]).split()[1]


def _post(fleet: SSHFleet, path: str, body: Mapping[str, object]) -> None:
    server = fleet.dstack.server
    with server.client(server.admin_token) as http:
        answer = http.post(path, json=body)
    assert answer.status_code == 200, answer.text


def test_members_added_and_removed_reach_the_hosts_agent(ssh_fleet: SSHFleet) -> None:  # noqa: F811
    dstack, keys_file = ssh_fleet.dstack, ssh_fleet.agent_dir / "authorized_keys"
    dstack.write("sshmembers.dstack.yml", TASK)
    dstack.ok("apply", "-f", "sshmembers.dstack.yml", "-y", "-d")
    dstack.wait_status("sshmembers", "running", timeout=180)
    key, blob = _user_key(ssh_fleet, "carol")
    members = {"members": [{"username": "carol", "project_role": "user"}]}
    try:
        assert _refused(ssh_fleet, key)
        assert blob not in keys_file.read_text()
        _post(ssh_fleet, "/api/projects/main/add_members", members)
        wait_until(lambda: _let_in(ssh_fleet, key), timeout=60, what="the added member let in")
        _post(ssh_fleet, "/api/projects/main/remove_members", {"usernames": ["carol"]})
        wait_until(lambda: _refused(ssh_fleet, key), timeout=60, what="the removed one refused")
        assert blob not in keys_file.read_text()
        _post(ssh_fleet, "/api/projects/main/add_members", members)
        wait_until(lambda: _let_in(ssh_fleet, key), timeout=60, what="the member let in again")
        _post(ssh_fleet, "/api/users/delete", {"username": "carol"})
        wait_until(lambda: _refused(ssh_fleet, key), timeout=60, what="the deleted user refused")
        assert blob not in keys_file.read_text()
    finally:
        dstack.ok("stop", "sshmembers", "-x", "-y")
