"""Attack: stay in a deleted project's jobs on its SSH hosts.

A member (`mallory`) of project `doomed` has a key pair, a running job on the project's SSH
fleet (a real server deploying its agent to the tests' loopback sshd, `tests.compat.
sshfleet`) and an open shell in it through the host agent's SSH server. An admin deletes the
project. Its records go at once; what it left on the host must go too, without the web doing
SSH (the teardowns worker does it): the job is stopped and removed from the agent, the open
shell ends, the host agent's key file keeps the server's key only (no fleet lists the host
any more) and the agent is stopped, so a new session is refused. The same project deleted
while its fleet shares the host with another project's fleet: the job goes and the key file
is written for the other fleet (its members stay, mallory goes), the agent keeps running.
On the local fleet (the server's own agent, never stopped): the job is stopped and removed,
and mallory's open shell ends (her key leaves the local agent's file at once). An SSH fleet
deleted on its own retires its host the same way once its instance has ended.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.local import local_agent_ssh_port, local_paths
from agent.server.executors import proctable
from tests.compat.conftest import Dstack
from tests.compat.sshfleet import FLEET, ssh_host_server
from tests.services.missing import needs_ssh_client
from tests.services.sshd import SSHHost
from tests.web.serving import Running, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    needs_ssh_client(),
]

TASK = """type: task
name: doomedjob
commands:
  - echo started
  - sleep 3600
"""


@dataclass
class Host:  # the SSH host, or (`ssh_port`) the local agent's SSH server
    server: Running
    dstack: Dstack
    host: SSHHost
    key: Path  # the server's key for the host
    agent_dir: Path
    agent_port: int
    ssh_port: int | None = None  # the local agent's: its SSH server for users

    @property
    def session_port(self) -> int:
        return self.ssh_port or self.agent_port - 1

    def post(self, path: str, body: Mapping[str, object], token: str | None = None) -> Any:
        with self.server.client(token or self.server.admin_token) as http:
            answer = http.post(path, json=body)
        assert answer.status_code == 200, (path, answer.text)
        return answer.json()

    def fleet(self, project: str, text: str | None = None) -> None:
        text = text or FLEET.format(key=self.key, port=self.host.port)
        self.post(f"/api/project/{project}/fleets/apply", {"text": text, "path": "ssh.yml"})
        name = text.split("name:")[1].split()[0]

        def ready() -> bool:
            with self.server.client(self.server.admin_token) as http:
                got = http.post(f"/api/project/{project}/fleets/get", json={"name": name})
            found = got.json().get("instances", []) if got.status_code == 200 else []
            return any(i["status"] in ("idle", "busy") for i in found)

        wait_until(ready, timeout=180, what=f"fleet {name} of {project}")


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    with ssh_host_server(tmp_path) as up:
        yield Host(up.server, up.dstack, up.host, up.key, up.agent_dir, up.agent_port)


def _member(host: Host, name: str, project: str) -> tuple[Path, str]:
    """A user of `project` with a key pair: (private key file, public key blob)."""
    made = host.post("/api/users/create", {"username": name, "global_role": "user"})
    pair = host.post("/api/users/get_my_user", {}, token=made["creds"]["token"])
    path = host.dstack.home / f"{name}_key"
    path.write_text(pair["ssh_private_key"])
    path.chmod(0o600)
    members = {"members": [{"username": name, "project_role": "user"}]}
    host.post(f"/api/projects/{project}/add_members", members)
    return path, str(pair["ssh_public_key"]).split()[1]


def _ssh(host: Host, key: Path, command: str) -> list[str]:
    argv = ["ssh", "-p", str(host.session_port), "-i", str(key), "-F", "/dev/null"]
    argv += ["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
    argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    return [*argv, "doomedjob@127.0.0.1", command]


def _let_in(host: Host, key: Path) -> bool:
    done = subprocess.run(
        _ssh(host, key, "echo hi"), capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode == 0 and done.stdout.strip() == "hi"


def _refused(host: Host, key: Path) -> bool:
    done = subprocess.run(
        _ssh(host, key, "echo hi"), capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode != 0 and "hi" not in done.stdout


def _run_job(host: Host, project: str) -> str:
    """Start the task in `project` on the SSH host; the agent's id of its job."""
    dstack, server = host.dstack, host.server
    url, token = server.url, server.admin_token
    dstack.ok("project", "add", "--name", project, "--url", url, "--token", token, "-y")
    dstack.write("doomed.dstack.yml", TASK)
    dstack.ok("apply", "-f", "doomed.dstack.yml", "-y", "-d", "--project", project)
    jobs_dir = host.agent_dir / "data" / "jobs"

    def running() -> bool:
        with server.client(token) as http:
            got = http.post(f"/api/project/{project}/runs/get", json={"run_name": "doomedjob"})
        return got.status_code == 200 and got.json().get("status") == "running"

    wait_until(running, timeout=180, what="the run to be running")
    (job,) = [p.name for p in jobs_dir.iterdir()] if jobs_dir.is_dir() else ["?"]
    return job


