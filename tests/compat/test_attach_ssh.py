"""dstack 0.22.5's `attach`, `ssh <run>` and `attach --logs` for a job on an SSH fleet.

The server deploys its agent to the tests' loopback sshd as to any SSH host (`sshfleet`),
with the agent's SSH server for users on the host's loopback and a key file holding the
server's key and the keys of the users who may reach the fleet's jobs. dstack's two hops go
to the server's loopback listener to that SSH server (through the server's SSH connection
to the host) and from there to the same SSH server again, which ties the inner connection
to the job: its port is forwarded, `ssh <run>` runs in the job, its log streams. A user
outside the run's project is refused by the host's agent; the Python API's `Run.attach()`
forwards the port too. Attached `dstack apply` streams a
job on the SSH fleet until it ends.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import pytest

from reconciler.api import models as wire
from reconciler.cli.attach import _alias
from reconciler.cli.sshconfig import Alias
from tests.compat.conftest import DSTACK, free_port
from tests.compat.pyapi import attach_script
from tests.compat.sshfleet import SSHFleet, ssh_fleet  # noqa: F401 - the module's fixture
from tests.services.missing import needs_ssh_client
from tests.web.serving import wait_until

pytestmark = [
    pytest.mark.slow,
    # the first test also sets up sshd, the server and the agent's deploy, then runs five
    # dstack processes: ~100 s at load 8, past the default 300 s once at load ~20
    pytest.mark.timeout(600),
    needs_ssh_client(),
]

TASK = """type: task
name: sshatt
ports: [{port}]
env:
  - MARK=inside-the-job-{port}
commands:
  - echo first-line-of-sshatt
  - python3 -m http.server {port}
