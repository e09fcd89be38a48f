"""dstack 0.22.5 on another machine than the server: `attach`, `ssh <run>`, attached `apply`.

The "other machine" is a network namespace (`tests.compat.netns`): dstack's CLI, its Python
API and OpenSSH run there and reach the server only at the veth address the server listens
on (`--host`) and attaches at (`--attach-host`). The server's 127.0.0.1 listeners, among
them the local agent's SSH server and HTTP API, are out of the client's reach; jobs are
presented at the attach host, on a listener the server forwards to the local agent's SSH
server (`engine.sessionforwards`), on a port of `--attach-ports`; an IPv6 attach host works
too (the API at the IPv4 address).

Also the attack from there: a key the server never issued, and the key of a user of
another project naming this project's job (a session, dstack's hop, a job port) are
refused by the agent; no user key reaches the agent's API through the listener, and the
server's own key gets no login there; the agent's own ports are not reachable from the
client namespace at all.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.local import local_agent_ssh_port, local_paths
from tests.compat.conftest import Dstack, _real, free_port, short_home
from tests.compat.farclient import (
    attached,
    attached_apply_streams,
    in_space,
    ssh_in,
    stranger_key,
    task,
    user_key,
)
from tests.compat.netns import CONNECTS, SSH_OPTIONS, ClientNamespace, client_namespace
from tests.compat.pyapi import attach_script
from tests.services.missing import needs_ssh_client
from tests.web.serving import running_server, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    needs_ssh_client(),
]

ATTACH_PORTS = range(41000, 41020)  # --attach-ports: the listener takes one of these


@pytest.fixture(scope="module")
def space() -> Iterator[ClientNamespace]:
    with client_namespace() as made:
        yield made


@contextlib.contextmanager
def _remote_server(space: ClientNamespace, tmp: Path, **settings: object) -> Iterator[Dstack]:
    """A server whose API listens at the veth address, with `settings` (the attach host);
    dstack's CLI in the namespace, registered with that URL; the local fleet up."""
    workdir = tmp / "work"
    workdir.mkdir()
    with (
        short_home(tmp / "home") as home,
        running_server(tmp, _real, host=space.server_ip, **settings) as server,
    ):
        client = Dstack(server, home, workdir, prefix=space.prefix)
        token = server.admin_token
        client.ok("project", "add", "--name", "main", "--url", server.url, "--token", token, "-y")
        client.write("fleet.dstack.yml", "type: fleet\nname: local\nnodes: 1\n")
        client.ok("apply", "-f", "fleet.dstack.yml", "-y")
        wait_until(lambda: client.fleet_ready("local"), timeout=120, what="the local fleet")
        yield client
        with server.client(token) as http:
            for run in http.post("/api/runs/list", json={"only_active": True}).json():
                body = {"runs_names": [run["run_spec"]["run_name"]], "abort": True}
                http.post("/api/project/main/runs/stop", json=body)


@pytest.fixture(scope="module")
def remote(space: ClientNamespace, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dstack]:
    """Attaching at the veth address, on `--attach-ports` ATTACH_PORTS."""
    ports = f"{ATTACH_PORTS.start}-{ATTACH_PORTS.stop - 1}"
    tmp = tmp_path_factory.mktemp("remote")
    with _remote_server(space, tmp, attach_host=space.server_ip, attach_ports=ports) as client:
        yield client


@pytest.fixture
def remote6(space: ClientNamespace, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dstack]:
    """Attaching at the veth's IPv6 address (the API on its IPv4 one)."""
    tmp = tmp_path_factory.mktemp("remote6")
    with _remote_server(space, tmp, attach_host=space.server_ip6) as client:
        yield client


def _connects(space: ClientNamespace, host: str, port: int) -> bool:
    return in_space(space, sys.executable, "-c", CONNECTS, host, str(port)).returncode == 0


def _presented(remote: Dstack, name: str = "far") -> dict[str, object]:
    with remote.server.client(remote.server.admin_token) as http:
        run = http.post("/api/project/main/runs/get", json={"run_name": name}).json()
    return dict(run["latest_job_submission"]["job_provisioning_data"]) | {
        "job_id": run["latest_job_submission"]["id"]
    }


def test_attach_and_ssh_from_another_machine(remote: Dstack, space: ClientNamespace) -> None:
    port, local = free_port(), free_port()
    remote.write("far.dstack.yml", task("far", port))
    remote.ok("apply", "-f", "far.dstack.yml", "-y", "-d")
    remote.wait_status("far", "running")
    data = _presented(remote)
    assert data["hostname"] == space.server_ip and data["ssh_port"] in ATTACH_PORTS, data
    with attached(remote, space, "far", local, port):
        _refusals(remote, space, str(data["job_id"]), int(str(data["ssh_port"])), port)
    _attach_logs_show_the_request(remote)
    script = attach_script("far", local=free_port(), port=port, tries=60)
    assert remote.python(script, timeout=180) == 200  # dstack's Run.attach() from there too
    remote.ok("stop", "far", "-x", "-y")


