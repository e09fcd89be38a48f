"""What a dstack user on another machine does, for the tests that put dstack's client in
another network namespace (`tests.compat.netns`): test_attach_remote.py (local fleet) and
test_attach_remote_ssh.py (SSH fleet).

`task(name, port)` is an HTTP server job with `MARK` in its env; `attached(...)` runs
`dstack attach NAME -p LOCAL:PORT` in the namespace until the port answers HTTP there and
`ssh NAME 'echo $MARK'` prints the job's value; `attached_apply_streams(...)` runs an
attached `dstack apply` and checks its output; `user_key(...)` is a user's key pair as
dstack's client gets it (`users/get_my_user`), `stranger_key` one the server never issued;
`ssh_in(...)` logs in (or forwards, `-W`) from the namespace with one key only. `in_space`,
`answers` and `attached` take `space=None` for a client on this machine
(tests/compat/test_proxy_jump.py).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.compat.conftest import Dstack
from tests.compat.netns import ANSWERS, SSH_OPTIONS, ClientNamespace
from tests.web.serving import wait_until

_TASK = """type: task
name: {name}
env:
  - MARK=from-the-job-{name}
ports: [{port}]
commands:
  - python3 -m http.server {port}
"""

_STREAMED = """type: task
name: {name}
commands:
  - echo first-line-of-{name}
  - sleep 2
  - echo last-line-of-{name}
"""


def task(name: str, port: int) -> str:
    """A task serving HTTP on `port`, its env `MARK=from-the-job-<name>`."""
    return _TASK.format(name=name, port=port)


def in_space(space: ClientNamespace | None, *argv: str) -> subprocess.CompletedProcess[str]:
    """`argv` in the namespace (None: on this machine, the server's)."""
    if space is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=90)
    return space.run(*argv, timeout=90)


def answers(space: ClientNamespace | None, url: str) -> bool:
    """Whether `url` answers 200 to a client in the namespace."""
    return in_space(space, sys.executable, "-c", ANSWERS, url).returncode == 0


@contextlib.contextmanager
def attached(
    client: Dstack, space: ClientNamespace | None, name: str, local: int, port: int
) -> Iterator[None]:
    """`dstack attach NAME -p LOCAL:PORT` in the namespace (None: where `client` runs on
    this machine): the port answers HTTP there and `ssh NAME 'echo $MARK'` (dstack's alias)
    prints the job's env value; stopped after."""
    with client.running("attach", name, "-p", f"{local}:{port}") as attach:
        wait_until(
            lambda: answers(space, f"http://127.0.0.1:{local}/") or attach.poll() is not None,
            timeout=120,
            what="the forwarded port to answer in the client namespace",
        )
        assert attach.poll() is None, attach.stdout.read() if attach.stdout else ""
        config = client.home / ".dstack" / "ssh" / "config"
        shell = in_space(space, "ssh", "-F", str(config), "-o", "BatchMode=yes", name, "echo $MARK")
        assert shell.returncode == 0 and shell.stdout.strip() == f"from-the-job-{name}", shell
        yield


def attached_apply_streams(client: Dstack, name: str, agent_log: Path | None = None) -> None:
    """An attached `dstack apply` prints the job's two lines in order and exits 0, the run
    `done` (on failure: the tail of `agent_log` too)."""
    client.write(f"{name}.dstack.yml", _STREAMED.format(name=name))
    done = client("apply", "-f", f"{name}.dstack.yml", "-y", timeout=240)
    log = agent_log.read_text()[-4000:] if agent_log is not None and agent_log.exists() else ""
    assert done.returncode == 0, (done.stdout, done.stderr, log)
    first = done.stdout.index(f"first-line-of-{name}")
    assert done.stdout.index(f"last-line-of-{name}") > first, done.stdout
    assert client.run_status(name) == "done"


def user_key(client: Dstack, username: str | None = None, project: str = "other") -> Path:
    """The key pair dstack's client gets: the admin's (no `username`), or that of a new user
    `username`, a member of `project` only (made if missing)."""
    server = client.server
    token = server.admin_token
    if username is not None:
        with server.client(server.admin_token) as http:
            made = http.post("/api/users/create", json={"username": username})
            assert made.status_code == 200, made.text
            http.post("/api/projects/create", json={"project_name": project})
            members = {"members": [{"username": username, "project_role": "user"}]}
            assert http.post(f"/api/projects/{project}/add_members", json=members).is_success
        token = made.json()["creds"]["token"]
    with server.client(token) as http:
        key = http.post("/api/users/get_my_user").json()["ssh_private_key"]
    path = client.home / f"{username or 'admin'}_key"
    path.write_text(key)
    path.chmod(0o600)
    return path


def stranger_key(client: Dstack) -> Path:
    """A key pair the server never issued."""
    path = client.home / "stranger_key"
    made = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], capture_output=True
    )
    assert made.returncode == 0, made
    return path


def ssh_in(
    space: ClientNamespace, key: Path, port: int, user: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """OpenSSH in the namespace to `user`@the server's veth address:`port` with `key` only
    (`-W host:port` among `args`: a ``direct-tcpip`` channel through it)."""
    target = f"{user}@{space.server_ip}"
    return in_space(space, "ssh", "-p", str(port), "-i", str(key), *SSH_OPTIONS, target, *args)
