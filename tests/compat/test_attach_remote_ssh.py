"""dstack 0.22.5 on another machine than the server, for a job on an SSH fleet.

As test_attach_remote.py, with the server's only fleet an SSH fleet on the tests' loopback
sshd (`tests.compat.sshfleet`): dstack's client runs in another network namespace and
reaches the server only at the veth address (`--host`, `--attach-host`); the job is
presented there, on the server's listener to the host agent's SSH server for users (through
the server's SSH login to the host). `attach -p` answers HTTP in the namespace, `ssh <run>`
runs in the job, attached `apply` streams; through the listener a key the host's agent does
not hold (never issued, or another project's user's) is refused and a member's key reaches
neither the agent's API nor the host's sshd; neither is reachable from the namespace
directly either.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.conftest import free_port
from tests.compat.netns import ANSWERS, CONNECTS, SSH_OPTIONS, ClientNamespace, client_namespace
from tests.compat.sshfleet import SSHFleet, ssh_fleet_server
from tests.web.serving import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's client"),
]

TASK = """type: task
name: farssh
ports: [{port}]
env:
  - MARK=from-the-ssh-host-job
commands:
  - python3 -m http.server {port}
"""

STREAMED = """type: task
name: farsshlogs
commands:
  - echo first-line-of-farsshlogs
  - sleep 2
  - echo last-line-of-farsshlogs
"""


@pytest.fixture(scope="module")
def far_fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SSHFleet, ClientNamespace]]:
    with client_namespace() as space:
        ip = space.server_ip
        tmp = tmp_path_factory.mktemp("farssh")
        with ssh_fleet_server(tmp, prefix=space.prefix, host=ip, attach_host=ip) as fleet:
            yield fleet, space


def _run(space: ClientNamespace, *argv: str) -> subprocess.CompletedProcess[str]:
    return space.run(*argv, timeout=90)


def test_attach_and_ssh_to_an_ssh_fleet_job_from_another_machine(
    far_fleet: tuple[SSHFleet, ClientNamespace],
) -> None:
    fleet, space = far_fleet
    dstack = fleet.dstack
    port, local = free_port(), free_port()
    dstack.write("farssh.dstack.yml", TASK.format(port=port))
    dstack.ok("apply", "-f", "farssh.dstack.yml", "-y", "-d")
    dstack.wait_status("farssh", "running", timeout=180)
    with dstack.server.client(dstack.server.admin_token) as http:
        run = http.post("/api/project/main/runs/get", json={"run_name": "farssh"}).json()
    submission = run["latest_job_submission"]
    data = submission["job_provisioning_data"]
    assert data["dockyard_backend"] == "ssh" and data["hostname"] == space.server_ip, data
    listener = int(data["ssh_port"])
    attach = subprocess.Popen(
        dstack.argv("attach", "farssh", "-p", f"{local}:{port}"),
        cwd=dstack.workdir,
        env=dstack.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{local}/"
        wait_until(
            lambda: (
                _run(space, sys.executable, "-c", ANSWERS, url).returncode == 0
                or attach.poll() is not None
            ),
            timeout=120,
            what="the forwarded port to answer in the client namespace",
        )
        assert attach.poll() is None, attach.stdout.read() if attach.stdout else ""
        config = dstack.home / ".dstack" / "ssh" / "config"
        shell = _run(space, "ssh", "-F", str(config), "-o", "BatchMode=yes", "farssh", "echo $MARK")
        assert shell.returncode == 0 and shell.stdout.strip() == "from-the-ssh-host-job", shell
        _refusals(fleet, space, str(submission["id"]), listener)
    finally:
        attach.send_signal(signal.SIGINT)
        try:
            attach.wait(timeout=30)
        except subprocess.TimeoutExpired:
            attach.kill()
    dstack.ok("stop", "farssh", "-x", "-y")


def _refusals(fleet: SSHFleet, space: ClientNamespace, job_id: str, listener: int) -> None:
    stranger = fleet.dstack.home / "stranger_key"
    made = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], capture_output=True
    )
    assert made.returncode == 0, made
    target = f"{job_id}@{space.server_ip}"
    denied = _run(space, "ssh", "-p", str(listener), "-i", str(stranger), *SSH_OPTIONS, target)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
    # a user of another project: the host's agent does not hold the key
    mallory = _key_of(fleet, "mallory", "other", admin=False)
    other = _run(space, "ssh", "-p", str(listener), "-i", str(mallory), *SSH_OPTIONS, target)
    assert other.returncode != 0 and "Permission denied" in other.stderr, other
    # a member (the admin) through the listener: the job, but not the agent's API nor sshd
    member = _key_of(fleet, "admin", "main", admin=True)
    base = ("ssh", "-p", str(listener), "-i", str(member), *SSH_OPTIONS)
    own = _run(space, *base, target, "echo", "hi")
    assert own.returncode == 0 and own.stdout.strip() == "hi", own
    for port in (fleet.agent_port, fleet.host.port):
        forward = _run(space, *base, "-W", f"127.0.0.1:{port}", target)
        assert forward.returncode != 0 and "prohibited" in forward.stderr.lower(), forward
    # the host's sshd and the agent's ports (the host is this machine): out of reach
    for port in (fleet.host.port, fleet.agent_port, fleet.session_port):
        for where in (space.server_ip, "127.0.0.1"):
            reached = _run(space, sys.executable, "-c", CONNECTS, where, str(port))
            assert reached.returncode != 0, (where, port)


def _key_of(fleet: SSHFleet, username: str, project: str, *, admin: bool) -> Path:
    """The key pair dstack's client gets for `username` (made, a member of `project` only,
    unless `admin`: the server's admin)."""
    server = fleet.dstack.server
    token = server.admin_token
    if not admin:
        with server.client(server.admin_token) as http:
            made = http.post("/api/users/create", json={"username": username})
            assert made.status_code == 200, made.text
            http.post("/api/projects/create", json={"project_name": project})
            members = {"members": [{"username": username, "project_role": "user"}]}
            assert http.post(f"/api/projects/{project}/add_members", json=members).is_success
        token = made.json()["creds"]["token"]
    with server.client(token) as http:
        key = http.post("/api/users/get_my_user").json()["ssh_private_key"]
    path = fleet.dstack.home / f"{username}_key"
    path.write_text(key)
    path.chmod(0o600)
    return path


def test_attached_apply_streams_an_ssh_fleet_job_to_another_machine(
    far_fleet: tuple[SSHFleet, ClientNamespace],
) -> None:
    dstack = far_fleet[0].dstack
    dstack.write("farsshlogs.dstack.yml", STREAMED)
    done = dstack("apply", "-f", "farsshlogs.dstack.yml", "-y", timeout=240)
    assert done.returncode == 0, (done.stdout, done.stderr)
    first = done.stdout.index("first-line-of-farsshlogs")
    assert done.stdout.index("last-line-of-farsshlogs") > first, done.stdout
    assert dstack.run_status("farsshlogs") == "done"