def test_attach_at_an_ipv6_attach_host(remote6: Dstack, space: ClientNamespace) -> None:
    port, local = free_port(), free_port()
    remote6.write("far6.dstack.yml", task("far6", port))
    remote6.ok("apply", "-f", "far6.dstack.yml", "-y", "-d")
    remote6.wait_status("far6", "running")
    assert _presented(remote6, "far6")["hostname"] == space.server_ip6
    with attached(remote6, space, "far6", local, port):
        pass
    remote6.ok("stop", "far6", "-x", "-y")


def _attach_logs_show_the_request(remote: Dstack) -> None:
    """`dstack attach --logs` from the namespace prints the job's log: http.server's line for
    the request made through the forward (the job's port is free there: forwarded as is)."""
    path = remote.home / "attach-logs.out"
    with open(path, "w") as out, remote.running("attach", "far", "--logs", stdout=out) as logs:
        wait_until(
            lambda: '"GET / HTTP/1.1" 200' in path.read_text() or logs.poll() is not None,
            timeout=120,
            what="`dstack attach --logs` to print the job's log",
        )
        assert '"GET / HTTP/1.1" 200' in path.read_text(), path.read_text()


def _forward(
    space: ClientNamespace, key: Path, port: int, user: str, dest: str
) -> subprocess.CompletedProcess[str]:
    """A ``direct-tcpip`` channel to `dest` (host:port) through the listener (``ssh -W``)."""
    return ssh_in(space, key, port, user, "-W", dest)


def _refusals(
    remote: Dstack, space: ClientNamespace, job_id: str, listener: int, job_port: int
) -> None:
    data_dir = remote.server.settings.data_dir
    agent_ssh = local_agent_ssh_port(data_dir)
    state = json.loads(local_paths(data_dir).state.read_text())
    agent_http = int(state["http_port"])
    # a key the server never issued: not even a login
    denied = ssh_in(space, stranger_key(remote), listener, job_id, "echo", "hi")
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
    # no key at all (no password or keyboard-interactive login either)
    target = f"{job_id}@{space.server_ip}"
    keyless = ("-o", "PubkeyAuthentication=no", "-p", str(listener), target, "echo", "hi")
    nokey = in_space(space, "ssh", *SSH_OPTIONS, *keyless)
    assert nokey.returncode != 0 and "Permission denied" in nokey.stderr, nokey
    # a user of another project naming this project's job: a session, dstack's hop to the
    # agent as that job, the job's port: all refused by the agent
    mallory = user_key(remote, "mallory", "other")
    session = ssh_in(space, mallory, listener, job_id, "echo", "hi")
    assert session.returncode != 0 and "no job named" in session.stderr, session
    hop = _forward(space, mallory, listener, job_id, f"localhost:{agent_ssh}")
    assert hop.returncode != 0 and "prohibited" in hop.stderr.lower(), hop
    port = _forward(space, mallory, listener, job_id, f"127.0.0.1:{job_port}")
    assert port.returncode != 0 and "prohibited" in port.stderr.lower(), port
    # the agent's API: no user key reaches it through the listener, not even a member's
    member = user_key(remote)
    for key in (mallory, member):
        api = _forward(space, key, listener, job_id, f"127.0.0.1:{agent_http}")
        assert api.returncode != 0 and "prohibited" in api.stderr.lower(), api
    # the server's own key (the agent's API on the server's machine): no login there
    control = _forward(space, data_dir / "ssh" / "id_ed25519", listener, "root", "127.0.0.1:1")
    assert control.returncode != 0 and "Permission denied" in control.stderr, control
    own = ssh_in(space, member, listener, job_id, "echo", "hi")  # the refusals are not vacuous
    assert own.returncode == 0 and own.stdout.strip() == "hi", own
    # the agent's own ports and the server's loopback: out of the client namespace's reach
    for where in (space.server_ip, "127.0.0.1"):
        assert not _connects(space, where, agent_http)
        assert agent_ssh is not None and not _connects(space, where, agent_ssh)
    assert _connects(space, space.server_ip, listener)


def test_attached_apply_streams_logs_to_another_machine(remote: Dstack) -> None:
    attached_apply_streams(remote, "farlogs", local_paths(remote.server.settings.data_dir).log)
