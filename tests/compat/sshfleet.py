"""A real `dockyard server` whose only fleet is an SSH fleet on the tests' loopback sshd.

`ssh_fleet` (module scope): an OpenSSH sshd on a free 127.0.0.1 port
(`tests.services.sshd.start_sshd`, root, a generated client key), and a server built by the
composition root with the real runtime whose fleets worker deploys its agent there, as to
any SSH host: into a per-module agent directory (`--ssh-agent-dir`) on a free agent port
(`--ssh-agent-port`; its SSH server for users one below), never `~/.dockyard/agent` or
10998. dstack 0.22.5's CLI is registered against it (`Dstack`, as in `conftest`). At the end
the deployed agent and its jobs are stopped and sshd with them.

Used by `test_attach_ssh.py`; other modules import the fixture by name
(`from tests.compat.sshfleet import ssh_fleet`). `ssh_host_server` is the same server and
host without the fleet (`tests/security/test_project_deletion.py` applies its own).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.deploy import session_port_for
from agent.server.executors import proctable
from tests.compat.conftest import Dstack, _real, short_home
from tests.services.missing import skip_or_fail
from tests.services.sshd import SSHHost, make_client_key, sshd_unavailable_reason, start_sshd
from tests.web.serving import Running, running_server, wait_until

FLEET = """type: fleet
name: ssh
ssh_config:
  user: root
  identity_file: {key}
  hosts:
    - hostname: 127.0.0.1
      port: {port}
"""


@dataclass
class SSHFleet:
    """The server (`dstack.server`), dstack's CLI against it, and the fleet's one host."""

    dstack: Dstack
    host: SSHHost
    agent_dir: Path  # the deployed agent's directory on the host (authorized_keys, data/)
    agent_port: int

    @property
    def session_port(self) -> int:
        """The deployed agent's SSH server for users, on 127.0.0.1 of the host."""
        return session_port_for(self.agent_port)


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair() -> int:
    """A free port whose port below is free too (the agent's and its SSH server's), taken
    below the kernel's ephemeral range: the agent binds them only once the fleet is
    deployed, seconds later, and meanwhile the connections and `bind(0)`s of tests running
    beside this one take ephemeral ports."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(max(2000, low - 15000), low)
        if _bindable(port) and _bindable(session_port_for(port)):
            return port
    raise RuntimeError("no two free adjacent ports")


def _ephemeral_low() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def stop_deployed_agent(agent_dir: Path) -> None:
    """Kill the agent the server deployed into `agent_dir` and its jobs' processes."""
    pid_file = agent_dir / "agent.pid"
    if pid_file.exists():
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
    jobs_dir = agent_dir / "data" / "jobs"
    for job in jobs_dir.iterdir() if jobs_dir.is_dir() else ():
        for process in proctable.job_processes(-1, job.name):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(process.pid, signal.SIGKILL)


@dataclass
class SSHServer:
    """A server set to deploy its agent to `host` (no fleet yet), dstack's CLI for it (not
    registered), the server's key for the host and where the agent goes."""

    server: Running
    dstack: Dstack
    host: SSHHost
    key: Path  # the server's key for the host (`identity_file` of a fleet)
    agent_dir: Path
    agent_port: int


@contextlib.contextmanager
def ssh_host_server(
    tmp: Path, *, prefix: tuple[str, ...] = (), **extra: object
) -> Iterator[SSHServer]:
    """sshd with a generated client key and a server with `extra` settings whose agent for
    SSH hosts goes to `tmp/agent` on a free port pair; dstack's CLI runs under `prefix`.
    At the end the deployed agent and its jobs are stopped, and sshd."""
    reason = sshd_unavailable_reason()
    if reason:
        skip_or_fail(reason)
    workdir, agent_dir = tmp / "work", tmp / "agent"
    workdir.mkdir()
    key = make_client_key(tmp / "client")
    host = start_sshd(tmp / "host", key)
    agent_port = free_port_pair()
    settings = {
        "ssh_agent_dir": str(agent_dir),
        "ssh_agent_port": agent_port,
        "key_dirs": str(key.parent),
        **extra,
    }
    try:
        with short_home(tmp / "home") as home, running_server(tmp, _real, **settings) as server:
            client = Dstack(server, home, workdir, prefix=prefix)
            yield SSHServer(server, client, host, key, agent_dir, agent_port)
    finally:
        stop_deployed_agent(agent_dir)
        host.stop()


@contextlib.contextmanager
def ssh_fleet_server(
    tmp: Path, *, prefix: tuple[str, ...] = (), **extra: object
) -> Iterator[SSHFleet]:
    """sshd, a server with `extra` settings whose SSH fleet is up on it, and dstack's CLI
    (run under `prefix`, e.g. in another network namespace) registered at its URL."""
    with ssh_host_server(tmp, prefix=prefix, **extra) as up:
        server, client = up.server, up.dstack
        url, token = server.url, server.admin_token
        client.ok("project", "add", "--name", "main", "--url", url, "--token", token, "-y")
        text = FLEET.format(key=up.key, port=up.host.port)
        with server.client(token) as http:
            applied = http.post(
                "/api/project/main/fleets/apply", json={"text": text, "path": "ssh.yml"}
            )
            assert applied.status_code == 200, applied.text
        wait_until(lambda: client.fleet_ready("ssh"), timeout=180, what="the SSH fleet")
        yield SSHFleet(client, up.host, up.agent_dir, up.agent_port)
        with server.client(token) as http:
            for run in http.post("/api/runs/list", json={"only_active": True}).json():
                names = [run["run_spec"]["run_name"]]
                body = {"runs_names": names, "abort": True}
                http.post("/api/project/main/runs/stop", json=body)


@pytest.fixture(scope="module")
def ssh_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHFleet]:
    with ssh_fleet_server(tmp_path_factory.mktemp("sshfleet")) as fleet:
        yield fleet