def _agent_alive(host: Host) -> bool:
    pid = host.agent_dir / "agent.pid"
    with contextlib.suppress(ValueError, OSError):
        return Path(f"/proc/{int(pid.read_text().strip())}").exists()
    return False


def _job_gone(host: Host, job_id: str) -> bool:
    jobs_dir = host.agent_dir / "data" / "jobs"
    return not (jobs_dir / job_id).exists() and not proctable.job_processes(-1, job_id)


@contextlib.contextmanager
def _open_shell(host: Host, key: Path) -> Iterator[subprocess.Popen[str]]:
    """An open shell in the job with `key` (its `ready` read), killed at the end if open."""
    shell = subprocess.Popen(
        _ssh(host, key, "echo ready; exec sleep 600"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert shell.stdout is not None
        assert shell.stdout.readline().strip() == "ready"
        yield shell
    finally:
        if shell.poll() is None:
            shell.kill()
        shell.wait()


def test_a_deleted_projects_member_loses_its_jobs_and_the_host(host: Host) -> None:
    host.post("/api/projects/create", {"project_name": "doomed"})
    key, blob = _member(host, "mallory", "doomed")
    host.fleet("doomed")
    job_id = _run_job(host, "doomed")
    keys_file = host.agent_dir / "authorized_keys"
    assert blob in keys_file.read_text()
    wait_until(lambda: _let_in(host, key), timeout=60, what="mallory let in")
    with _open_shell(host, key) as shell:
        host.post("/api/projects/doomed/delete", {})
        wait_until(lambda: shell.poll() is not None, timeout=120, what="the open shell to end")
        wait_until(lambda: _job_gone(host, job_id), timeout=120, what="the job stopped, removed")
        wait_until(lambda: not _agent_alive(host), timeout=120, what="the host agent stopped")
        lines = keys_file.read_text().splitlines()
        assert blob not in keys_file.read_text()
        assert len(lines) == 1 and "DOCKYARD_ROLE" not in lines[0]  # the server's key only
        assert _refused(host, key)


def test_a_host_another_fleet_lists_keeps_its_agent_and_that_fleets_members(
    host: Host,
) -> None:
    host.post("/api/projects/create", {"project_name": "doomed"})
    host.post("/api/projects/create", {"project_name": "stays"})
    key, blob = _member(host, "mallory", "doomed")
    _, other_blob = _member(host, "olive", "stays")
    host.fleet("stays")
    host.fleet("doomed")  # the same host, the same agent
    job_id = _run_job(host, "doomed")
    keys_file = host.agent_dir / "authorized_keys"
    wait_until(lambda: _let_in(host, key), timeout=60, what="mallory let in")
    host.post("/api/projects/doomed/delete", {})
    wait_until(lambda: _job_gone(host, job_id), timeout=120, what="the job stopped, removed")
    wait_until(lambda: blob not in keys_file.read_text(), timeout=120, what="mallory's key gone")
    assert other_blob in keys_file.read_text() and _agent_alive(host)
    assert _refused(host, key)
    with httpx.Client(base_url=host.server.url) as http:  # the server still serves `stays`
        assert http.get("/healthcheck").status_code == 200


def test_a_deleted_projects_jobs_stop_on_the_local_fleet(host: Host) -> None:
    host.post("/api/projects/create", {"project_name": "doomed"})
    key, _ = _member(host, "mallory", "doomed")
    host.fleet("doomed", "type: fleet\nname: local\nnodes: 1\n")
    data_dir = host.server.settings.data_dir
    agent_dir, ssh_port = local_paths(data_dir).root, local_agent_ssh_port(data_dir)
    local = Host(host.server, host.dstack, host.host, host.key, agent_dir, 0, ssh_port)
    job_id = _run_job(local, "doomed")
    wait_until(lambda: _let_in(local, key), timeout=60, what="mallory let in")
    with _open_shell(local, key) as shell:
        host.post("/api/projects/doomed/delete", {})
        wait_until(lambda: shell.poll() is not None, timeout=120, what="the open shell to end")
        wait_until(lambda: _job_gone(local, job_id), timeout=120, what="the job stopped, removed")
        assert _refused(local, key)


def test_a_fleet_deleted_on_its_own_retires_its_host(host: Host) -> None:
    host.post("/api/projects/create", {"project_name": "lab"})
    key, blob = _member(host, "mallory", "lab")
    host.fleet("lab")
    keys_file = host.agent_dir / "authorized_keys"
    wait_until(lambda: blob in keys_file.read_text(), timeout=60, what="mallory's key on the host")
    host.post("/api/project/lab/fleets/delete", {"names": ["ssh"]})
    wait_until(lambda: not _agent_alive(host), timeout=120, what="the host agent stopped")
    lines = keys_file.read_text().splitlines()
    assert len(lines) == 1 and "DOCKYARD_ROLE" not in lines[0]  # the server's key only
    assert _refused(host, key)
