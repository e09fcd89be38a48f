"""`dockyard server` as a process: flags and `DOCKYARD_*` env, first start, graceful stop.

A task keeps running (its output file keeps growing) while the server is stopped with
SIGTERM, and the restarted server still shows it running.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.web.serving import wait_until

pytestmark = pytest.mark.slow
SECRET = "env-secret"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    def __init__(self, tmp_path: Path) -> None:
        self.port = _free_port()
        self.data = tmp_path / "data"
        self.env = {
            **os.environ,
            "HOME": str(tmp_path / "home"),
            "DOCKYARD_CONFIG": str(tmp_path / "home" / "cfg" / "config.yml"),
            "DOCKYARD_WEBHOOK_SECRET": SECRET,
            "DOCKYARD_PORT": str(self.port),
            "DOCKYARD_PROJECT": "",
        }
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        code = "from reconciler.cli.main import run; run()"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, "server", "--data-dir", str(self.data)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_until(self._healthy, timeout=60, what="dockyard server to answer")

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"server exited: {self.process.communicate()[0]}")
        try:
            return httpx.get(f"{self.url}/healthcheck", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> tuple[int, str]:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=60)
        return self.process.returncode, out

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        code = "from reconciler.cli.main import run; run()"
        return subprocess.run(
            [sys.executable, "-c", code, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[ServerProcess]:
    from agent.local import stop_local_agent

    proc = ServerProcess(tmp_path)
    try:
        yield proc
    finally:
        if proc.process is not None and proc.process.poll() is None:
            proc.process.kill()
            proc.process.communicate(timeout=30)
        stop_local_agent(proc.data)


def _job_file(data: Path, name: str) -> Path | None:
    """A file the job wrote in its working directory: a sandboxed job (the server is root)
    may write only there, `/var/lib/dockyard-jobs/<agent>/<job id>/`; a job of a server
    that is not root has its working directory in the server's data dir."""
    hits = [*Path("/var/lib/dockyard-jobs").glob(f"*/*/{name}"), *data.glob(f"**/{name}")]
    return hits[0] if hits else None


def test_server_first_start_env_and_graceful_shutdown(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    s = server_process
    s.start()
    token_file = s.data / "admin-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    config = Path(s.env["DOCKYARD_CONFIG"]).read_text()
    assert s.url in config and token_file.read_text().strip() in config
    body = b'{"ref": "refs/heads/other", "after": "' + b"a" * 40 + b'"}'
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    hook = httpx.post(
        f"{s.url}/api/webhooks/github",
        content=body,
        headers={
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "p1",
            "X-Hub-Signature-256": signature,
        },
    )
    assert hook.status_code == 202 and hook.json()["outcome"] == "ignored"

    fleet = tmp_path / "fleet.dstack.yml"
    fleet.write_text("type: fleet\nname: local\nnodes: 1\n")
    assert s.cli("apply", "-f", str(fleet), "-y").returncode == 0
    name = f"ticks-{uuid.uuid4().hex}"  # unique: other tests' jobs share the work root
    task = tmp_path / "tick.dstack.yml"
    task.write_text(
        "type: task\nname: tick\ncommands:\n"
        f"  - for i in $(seq 1 600); do echo $i >> {name}; sleep 0.1; done\n"
    )
    assert s.cli("apply", "-f", str(task), "-y", "-d").returncode == 0
    wait_until(lambda: _job_file(s.data, name) is not None, timeout=90, what="the task to start")
    ticks = _job_file(s.data, name)
    assert ticks is not None

    code, out = s.stop()
    assert code == 0, out
    assert "Traceback" not in out
    after_stop = len(ticks.read_text().splitlines())
    wait_until(
        lambda: len(ticks.read_text().splitlines()) > after_stop + 5,
        timeout=30,
        what="the job to keep running without the server",
    )

    s.start()  # a restart keeps the admin token and the config
    assert token_file.read_text().strip() in Path(s.env["DOCKYARD_CONFIG"]).read_text()
    ps = s.cli("ps")
    assert ps.returncode == 0 and "tick" in ps.stdout and "running" in ps.stdout, ps.stderr
    assert s.cli("stop", "tick", "-y", "-x").returncode == 0
    code, out = s.stop()
    assert code == 0, out
