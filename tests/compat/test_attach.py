"""dstack 0.22.5's `attach` against `dockyard server` on the local fleet: the user's key pair
from `users/get_my_user`, a port forwarded through the local agent's SSH server (an HTTP
request through it is answered), and `ssh <run>` with the config dstack wrote (OpenSSH).
"""

from __future__ import annotations

import subprocess
import urllib.request

import pytest

from agent.local import local_agent_ssh_port
from tests.compat.conftest import Dstack, free_port
from tests.compat.pyapi import attach_script
from tests.services.missing import needs_ssh_client
from tests.web.serving import wait_until

pytestmark = pytest.mark.slow

TASK = """type: task
name: att
ports: [{port}]
commands:
  - python3 -m http.server {port}
"""


def _outsider_is_refused(dstack: Dstack, job_port: int) -> None:
    """A user who is not in the run's project gets a key pair too, but neither a session
    in the job nor its port through the local agent; added to the project, the session
    opens; removed, it is refused again."""
    with dstack.server.client(dstack.server.admin_token) as http:
        made = http.post("/api/users/create", json={"username": "eve", "global_role": "user"})
    with dstack.server.client(made.json()["creds"]["token"]) as http:
        key = http.post("/api/users/get_my_user").json()["ssh_private_key"]
    path = dstack.home / "eve_key"
    path.write_text(key)
    path.chmod(0o600)
    agent_port = local_agent_ssh_port(dstack.server.settings.data_dir)
    base = ["ssh", "-p", str(agent_port), "-i", str(path), "-F", "/dev/null"]
    base += ["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    base += ["-o", "UserKnownHostsFile=/dev/null"]
    shell = subprocess.run(
        [*base, "att@127.0.0.1", "echo", "hi"], capture_output=True, text=True, timeout=60
    )
    assert shell.returncode != 0 and "no job named" in shell.stderr, shell
    forward = subprocess.run(
        [*base, "-W", f"127.0.0.1:{job_port}", "att@127.0.0.1"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert forward.returncode != 0 and "prohibited" in forward.stderr.lower(), forward
    members = {"members": [{"username": "eve", "project_role": "user"}]}
    with dstack.server.client(dstack.server.admin_token) as http:
        assert http.post("/api/projects/main/add_members", json=members).status_code == 200
    joined = subprocess.run(
        [*base, "att@127.0.0.1", "echo", "hi"], capture_output=True, text=True, timeout=60
    )
    assert joined.returncode == 0 and joined.stdout.strip() == "hi", joined
    with dstack.server.client(dstack.server.admin_token) as http:
        removed = http.post("/api/projects/main/remove_members", json={"usernames": ["eve"]})
        assert removed.status_code == 200
    left = subprocess.run(
        [*base, "att@127.0.0.1", "echo", "hi"], capture_output=True, text=True, timeout=60
    )
    assert left.returncode != 0 and "no job named" in left.stderr, left


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


def test_get_my_user_gives_the_callers_key_pair(dstack: Dstack) -> None:
    with dstack.server.client(dstack.server.admin_token) as http:
        first = http.post("/api/users/get_my_user").json()
        again = http.post("/api/users/get_my_user").json()
    assert first["ssh_public_key"].startswith("ssh-ed25519 ")
    assert "OPENSSH PRIVATE KEY" in first["ssh_private_key"]
    assert again["ssh_public_key"] == first["ssh_public_key"]
    stored = list((dstack.server.settings.data_dir / "user-keys").iterdir())
    assert stored and "PRIVATE KEY" not in stored[0].read_text()  # encrypted at rest
    with dstack.server.client(dstack.server.admin_token) as http:
        other = http.post("/api/users/create", json={"username": "bob", "global_role": "user"})
        token = other.json()["creds"]["token"]
        assert "ssh_private_key" not in other.json() or not other.json()["ssh_private_key"]
        listed = http.post("/api/users/list").text
    assert first["ssh_private_key"] not in listed
    with dstack.server.client(token) as http:
        bobs = http.post("/api/users/get_my_user").json()
    assert bobs["ssh_public_key"] != first["ssh_public_key"]
    assert bobs["ssh_private_key"] != first["ssh_private_key"]


@needs_ssh_client()
def test_attach_forwards_a_port_and_ssh_alias_opens_the_job(dstack: Dstack) -> None:
    port, local = free_port(), free_port()
    dstack.write("att.dstack.yml", TASK.format(port=port))
    dstack.ok("apply", "-f", "att.dstack.yml", "-y", "-d")
    dstack.wait_status("att", "running")
    try:
        with dstack.running("attach", "att", "-p", f"{local}:{port}") as attach:
            wait_until(
                lambda: _answers(f"http://127.0.0.1:{local}/") or attach.poll() is not None,
                timeout=90,
                what="the forwarded port to answer",
            )
            assert attach.poll() is None, attach.stdout.read() if attach.stdout else ""
            config = dstack.home / ".dstack" / "ssh" / "config"
            assert "Host att" in config.read_text()
            done = subprocess.run(
                ["ssh", "-F", str(config), "-o", "BatchMode=yes", "att", "echo", "hi"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0 and done.stdout.strip() == "hi", done.stderr
            _outsider_is_refused(dstack, port)
    finally:
        dstack.ok("stop", "att", "-x", "-y")


def test_python_api_run_attach_forwards_a_port(dstack: Dstack) -> None:
    port, local = free_port(), free_port()
    dstack.write("att2.dstack.yml", TASK.format(port=port).replace("name: att", "name: att2"))
    dstack.ok("apply", "-f", "att2.dstack.yml", "-y", "-d")
    dstack.wait_status("att2", "running")
    try:
        assert (
            dstack.python(attach_script("att2", local=local, port=port, tries=60), timeout=180)
            == 200
        )
    finally:
        dstack.ok("stop", "att2", "-x", "-y")
