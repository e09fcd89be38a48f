"""Every API-backed command of the CLI against a real server on loopback (a stand-in runtime;
the real controller where the engine's outcome is the subject: `repo_cli`)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from reconciler.adapters.db.models import Job, Project, Run
from tests.cli.conftest import Cli, RepoCli
from tests.web.serving import WEBHOOK_SECRET, wait_until

TASK = "type: task\nname: train\ncommands:\n  - echo hello\n"
SERVICE = (
    "type: service\nname: llm\nport: 8000\nmodel: meta-llama/Llama-3.1-8B\n"
    "commands:\n  - python -m http.server 8000\n"
)
FLEET = "type: fleet\nname: local\nnodes: 1\n"


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_project_list_add_and_set_default(cli: Cli) -> None:
    listed = cli("project", "list", "--json")
    assert listed.exit_code == 0
    assert json.loads(listed.stdout) == [{"name": "main", "url": cli.server.url, "default": True}]
    added = cli(
        "project",
        "add",
        "--name",
        "main2",
        "--url",
        cli.server.url,
        "--token",
        cli.server.admin_token,
        "--no-check",
    )
    assert added.exit_code == 0
    assert cli("project", "set-default", "main2").exit_code == 0
    projects = {
        p["name"]: p["default"] for p in json.loads(cli("project", "list", "--json").stdout)
    }
    assert projects == {"main": False, "main2": True}
    bad = cli("project", "add", "--name", "x", "--url", cli.server.url, "--token", "wrong")
    assert bad.exit_code == 1 and "invalid token" in bad.stderr


def test_apply_ps_run_get_stop(cli: Cli, tmp_path: Path) -> None:
    applied = cli("apply", "-f", _write(tmp_path, "train.dstack.yml", TASK), "-y", "-d")
    assert applied.exit_code == 0, applied.stderr
    assert "Submit" not in applied.stdout and "train submitted" in applied.stdout
    ps = cli("ps")
    assert ps.exit_code == 0 and "train" in ps.stdout and "submitted" in ps.stdout
    data = json.loads(cli("ps", "--json").stdout)
    assert data["project"] == "main" and [r["run_spec"]["run_name"] for r in data["runs"]] == [
        "train"
    ]
    run = json.loads(cli("run", "get", "train", "--json").stdout)
    for key in ("id", "project_name", "user", "status", "run_spec", "jobs", "service", "cost"):
        assert key in run
    assert run["user"] == "admin" and run["service"] is None
    assert run["run_spec"]["configuration"]["commands"] == ["echo hello"]
    assert run["latest_job_submission"]["status"] == "submitted"
    stopped = cli("stop", "train", "-y")
    assert stopped.exit_code == 0
    # the stop is asked of the store; the runs worker (absent from this stand-in runtime)
    # carries it out: tests/compat/test_cli_everyday.py sees it end to end
    stopping = json.loads(cli("run", "get", "train", "--json").stdout)
    assert stopping["status"] == "terminating"
    assert stopping["termination_reason"] == "stopped_by_user"
    assert "train" in cli("ps", "-a").stdout and "train" in cli("ps", "-n", "1").stdout


def test_apply_asks_and_can_be_declined(cli: Cli, tmp_path: Path) -> None:
    declined = cli("apply", "-f", _write(tmp_path, "t.dstack.yml", TASK), input="n\n")
    assert declined.exit_code == 0 and "Submit the run train?" in declined.stdout
    assert "Cancelled" in declined.stdout
    assert json.loads(cli("ps", "--json").stdout)["runs"] == []


def test_run_get_service_urls(cli: Cli, tmp_path: Path) -> None:
    assert cli("apply", "-f", _write(tmp_path, "s.dstack.yml", SERVICE), "-y", "-d").exit_code == 0
    run = json.loads(cli("run", "get", "llm", "--json").stdout)
    assert run["service"]["url"] == "/proxy/services/main/llm/"
    assert run["service"]["model"]["base_url"] == "/proxy/services/main/llm/v1"
    assert run["service"]["model"]["name"] == "meta-llama/Llama-3.1-8B"


def test_fleet_volume_gateway(cli: Cli, tmp_path: Path) -> None:
    # detached: no worker provisions the fleet here (a stand-in runtime), so `apply` would
    # wait for an instance; tests/e2e and tests/compat provision real ones
    applied = cli("apply", "-f", _write(tmp_path, "f.dstack.yml", FLEET), "-y", "-d")
    assert applied.exit_code == 0 and "Fleet local applied" in applied.stdout
    assert "local" in cli("fleet").stdout and "local" in cli("fleet", "list").stdout
    fleet = json.loads(cli("fleet", "get", "local", "--json").stdout)
    assert fleet["name"] == "local" and fleet["status"] == "submitted"
    assert fleet["instances"] == []
    assert cli("fleet", "delete", "local", "-y").exit_code == 0
    # asked of the store; the fleets worker (absent here) tears it down and removes it
    [deleting] = json.loads(cli("fleet", "list", "--json").stdout)
    assert deleting["name"] == "local" and deleting["status"] == "terminating"
    assert json.loads(cli("volume", "list", "--json").stdout) == []
    assert json.loads(cli("gateway", "list", "--json").stdout) == []
    missing = cli("volume", "get", "nope")
    assert missing.exit_code == 1 and "volume nope not found" in missing.stderr


def test_secrets(cli: Cli) -> None:
    assert cli("secret", "set", "HF_TOKEN", "hf_s3cr3t").exit_code == 0
    listed = cli("secret", "list")
    assert "HF_TOKEN" in listed.stdout and "hf_s3cr3t" not in listed.stdout
    assert listed.stdout.split() == ["NAME", "VALUE", "HF_TOKEN", "******"]
    assert cli("secret", "get", "HF_TOKEN").stdout.split() == [
        "NAME",
        "VALUE",
        "HF_TOKEN",
        "hf_s3cr3t",
    ]
    got = json.loads(cli("secret", "get", "HF_TOKEN", "--json").stdout)
    assert got == {"name": "HF_TOKEN", "value": "hf_s3cr3t"}
    assert cli("secret", "delete", "HF_TOKEN", "-y").exit_code == 0
    assert json.loads(cli("secret", "list", "--json").stdout) == []
    # encrypted at rest: the plain value is nowhere in the database file
    db_file = cli.server.settings.data_dir / "dockyard.db"
    assert cli("secret", "set", "OTHER", "plain-value-xyz").exit_code == 0
    raw = b"".join(p.read_bytes() for p in db_file.parent.glob("dockyard.db*"))
    assert b"plain-value-xyz" not in raw


def test_events_reconcile_deliveries(cli: Cli) -> None:
    store = cli.server.server.store
    with store.reading() as session:
        project_id = session.scalar(select(Project.id).where(Project.name == "main"))
    assert project_id is not None
    store.append_event(
        project_id=project_id, target_type="run", target_name="train", message="Run submitted"
    )
    events = cli("event")
    assert events.exit_code == 0 and "Run submitted" in events.stdout
    assert json.loads(cli("event", "--target-run", "nope", "--json").stdout) == []
    queued = cli("reconcile")
    assert queued.exit_code == 0 and "queued" in queued.stdout
    assert len(json.loads(cli("reconcile", "list", "--json").stdout)) == 1
    assert json.loads(cli("delivery", "list", "--json").stdout) == []
    ping = httpx.post(
        f"{cli.server.url}/api/webhooks/github",
        content=b"{}",
        headers={
            "X-GitHub-Event": "ping",
            "X-GitHub-Delivery": "d-cli",
            "X-Hub-Signature-256": "sha256="
            + hmac.new(WEBHOOK_SECRET.encode(), b"{}", hashlib.sha256).hexdigest(),
        },
    )
    assert ping.status_code == 202
    table = cli("delivery", "list")
    assert "d-cli" in table.stdout and "pong" in table.stdout


def test_reconcile_wait_says_the_engines_outcome_for_the_commit(repo_cli: RepoCli) -> None:
    repo = repo_cli.real.repo
    good = repo.commit({"train.dstack.yml": TASK}, "a task")
    waited = repo_cli("reconcile", "--wait")
    assert waited.exit_code == 0 and "succeeded" in waited.stdout, waited
    assert good[:12] in waited.stdout
    repo.commit({"typo.dstack.yml": "type: task\nname: typo\ncomands: [x]\n"}, "a typo")
    refused = repo_cli("reconcile", "--wait")
    said = refused.stdout + refused.stderr
    assert refused.exit_code == 1 and "failed" in said and "succeeded" not in said, refused
    assert "typo.dstack.yml:3:1" in said and "comands" in said
    assert good[:12] in said  # the last good commit stays in force


def test_apply_from_stdin_and_a_typed_config(cli: Cli) -> None:
    needs_yes = cli("apply", "-f", "-", input=TASK)
    assert needs_yes.exit_code == 2 and "needs -y" in needs_yes.stderr
    assert cli("apply", "-f", "-", "-y", "-d", input=TASK).exit_code == 0
    from reconciler.api import Client
    from schemas import parse_config

    config = parse_config(SERVICE, "s.dstack.yml")  # the Python API takes schemas models too
    with Client(cli.server.url, cli.server.admin_token) as client:
        plan = client.get_plan(config, "s.dstack.yml")
        assert (plan["action"], plan["kind"], plan["name"]) == ("create", "service", "llm")
        client.apply(config, "s.dstack.yml")
        assert client.get_run("llm").run_spec["configuration"]["port"]["container_port"] == 8000
    names = sorted(
        r["run_spec"]["run_name"] for r in json.loads(cli("ps", "--json").stdout)["runs"]
    )
    assert names == ["llm", "train"]


def test_ps_watch_until_ctrl_c(cli: Cli) -> None:
    code = "from reconciler.cli.main import run; run()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "ps", "-w"],
        env={**os.environ, **cli.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the table header is drawn before the first refresh
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "NAME" in first and proc.returncode == 0, err


def _mark(cli: Cli, run_name: str, status: str) -> tuple[str, Path]:
    store = cli.server.server.store
    with store.writing() as session:
        run = session.scalars(select(Run).where(Run.run_name == run_name)).one()
        job = session.scalars(select(Job).where(Job.run_id == run.id)).first()
        if job is None:  # a service's job is the runs worker's to submit: played here
            job = Job(run_id=run.id, status="submitted", job_spec={}, submitted_at=run.submitted_at)
            session.add(job)
            session.flush()
        run.status, job.status = status, status
        if status == "done":
            job.finished_at = datetime.now(UTC)
        job_id = job.id
    path = cli.server.settings.data_dir / "projects" / "main" / "logs" / run_name / f"{job_id}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return job_id, path


def test_logs_of_a_finished_job(cli: Cli, tmp_path: Path) -> None:
    assert cli("apply", "-f", _write(tmp_path, "t.dstack.yml", TASK), "-y", "-d").exit_code == 0
    _, path = _mark(cli, "train", "done")
    path.write_bytes(b"hello\n" + "é".encode() * 3 + b"\n" + b"x" * 3_000_000)
    result = cli("logs", "train")
    assert result.exit_code == 0
    assert result.stdout.startswith("hello\néé") and len(result.stdout) == 6 + 4 + 3_000_000
    assert cli("logs", "train", "-f").stdout == result.stdout
    assert cli("logs", "train", "--since", "1h").stdout == result.stdout
    future = cli("logs", "train", "--since", "2999-01-01T00:00:00Z")
    assert future.exit_code == 0 and future.stdout == ""
    bad = cli("logs", "train", "--since", "yesterday")
    assert bad.exit_code == 2 and "--since" in bad.stderr


def test_errors_are_one_line_and_non_zero(cli: Cli, tmp_path: Path) -> None:
    missing = cli.subprocess("stop", "ghost", "-y")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: run ghost not found"
    invalid = _write(tmp_path, "bad.dstack.yml", "type: task\nname: x\ncommandz: [1]\n")
    bad = cli.subprocess("apply", "-f", invalid, "-y")
    assert bad.returncode == 1 and "bad.dstack.yml:3" in bad.stderr
    assert "Traceback" not in bad.stderr
    other = cli("ps", "--project", "nope")
    assert other.exit_code == 2 and "project nope is not in" in other.stderr


def test_apply_attached_service_prints_urls_logs_and_end(cli: Cli, tmp_path: Path) -> None:
    import threading

    def runtime() -> None:  # plays the workers: run, write a log line, finish
        store = cli.server.server.store

        def exists() -> bool:
            with store.reading() as session:
                return session.scalars(select(Run).where(Run.run_name == "llm")).first() is not None

        wait_until(exists, what="the run to be submitted")
        _, path = _mark(cli, "llm", "running")
        path.write_bytes(b"serving on 8000\n")
        _mark(cli, "llm", "done")

    worker = threading.Thread(target=runtime)
    worker.start()
    result = cli("apply", "-f", _write(tmp_path, "s.dstack.yml", SERVICE), "-y")
    worker.join(timeout=30)
    assert result.exit_code == 0, result.stderr
    assert "serving on 8000" in result.stdout and "Run llm done" in result.stdout


def test_running_service_is_announced(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reconciler.api import Client
    from reconciler.cli.waiting import announce_service

    assert cli("apply", "-f", _write(tmp_path, "s.dstack.yml", SERVICE), "-y", "-d").exit_code == 0
    _mark(cli, "llm", "running")
    with Client(cli.server.url, cli.server.admin_token) as client:
        announce_service(client, client.get_run("llm"))
    printed = capsys.readouterr().out
    url = cli.server.url
    assert f"Service is published at {url}/proxy/services/main/llm/" in printed
    assert f"Model meta-llama/Llama-3.1-8B is published at {url}/proxy/services/main/llm/v1" in (
        printed
    )
