"""dstack 0.22.5's own CLI against `dockyard server`: the everyday commands.

`project add/list`, `fleet apply/list/get`, `apply -d` of a task from a plain directory and
from a git repo, `ps` (`-a`, `-v`, `--json`), `logs`, `stop` (`-x`), `delete`; what it
creates is `cli:admin`, and a Git-owned run is refused with `dockyard apply`'s message.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time

import pytest

from tests.compat.conftest import DSTACK, Dstack
from tests.web.serving import wait_until

pytestmark = pytest.mark.slow

TASK = """type: task
name: {name}
commands:
  - echo hello from {name}
  - echo second line
"""

SLEEPER = """type: task
name: {name}
commands:
  - echo started
  - sleep 600
"""


def test_project_add_and_list(dstack: Dstack) -> None:
    out = dstack.ok("project", "list")
    assert "main" in out and dstack.server.url in out


def test_fleet_list_and_get(dstack: Dstack) -> None:
    listed = dstack.ok("fleet", "list")
    assert "local" in listed and "ssh" in listed  # dstack shows `remote` hosts as ssh
    got = json.loads(dstack.ok("fleet", "get", "local", "--json"))
    assert got["name"] == "local" and got["spec"]["configuration"]["name"] == "local"
    assert got["instances"] and got["instances"][0]["project_name"] == "main"


def test_apply_detached_ps_and_logs_from_a_plain_directory(dstack: Dstack) -> None:
    dstack.write("hello.dstack.yml", TASK.format(name="hello"))
    out = dstack.ok("apply", "-f", "hello.dstack.yml", "-y", "-d")
    assert "Run hello submitted" in out
    dstack.wait_status("hello", "done")
    assert dstack.ok("logs", "hello").splitlines() == ["hello from hello", "second line"]
    assert "hello from hello" in dstack.ok("logs", "hello", "--diagnose")  # no runner logs
    # `--since` (dstack's start_time): lines carry no time, a submission that ended before
    # it has none, one that ended after shows all
    assert dstack.ok("logs", "hello", "--since", "2100-01-01T00:00:00+00:00") == ""
    assert "second line" in dstack.ok("logs", "hello", "--since", "1d")
    table = dstack.ok("ps", "-a")
    assert "hello" in table and "done" in table
    verbose = dstack.ok("ps", "-a", "-v")
    assert "hello" in verbose and "cpu=" in verbose
    listed = json.loads(dstack.ok("ps", "-a", "--json"))
    (run,) = [r for r in listed["runs"] if r["run_spec"]["run_name"] == "hello"]
    assert run["status"] == "done" and run["user"] == "admin"
    assert run["jobs"][0]["job_spec"]["commands"] == ["echo hello from hello", "echo second line"]
    assert run["latest_job_submission"]["job_provisioning_data"]["backend"] == "remote"


def test_apply_from_a_git_repo_directory(dstack: Dstack) -> None:
    repo = dstack.workdir / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    dstack.write("gitrun.dstack.yml", TASK.format(name="gitrun"), where=repo)
    out = dstack.ok("apply", "-f", "gitrun.dstack.yml", "-y", "-d", cwd=repo)
    assert "Run gitrun submitted" in out
    dstack.wait_status("gitrun", "done")
    assert "hello from gitrun" in dstack.ok("logs", "gitrun", cwd=repo)


def test_stop_abort_and_delete(dstack: Dstack) -> None:
    dstack.write("sleeper.dstack.yml", SLEEPER.format(name="sleeper"))
    dstack.ok("apply", "-f", "sleeper.dstack.yml", "-y", "-d")
    dstack.wait_status("sleeper", "running")
    dstack.ok("stop", "sleeper", "-x", "-y")
    dstack.wait_status("sleeper", "terminated", "failed", "done")
    assert "Run sleeper deleted" in dstack.ok("delete", "-f", "sleeper.dstack.yml", "-y")
    assert dstack.run_status("sleeper") == "missing"
    again = dstack("delete", "-f", "sleeper.dstack.yml", "-y")  # dstack's resource_not_exists
    assert again.returncode == 1 and "Run sleeper does not exist" in again.stdout


def test_reapplying_a_finished_task_runs_it_again(dstack: Dstack) -> None:
    dstack.write("again.dstack.yml", TASK.format(name="again"))
    dstack.ok("apply", "-f", "again.dstack.yml", "-y", "-d")
    dstack.wait_status("again", "done")
    dstack.ok("apply", "-f", "again.dstack.yml", "-y", "-d")
    with dstack.server.client(dstack.server.admin_token) as http:
        runs = http.post("/api/project/main/runs/list", json={"all": True}).json()
    assert len([r for r in runs if r["run_spec"]["run_name"] == "again"]) == 2


def test_what_dstack_creates_is_unmanaged_cli_work(dstack: Dstack) -> None:
    dstack.write("owned.dstack.yml", TASK.format(name="owned"))
    dstack.ok("apply", "-f", "owned.dstack.yml", "-y", "-d")
    with dstack.server.client(dstack.server.admin_token) as http:
        run = http.post("/api/project/main/runs/get", json={"run_name": "owned"}).json()
    assert run["origin"] == "cli:admin"


def test_ps_watch_shows_the_table_until_interrupted(dstack: Dstack) -> None:
    main, child = pty.openpty()  # rich draws its live table only on a terminal
    watcher = subprocess.Popen(
        [DSTACK, "ps", "-a", "-w"],
        cwd=dstack.workdir,
        env={**dstack.env, "TERM": "xterm"},
        stdin=child,
        stdout=child,
        stderr=child,
    )
    os.close(child)
    seen = b""
    deadline = time.monotonic() + 120
    try:
        while b"SUBMITTED" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if ready:
                seen += os.read(main, 65536)
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.wait(timeout=60)
        os.close(main)
    assert b"NAME" in seen and b"SUBMITTED" in seen, seen[-2000:]


def test_zz_fleet_delete_instances_is_refused_then_delete(dstack: Dstack) -> None:
    refused = dstack("fleet", "delete", "local", "-i", "0", "-y")
    assert refused.returncode == 1
    said = " ".join(refused.stdout.split())
    assert "the local fleet is this host: delete the fleet instead" in said, said
    dstack.ok("fleet", "delete", "local", "-y")
    wait_until(lambda: "local" not in dstack.ok("fleet", "list"), what="the fleet to go")
