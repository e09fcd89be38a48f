"""`dockyard metrics` (dstack's JobMetrics), `dockyard delete -f FILE`, and `apply`'s warnings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from reconciler.adapters.db.models import Job, Run
from reconciler.domain.metrics import GpuSample, JobSample
from tests.cli.conftest import Cli
from tests.web.fakes import FakeController
from tests.web.serving import running_server

GIB = 1024**3


class SampledController(FakeController):
    """Answers a sample for job 0 of a run while that job runs, as its agent would (the
    store says whether it runs; no agent here); other jobs, and jobs not running, none."""

    async def sample_job(
        self, project_id: str, run_name: str, *, job_num: int = 0, replica_num: int = 0
    ) -> JobSample | None:
        with self.store.reading() as session:
            status = session.scalar(
                select(Job.status)
                .join(Run, Job.run_id == Run.id)
                .where(Run.project_id == project_id, Run.run_name == run_name)
                .where(Job.job_num == job_num, Job.replica_num == replica_num)
            )
        if job_num != 0 or status != "running":
            return None
        gpus = (GpuSample(87.0, 20 * GIB), GpuSample(12.0, 2 * GIB))
        return JobSample(
            timestamp=1_700_000_000.0, cpu_percent=150.0, memory_bytes=3 * GIB, gpus=gpus
        )


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    with running_server(tmp_path, lambda _s, store: SampledController(store)) as server:
        env = {
            "DOCKYARD_CONFIG": str(server.settings.cli_config),
            "HOME": str(tmp_path / "home"),
            "DOCKYARD_PROJECT": "",
            "COLUMNS": "200",
        }
        yield Cli(server, env)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_metrics_of_a_running_job(cli: Cli, tmp_path: Path) -> None:
    task = _write(tmp_path, "t.dstack.yml", "type: task\nname: train\ncommands: [ls]\n")
    assert cli("apply", "-f", task, "-y", "-d").exit_code == 0
    submitted = cli("metrics", "train")
    assert submitted.exit_code == 0 and "150%" not in submitted.stdout  # nothing runs yet
    _set_status(cli, "train", "running")
    lines = cli("metrics", "train").stdout.splitlines()
    assert lines[0].split() == ["JOB", "CPU", "MEMORY", "GPU"]
    assert lines[1].split() == [
        "replica=0", "job=0", "150%", "3.0GB", "gpu0:", "87%", "20.0GB,", "gpu1:", "12%", "2.0GB",
    ]  # fmt: skip
    (job,) = json.loads(cli("metrics", "train", "--json").stdout)
    assert (job["replica_num"], job["job_num"]) == (0, 0)
    assert {m["name"] for m in job["metrics"]} >= {"cpu_usage_percent", "gpu_util_percent_gpu1"}
    no_job = cli("metrics", "train", "--job", "1")
    assert no_job.exit_code == 2 and "no job" in no_job.stderr
    missing = cli("metrics", "nope")
    assert missing.exit_code == 1 and "nope" in missing.stderr


def _set_status(cli: Cli, run_name: str, status: str) -> None:
    """Plays the workers: the run and its jobs move to `status`."""
    with cli.server.server.store.writing() as session:
        run = session.scalars(select(Run).where(Run.run_name == run_name)).one()
        run.status = status
        for job in session.scalars(select(Job).where(Job.run_id == run.id)):
            job.status = status
            if status == "done":
                job.finished_at = datetime.now(UTC)


def test_delete_what_a_file_describes(cli: Cli, tmp_path: Path) -> None:
    task = _write(tmp_path, "t.dstack.yml", "type: task\nname: train\ncommands: [ls]\n")
    fleet = _write(tmp_path, "f.dstack.yml", "type: fleet\nname: gpus\nnodes: 1\n")
    assert cli("apply", "-f", task, "-y", "-d").exit_code == 0
    assert cli("apply", "-f", fleet, "-y", "-d").exit_code == 0  # no worker provisions it
    declined = cli("delete", "-f", task, input="n\n")
    assert declined.exit_code == 0 and "Cancelled" in declined.stdout
    active = cli("delete", "-f", task, "-y")
    assert active.exit_code == 1 and "run 'train' is still active: stop it first" in active.stderr
    _set_status(cli, "train", "done")
    assert cli("delete", "-f", task, "-y").exit_code == 0
    assert json.loads(cli("ps", "-a", "--json").stdout)["runs"] == []
    gone = cli("delete", "-f", fleet, "-y")
    assert gone.exit_code == 0 and "gpus" in gone.stdout
    # asked of the store; the fleets worker (absent here) tears it down and removes it
    [deleting] = json.loads(cli("fleet", "list", "--json").stdout)
    assert deleting["name"] == "gpus" and deleting["status"] == "terminating"
    unnamed = _write(tmp_path, "u.dstack.yml", "type: task\ncommands: [ls]\n")
    refused = cli("delete", "-f", unnamed, "-y")
    assert refused.exit_code == 2 and "name" in refused.stderr


def test_a_job_without_samples_shows_dashes() -> None:
    from reconciler.cli.metrics import metrics_row

    assert metrics_row(1, 0, {"metrics": []}) == ("replica=1 job=0", "-", "-", "-")


def test_apply_prints_a_configuration_warning_and_applies(cli: Cli, tmp_path: Path) -> None:
    text = "type: task\nname: legacy\ncommands: [ls]\nworking_dir: src\n"
    applied = cli("apply", "-f", _write(tmp_path, "l.dstack.yml", text), "-y", "-d")
    assert applied.exit_code == 0 and "legacy submitted" in applied.stdout
    assert "warning: " in applied.stderr and "working_dir: a relative working_dir" in applied.stderr
