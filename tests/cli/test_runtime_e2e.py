"""End to end with the real runtime (`reconciler.engine`) on the local fleet: `apply`
attached, `logs -f` following a running job, and `attach` forwarding a local port to a
job's HTTP server through the server's SSH tunnel.

The server is built by the composition root with `reconciler.engine`'s controller; the
local agent it starts is stopped at the end (jobs are stopped first).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.adapters.db import Store
from reconciler.ports import Controller
from reconciler.settings import Settings
from tests.cli.conftest import Cli
from tests.web.serving import running_server, wait_until

pytestmark = pytest.mark.slow


def _real(settings: Settings, store: Store) -> Controller:
    from reconciler.engine.controller import build_controller

    return build_controller(settings, store)


@pytest.fixture
def real_cli(tmp_path: Path) -> Iterator[Cli]:
    from agent.local import stop_local_agent

    home = tmp_path / "home"
    try:
        # jobs here write to and wait on the test's private temp dir: run them as the agent's user
        with running_server(tmp_path, _real, local_job_user="self") as server:
            env = {
                "DOCKYARD_CONFIG": str(server.settings.cli_config),
                "HOME": str(home),
                "DOCKYARD_PROJECT": "",
                "COLUMNS": "200",
            }
            cli = Cli(server, env)
            yield cli
            for run in ("web", "count"):
                cli("stop", run, "-y", "-x")
    finally:
        stop_local_agent(tmp_path / "data")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _popen(cli: Cli, *args: str) -> subprocess.Popen[str]:
    code = "from reconciler.cli.main import run; run()"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **cli.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _fleet(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "fleet.dstack.yml"
    path.write_text("type: fleet\nname: local\nnodes: 1\n")
    assert cli("apply", "-f", str(path), "-y").exit_code == 0


def test_apply_attached_and_logs_follow(real_cli: Cli, tmp_path: Path) -> None:
    _fleet(real_cli, tmp_path)
    task = tmp_path / "count.dstack.yml"
    gate = tmp_path / "go"
    task.write_text(
        "type: task\nname: count\ncommands:\n"
        "  - echo first\n"
        f"  - while [ ! -e {gate} ]; do sleep 0.1; done\n"
        "  - for i in 1 2 3; do echo line-$i; done\n"
    )
    attached = _popen(real_cli, "apply", "-f", str(task), "-y")
    wait_until(
        lambda: real_cli("run", "get", "count").stdout.count('"running"') > 0,
        timeout=90,
        what="the task to run",
    )
    follower = _popen(real_cli, "logs", "count", "-f")
    time.sleep(0.5)  # let the follower connect while the job still runs (not an assertion)
    gate.write_text("go")
    out, err = follower.communicate(timeout=90)
    assert follower.returncode == 0, err
    assert out.splitlines() == ["first", "line-1", "line-2", "line-3"]
    out, err = attached.communicate(timeout=90)
    assert attached.returncode == 0, err
    assert "first" in out and "line-3" in out and "Run count done" in out


def test_attach_forwards_a_port_to_the_jobs_http_server(real_cli: Cli, tmp_path: Path) -> None:
    _fleet(real_cli, tmp_path)
    port, local = _free_port(), _free_port()
    site = tmp_path / "site"
    task = tmp_path / "web.dstack.yml"
    task.write_text(
        f"type: task\nname: web\nports:\n  - {port}\ncommands:\n"
        f"  - mkdir -p {site} && echo hello-through-the-tunnel > {site}/index.html\n"
        f"  - python3 -m http.server {port} --bind 127.0.0.1 --directory {site}\n"
    )
    assert real_cli("apply", "-f", str(task), "-y", "-d").exit_code == 0
    attach = _popen(real_cli, "attach", "web", "-p", f"{local}:{port}")
    try:

        def answered() -> bool:
            try:
                reply = httpx.get(f"http://127.0.0.1:{local}/", timeout=2)
            except httpx.HTTPError:
                return False
            return reply.status_code == 200 and "hello-through-the-tunnel" in reply.text

        try:
            wait_until(answered, timeout=90, what="the forwarded port to answer")
        except AssertionError:
            attach.kill()
            out, err = attach.communicate(timeout=10)
            run = real_cli("run", "get", "web").stdout
            raise AssertionError(f"attach said: {out!r} {err!r}; run: {run[-2500:]}") from None
        alias = (Path(real_cli.env["HOME"]) / ".dockyard" / "ssh" / "config").read_text()
        assert "Host web" in alias
        ssh_config = (Path(real_cli.env["HOME"]) / ".ssh" / "config").read_text()
        assert ssh_config.startswith("Include ~/.dockyard/ssh/config")
    finally:
        real_cli("stop", "web", "-y", "-x")
        out, err = attach.communicate(timeout=60)
    assert f"Forwarded localhost:{local}" in out, err


def test_apply_brings_the_local_repo_and_files(real_cli: Cli, tmp_path: Path) -> None:
    _fleet(real_cli, tmp_path)
    repo = tmp_path / "proj"
    repo.mkdir()
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "app.txt").write_text("app-v1\n")
    (repo / "debug.log").write_text("ignored\n")
    (tmp_path / "extra.txt").write_text("extra-file\n")
    task = repo / "bring.dstack.yml"
    task.write_text(
        "type: task\nname: bring\nrepos: [.]\nfiles:\n  - ../extra.txt:conf/extra.txt\n"
        "commands:\n  - cat app.txt conf/extra.txt\n  - test -e debug.log || echo no-log\n"
    )
    first = real_cli("apply", "-f", str(task), "-y")
    assert first.exit_code == 0, first.stdout
    assert "app-v1" in first.stdout and "extra-file" in first.stdout
    assert "no-log" in first.stdout, "what .gitignore ignores stays home"
    again = real_cli("apply", "-f", str(task), "-y")
    assert "Detected no changes" in again.stdout, "the same tree is the same archive"
    (repo / "app.txt").write_text("app-v2\n")
    changed = real_cli("apply", "-f", str(task), "-y")
    assert changed.exit_code == 0, changed.stdout
    assert "app-v2" in changed.stdout, "changed code re-runs the task"


def _status(cli: Cli, run: str) -> str | None:
    listed = json.loads(cli("ps", "-a", "--json").stdout)["runs"]
    return next((r["status"] for r in listed if r["run_spec"]["run_name"] == run), None)


def test_stop_and_delete_carried_out_by_the_runtime(real_cli: Cli, tmp_path: Path) -> None:
    """What tests/cli/test_commands.py sees only asked of the store (a stand-in runtime),
    carried out: a stopped run ends `terminated` and leaves `ps`, a file's run is deleted
    once it has ended (refused while it runs), and a deleted fleet goes away."""
    _fleet(real_cli, tmp_path)
    task = tmp_path / "nap.dstack.yml"
    task.write_text("type: task\nname: nap\ncommands:\n  - sleep 600\n")
    assert real_cli("apply", "-f", str(task), "-y", "-d").exit_code == 0
    wait_until(lambda: _status(real_cli, "nap") == "running", 90, "the task to run")
    active = real_cli("delete", "-f", str(task), "-y")
    assert active.exit_code == 1 and "still active: stop it first" in active.stderr
    assert real_cli("stop", "nap", "-y").exit_code == 0
    wait_until(lambda: _status(real_cli, "nap") == "terminated", 90, "the stop")
    assert "nap" not in real_cli("ps").stdout and "nap" in real_cli("ps", "-a").stdout
    assert real_cli("delete", "-f", str(task), "-y").exit_code == 0
    assert _status(real_cli, "nap") is None
    assert real_cli("fleet", "delete", "local", "-y").exit_code == 0
    wait_until(
        lambda: json.loads(real_cli("fleet", "list", "--json").stdout) == [],
        90,
        "the fleet to go",
    )