"""


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


class Output:
    """A process's merged output, read as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _dstack(fleet: SSHFleet, *args: str) -> Output:
    process = subprocess.Popen(
        [DSTACK, *args],
        cwd=fleet.dstack.workdir,
        env=fleet.dstack.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return Output(process)


def _outsider_is_refused(fleet: SSHFleet, job_id: str, hop: tuple[str, int]) -> None:
    """A user outside the run's project has a key pair too, but the host's agent refuses
    it: no session in the job through the server's listener."""
    server = fleet.dstack.server
    with server.client(server.admin_token) as http:
        made = http.post("/api/users/create", json={"username": "mallory", "global_role": "user"})
    with server.client(made.json()["creds"]["token"]) as http:
        pair = http.post("/api/users/get_my_user").json()
    key, public = pair["ssh_private_key"], pair["ssh_public_key"]
    path = fleet.dstack.home / "mallory_key"
    path.write_text(key)
    path.chmod(0o600)
    command = ["ssh", "-p", str(hop[1]), "-i", str(path), "-F", "/dev/null"]
    command += ["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
    command += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    done = subprocess.run(
        [*command, f"{job_id}@{hop[0]}", "echo", "hi"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "Permission denied" in done.stderr, done
    keys = (fleet.agent_dir / "authorized_keys").read_text()
    assert public.split()[1] not in keys  # the host's agent never had it


def _validates_as_dstacks_run(fleet: SSHFleet, listener: int) -> None:
    """dstack's own client reads the run: its models validate what the server presents."""
    from dstack.api.server import APIClient

    api = APIClient(fleet.dstack.server.url, fleet.dstack.server.admin_token)
    submission = api.runs.get("main", "sshatt").latest_job_submission
    jpd, runtime = submission.job_provisioning_data, submission.job_runtime_data
    assert jpd.backend.value == "remote" and jpd.dockerized and jpd.hostname == "127.0.0.1"
    assert jpd.ssh_port == listener and jpd.username == str(submission.id)
    assert runtime.ports == {10022: fleet.session_port}


def test_attach_ssh_alias_and_logs_on_an_ssh_fleet(ssh_fleet: SSHFleet) -> None:  # noqa: F811
    dstack = ssh_fleet.dstack
    port, local = free_port(), free_port()
    dstack.write("sshatt.dstack.yml", TASK.format(port=port))
    dstack.ok("apply", "-f", "sshatt.dstack.yml", "-y", "-d")
    dstack.wait_status("sshatt", "running", timeout=180)
    with dstack.server.client(dstack.server.admin_token) as http:
        run = http.post("/api/project/main/runs/get", json={"run_name": "sshatt"}).json()
    submission = run["jobs"][0]["job_submissions"][-1]
    provisioning = submission["job_provisioning_data"]
    assert provisioning["backend"] == "remote" and provisioning["dockyard_backend"] == "ssh"
    assert provisioning["ssh_port"] not in (ssh_fleet.host.port, ssh_fleet.session_port)
    _validates_as_dstacks_run(ssh_fleet, provisioning["ssh_port"])
    # `dockyard attach`'s own alias still logs in to the host's sshd (our fields)
    alias = _alias(wire.Run.model_validate(run), "sshatt")
    assert alias == Alias("sshatt", "127.0.0.1", ssh_fleet.host.port, "root")
    attach = _dstack(ssh_fleet, "attach", "sshatt", "-p", f"{local}:{port}")
    try:
        wait_until(
            lambda: _answers(f"http://127.0.0.1:{local}/") or attach.process.poll() is not None,
            timeout=120,
            what="the forwarded port to answer",
        )
        assert attach.process.poll() is None, attach.text
        config = dstack.home / ".dstack" / "ssh" / "config"
        done = subprocess.run(
            ["ssh", "-F", str(config), "-o", "BatchMode=yes", "sshatt", "echo", "$MARK"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"inside-the-job-{port}", done
        hop = (str(provisioning["hostname"]), int(provisioning["ssh_port"]))
        _outsider_is_refused(ssh_fleet, submission["id"], hop)
    finally:
        attach.stop()
    # the host is this machine: the job's port is taken here, so it is mapped elsewhere
    logs = _dstack(ssh_fleet, "attach", "sshatt", "--logs", "-p", f"{free_port()}:{port}")
    try:
        wait_until(
            lambda: "first-line-of-sshatt" in logs.text or logs.process.poll() is not None,
            timeout=120,
            what="`dstack attach --logs` to print the job's output",
        )
        assert "first-line-of-sshatt" in logs.text, logs.text
        logs.stop()
        code = attach_script("sshatt", local=free_port(), port=port, tries=30)
        assert dstack.python(code, timeout=180) == 200  # dstack's Python API: Run.attach()
    finally:
        logs.stop()
        dstack.ok("stop", "sshatt", "-x", "-y")


STREAMED = """type: task
name: sshstream
commands:
  - echo first-line-of-sshstream
  - sleep 3
  - echo last-line-of-sshstream
"""


def test_attached_apply_streams_a_job_on_an_ssh_fleet(ssh_fleet: SSHFleet) -> None:  # noqa: F811
    dstack = ssh_fleet.dstack
    dstack.write("sshstream.dstack.yml", STREAMED)
    done = dstack("apply", "-f", "sshstream.dstack.yml", "-y", timeout=240)
    assert done.returncode == 0, (done.stdout, done.stderr)
    first = done.stdout.index("first-line-of-sshstream")
    assert done.stdout.index("last-line-of-sshstream") > first, done.stdout
    assert dstack.run_status("sshstream") == "done"
    with dstack.server.client(dstack.server.admin_token) as http:
        run = http.post("/api/project/main/runs/get", json={"run_name": "sshstream"}).json()
    provisioning = run["jobs"][0]["job_submissions"][-1]["job_provisioning_data"]
    assert provisioning["dockyard_backend"] == "ssh"


def test_a_new_key_pair_is_on_the_hosts_when_get_my_user_answers(ssh_fleet: SSHFleet) -> None:  # noqa: F811
    """A global admin may reach every fleet's jobs: their key pair, made by their first
    `users/get_my_user`, is in the host agent's key file before that call answers."""
    server = ssh_fleet.dstack.server
    with server.client(server.admin_token) as http:
        made = http.post("/api/users/create", json={"username": "grace", "global_role": "admin"})
    with server.client(made.json()["creds"]["token"]) as http:
        blob = http.post("/api/users/get_my_user").json()["ssh_public_key"].split()[1]
    (line,) = [
        x for x in (ssh_fleet.agent_dir / "authorized_keys").read_text().splitlines() if blob in x
    ]
    assert 'DOCKYARD_PROJECTS=main"' in line


# -- membership changes reach the host's agent ---------------------------------------------
#
# Membership changes reach an SSH host's agent without redeploying it.
#
# The server deploys its agent to the tests' loopback sshd (`sshfleet`); the key file of that
# agent's SSH server for users holds the keys of who may reach the fleet's jobs. A user outside
# the fleet's project is refused by the host's agent (key unknown there); added to the project,
# the same key opens a session in the job (the fleets worker writes the host's key file again:
# `web.dstack_attach.sync_user_keys` makes the fleet due, `store.wake_ssh_fleets`); removed, it
# is refused again; added again and then deleted as a user, refused again. The session goes
# straight to the host agent's SSH server (`127.0.0.1:<session port>` of the host), as dstack's
# hops end there.


MEMBERS_TASK = """type: task
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
    dstack.write("sshmembers.dstack.yml", MEMBERS_TASK)
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
