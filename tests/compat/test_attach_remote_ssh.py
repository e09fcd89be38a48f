"""dstack 0.22.5 on another machine than the server, for a job on an SSH fleet.

As test_attach_remote.py, with the server's only fleet an SSH fleet on the tests' loopback
sshd (`tests.compat.sshfleet`): dstack's client runs in another network namespace and
reaches the server only at the veth address (`--host`, `--attach-host`); the job is
presented there, on the server's listener to the host agent's SSH server for users (through
the server's SSH login to the host). `attach -p` and `Run.attach()` answer HTTP in the
namespace, `ssh <run>` runs in the job, attached `apply` streams; through the listener a
key the host's agent does not hold (never issued, or another project's user's) is refused
and a member's key reaches neither the agent's API nor the host's sshd; neither is
reachable from the namespace directly either.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.compat.conftest import free_port
from tests.compat.farclient import (
    attached,
    attached_apply_streams,
    in_space,
    ssh_in,
    stranger_key,
    task,
    user_key,
)
from tests.compat.netns import CONNECTS, ClientNamespace, client_namespace
from tests.compat.pyapi import attach_script
from tests.compat.sshfleet import SSHFleet, ssh_fleet_server
from tests.services.missing import needs_ssh_client

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    needs_ssh_client(),
]


@pytest.fixture(scope="module")
def far_fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SSHFleet, ClientNamespace]]:
    with client_namespace() as space:
        ip = space.server_ip
        tmp = tmp_path_factory.mktemp("farssh")
        with ssh_fleet_server(tmp, prefix=space.prefix, host=ip, attach_host=ip) as fleet:
            yield fleet, space


def test_attach_and_ssh_to_an_ssh_fleet_job_from_another_machine(
    far_fleet: tuple[SSHFleet, ClientNamespace],
) -> None:
    fleet, space = far_fleet
    dstack = fleet.dstack
    port, local = free_port(), free_port()
    dstack.write("farssh.dstack.yml", task("farssh", port))
    dstack.ok("apply", "-f", "farssh.dstack.yml", "-y", "-d")
    dstack.wait_status("farssh", "running", timeout=180)
    with dstack.server.client(dstack.server.admin_token) as http:
        run = http.post("/api/project/main/runs/get", json={"run_name": "farssh"}).json()
    submission = run["latest_job_submission"]
    data = submission["job_provisioning_data"]
    assert data["dockyard_backend"] == "ssh" and data["hostname"] == space.server_ip, data
    with attached(dstack, space, "farssh", local, port):
        _refusals(fleet, space, str(submission["id"]), int(data["ssh_port"]))
    script = attach_script("farssh", local=free_port(), port=port, tries=60)
    assert dstack.python(script, timeout=180) == 200  # dstack's Run.attach() from there too
    dstack.ok("stop", "farssh", "-x", "-y")


def _refusals(fleet: SSHFleet, space: ClientNamespace, job_id: str, listener: int) -> None:
    denied = ssh_in(space, stranger_key(fleet.dstack), listener, job_id, "echo", "hi")
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
    # a user of another project: the host's agent does not hold the key
    mallory = user_key(fleet.dstack, "mallory", "other")
    other = ssh_in(space, mallory, listener, job_id, "echo", "hi")
    assert other.returncode != 0 and "Permission denied" in other.stderr, other
    # a member (the admin) through the listener: the job, but not the agent's API nor sshd
    member = user_key(fleet.dstack)
    own = ssh_in(space, member, listener, job_id, "echo", "hi")
    assert own.returncode == 0 and own.stdout.strip() == "hi", own
    for port in (fleet.agent_port, fleet.host.port):
        forward = ssh_in(space, member, listener, job_id, "-W", f"127.0.0.1:{port}")
        assert forward.returncode != 0 and "prohibited" in forward.stderr.lower(), forward
    # the host's sshd and the agent's ports (the host is this machine): out of reach
    for port in (fleet.host.port, fleet.agent_port, fleet.session_port):
        for where in (space.server_ip, "127.0.0.1"):
            reached = in_space(space, sys.executable, "-c", CONNECTS, where, str(port))
            assert reached.returncode != 0, (where, port)


def test_attached_apply_streams_an_ssh_fleet_job_to_another_machine(
    far_fleet: tuple[SSHFleet, ClientNamespace],
) -> None:
    attached_apply_streams(far_fleet[0].dstack, "farsshlogs")
