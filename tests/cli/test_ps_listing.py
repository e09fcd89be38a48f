"""`dockyard ps` as dstack's: every run with `-a` (paged), readable `-v`, `--format json`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from reconciler.adapters.db.models import Fleet, Instance, Job, Project, Run
from reconciler.cli import ps
from tests.cli.conftest import Cli

GPUS = [{"name": "A100", "memory_mib": 81920, "vendor": "nvidia"}] * 2


def _apply(cli: Cli, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.dstack.yml"
    path.write_text(f"type: task\nname: {name}\ncommands: [echo hi]\n")
    assert cli("apply", "-f", str(path), "-y", "-d").exit_code == 0


def _finish_on_an_instance(cli: Cli, run_name: str) -> None:
    """The run succeeded on an 8-CPU, 2xA100 instance (rows written as the engine would)."""
    with cli.server.server.store.writing() as session:
        run = session.scalars(select(Run).where(Run.run_name == run_name)).one()
        job = session.scalars(select(Job).where(Job.run_id == run.id)).one()
        project = session.scalars(select(Project).where(Project.name == "main")).one()
        fleet = Fleet(
            project_id=project.id,
            name="gpus",
            spec={"type": "fleet", "name": "gpus", "nodes": {"min": 1, "target": 1, "max": 1}},
            status="active",
            created_at=datetime.now(UTC),
            resource_id=None,
        )
        session.add(fleet)
        session.flush()
        instance = Instance(
            fleet_id=fleet.id,
            project_id=project.id,
            name="gpu-0",
            status="idle",
            created_at=datetime.now(UTC),
            backend="aws",
            region="us-east-1",
            instance_type="p4d.24xlarge",
            price=3.5,
            resources={"cpus": 8, "memory_gb": 32, "disk_gb": 100, "gpus": GPUS},
        )
        session.add(instance)
        session.flush()
        job.instance_id = instance.id
        run.status, job.status = "done", "done"
        run.termination_reason = job.termination_reason = "all_jobs_done"
        job.finished_at = datetime.now(UTC)


def test_all_pages_through_every_run(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ps, "PAGE_SIZE", 2)  # 5 runs = 3 pages
    names = [f"run-{i}" for i in range(5)]
    for name in names:
        _apply(cli, tmp_path, name)
    shown = json.loads(cli("ps", "-a", "--format", "json").stdout)["runs"]
    assert [r["run_spec"]["run_name"] for r in shown] == names[::-1], "newest first, all"
    table = cli("ps", "-a").stdout
    assert all(name in table for name in names)
    last = json.loads(cli("ps", "-n", "3", "--json").stdout)["runs"]
    assert [r["run_spec"]["run_name"] for r in last] == names[:1:-1]


def test_verbose_shows_resources_and_no_error_for_a_run_that_succeeded(
    cli: Cli, tmp_path: Path
) -> None:
    _apply(cli, tmp_path, "train")
    _finish_on_an_instance(cli, "train")
    lines = cli("ps", "-a", "-v").stdout.splitlines()
    header = lines[0].split()
    assert header[:3] == ["NAME", "BACKEND", "RESOURCES"] and header[-1] == "ERROR"
    (row,) = [line for line in lines if line.startswith("train")]
    assert "cpu=8 mem=32GB disk=100GB gpu=A100:80GB:2" in row
    assert "p4d.24xlarge" in row and "$3.5" in row and "aws (us-east-1)" in row
    assert "{" not in row, "no raw dict"
    assert "all_jobs_done" not in row and row.rstrip().endswith("ago"), "no error column text"
    plain = cli("ps", "-a").stdout
    assert "A100:80GB:2" in plain and "done" in plain


def test_verbose_shows_the_error_of_a_failed_run(cli: Cli, tmp_path: Path) -> None:
    _apply(cli, tmp_path, "broken")
    with cli.server.server.store.writing() as session:
        run = session.scalars(select(Run).where(Run.run_name == "broken")).one()
        run.status, run.termination_reason = "failed", "job_failed"
    (row,) = [x for x in cli("ps", "-a", "-v").stdout.splitlines() if x.startswith("broken")]
    assert row.rstrip().endswith("job_failed")


def test_format_is_checked(cli: Cli) -> None:
    bad = cli("ps", "--format", "yaml")
    assert bad.exit_code == 2
