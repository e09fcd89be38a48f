"""Fixtures of the dstack compatibility tests: a real `dockyard` server and dstack's own client.

The server is built by the composition root with the real runtime (`reconciler.engine`) and
a `local` fleet, once per module; dstack 0.22.5's CLI (the `dstack` console script of this
environment) and its Python API run in subprocesses with `HOME` in a temp dir, registered
with `dstack project add`, so nothing of the developer's `~/.dstack` is read or written.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from reconciler.adapters.db import Store
from reconciler.ports import Controller
from reconciler.settings import Settings
from tests.services.missing import need_module
from tests.web.serving import Running, running_server, wait_until

need_module("dstack")  # dstack==0.22.5, the compatibility contract (the dev extra)

DSTACK = str(Path(sys.executable).parent / "dstack")


@contextlib.contextmanager
def short_home(home: Path) -> Iterator[Path]:
    """`home` (made here) under a short path: a symlink in a fresh dir of the temp root.

    dstack's CLI puts its SSH control sockets at `~/.dstack/ssh/<run>.control.sock.<16
    random chars>`, and a Unix socket's path holds 107 bytes at most. Under pytest's temp
    dirs (`/tmp/pytest-of-root/pytest-1041/popen-gw0/sshfleet0/home`) a 9-letter run name
    made 108: ssh refused to open the tunnel and dstack said only "Can't connect to the
    remote host". A user's real `~` is short; so is this one.
    """
    home.mkdir()
    holder = Path(tempfile.mkdtemp(prefix="dsh"))
    link = holder / "h"
    link.symlink_to(home)
    try:
        yield link
    finally:
        shutil.rmtree(holder, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _real(settings: Settings, store: Store) -> Controller:
    from reconciler.engine.controller import build_controller

    return build_controller(settings, store)


@dataclass
class Dstack:
    """dstack's CLI and Python API as a user runs them, against one Dockyard server."""

    server: Running
    home: Path
    workdir: Path
    prefix: tuple[str, ...] = ()  # runs every command under it (`ip netns exec NS`)

    def argv(self, *args: str) -> list[str]:
        """The command line of `dstack ARGS` as this client runs it."""
        return [*self.prefix, DSTACK, *args]

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self.home),
            "COLUMNS": "250",
            "NO_COLOR": "1",
            "TERM": "dumb",
            "DSTACK_CLI_LOG_LEVEL": "warning",
        }

    def __call__(
        self, *args: str, cwd: Path | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            cwd=cwd or self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args: str, cwd: Path | None = None) -> str:
        done = self(*args, cwd=cwd)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    @contextlib.contextmanager
    def running(
        self, *args: str, stdout: IO[str] | int = subprocess.PIPE
    ) -> Iterator[subprocess.Popen[str]]:
        """`dstack ARGS` left running (stderr merged into `stdout`), interrupted at the end
        as a user's Ctrl-C (SIGINT) and killed if it has not exited 30 s later."""
        process = subprocess.Popen(
            self.argv(*args),
            cwd=self.workdir,
            env=self.env,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            yield process
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()

    def python(self, code: str, timeout: float = 120) -> object:
        """Run `code` (dstack's Python API) in a subprocess; it prints one JSON value."""
        done = subprocess.run(
            [*self.prefix, sys.executable, "-c", code],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, (done.stdout, done.stderr)
        return json.loads(done.stdout.strip().splitlines()[-1])

    def write(self, name: str, text: str, where: Path | None = None) -> Path:
        path = (where or self.workdir) / name
        path.write_text(text)
        return path

    def fleet_ready(self, name: str) -> bool:
        with self.server.client(self.server.admin_token) as http:
            answer = http.post("/api/project/main/fleets/get", json={"name": name})
        instances = answer.json().get("instances", []) if answer.status_code == 200 else []
        return any(i["status"] in ("idle", "busy") for i in instances)

    def run_status(self, name: str) -> str:
        with self.server.client(self.server.admin_token) as http:
            answer = http.post("/api/project/main/runs/get", json={"run_name": name})
        return str(answer.json().get("status")) if answer.status_code == 200 else "missing"

    def wait_status(self, name: str, *statuses: str, timeout: float = 120) -> None:
        wait_until(
            lambda: self.run_status(name) in statuses,
            timeout=timeout,
            what=f"run {name} to be {'/'.join(statuses)}",
        )


@pytest.fixture(scope="module")
def dstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dstack]:
    from agent.local import stop_local_agent

    tmp = tmp_path_factory.mktemp("compat")
    workdir = tmp / "work"
    workdir.mkdir()
    try:
        with short_home(tmp / "home") as home, running_server(tmp, _real) as server:
            client = Dstack(server, home, workdir)
            client.ok(
                "project",
                "add",
                "--name",
                "main",
                "--url",
                server.url,
                "--token",
                server.admin_token,
                "-y",
            )
            client.write("fleet.dstack.yml", "type: fleet\nname: local\nnodes: 1\n")
            client.ok("apply", "-f", "fleet.dstack.yml", "-y")
            wait_until(lambda: client.fleet_ready("local"), timeout=120, what="the local fleet")
            yield client
            with server.client(server.admin_token) as http:
                active = http.post("/api/runs/list", json={"only_active": True}).json()
                for run in active:
                    name = run["run_spec"]["run_name"]
                    http.post(
                        "/api/project/main/runs/stop", json={"runs_names": [name], "abort": True}
                    )
    finally:
        stop_local_agent(tmp / "data")
