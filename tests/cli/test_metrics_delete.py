"""`dockyard metrics` (dstack's JobMetrics), `dockyard delete -f FILE`, and `apply`'s warnings."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from reconciler.domain.metrics import GpuSample, JobSample
from tests.cli.conftest import Cli
from tests.web.fakes import FakeController
from tests.web.serving import running_server

GIB = 1024**3


class SampledController(FakeController):
    """Answers a sample for job 0 of every run, as an agent would; other jobs do not run."""

    async def sample_job(
        self, project_id: str, run_name: str, *, job_num: int = 0, replica_num: int = 0
    ) -> JobSample | None:
        if job_num != 0:
            return None
        gpus = (GpuSample(87.0, 20 * GIB), GpuSample(12.0, 2 * GIB))
        return JobSample(
            timestamp=1_700_000_000.0, cpu_percent=150.0, memory_bytes=3 * GIB, gpus=gpus
        )

    async def list_gpus(
        self, project_id: str, group_by: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        return []


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


def test_delete_what_a_file_describes(cli: Cli, tmp_path: Path) -> None:
    task = _write(tmp_path, "t.dstack.yml", "type: task\nname: train\ncommands: [ls]\n")
    fleet = _write(tmp_path, "f.dstack.yml", "type: fleet\nname: gpus\nnodes: 1\n")
    assert cli("apply", "-f", task, "-y", "-d").exit_code == 0
    assert cli("apply", "-f", fleet, "-y").exit_code == 0
    declined = cli("delete", "-f", task, input="n\n")
    assert declined.exit_code == 0 and "Cancelled" in declined.stdout
    assert cli("delete", "-f", task, "-y").exit_code == 0
    assert json.loads(cli("ps", "-a", "--json").stdout)["runs"] == []
    gone = cli("delete", "-f", fleet, "-y")
    assert gone.exit_code == 0 and "gpus" in gone.stdout
    assert json.loads(cli("fleet", "list", "--json").stdout) == []
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
