"""The logs dstack's attached stream reads (agent/ssh/joblogs.py, agent/ssh/runner_api.py):
a job's log stays readable after the job's directory is removed, for a while."""

from __future__ import annotations

import shutil
from pathlib import Path

from agent.ssh.joblogs import KeptLogs
from agent.ssh.jump import JobLink
from agent.ssh.runner_api import logs_path, without_released_prefix


def test_a_kept_log_outlives_the_jobs_directory(tmp_path: Path) -> None:
    now = [0.0]
    kept = KeptLogs(keep_seconds=60, limit=2, clock=lambda: now[0])
    job_dir = tmp_path / "job-1"
    job_dir.mkdir()
    (job_dir / "output.log").write_bytes(b"hello\nworld\n")
    kept.keep(JobLink("job-1", "main"), "train", job_dir / "output.log")
    shutil.rmtree(job_dir)  # the control plane removed the job
    assert kept.find("train") == JobLink("job-1", "main")
    assert kept.read("job-1", 6, 100) == b"world\n"
    now[0] = 61.0
    assert kept.find("train") is None and kept.read("job-1", 0, 100) is None
    kept.close()


def test_at_most_limit_logs_are_kept(tmp_path: Path) -> None:
    now = [0.0]
    kept = KeptLogs(limit=2, clock=lambda: now[0])
    for index in range(3):
        now[0] = float(index)
        log = tmp_path / f"{index}.log"
        log.write_bytes(b"x")
        kept.keep(JobLink(f"job-{index}", None), f"run-{index}", log)
    assert kept.find("job-0") is None and kept.find("job-2") is not None
    kept.close()


def test_the_stream_path_and_a_given_back_prefix() -> None:
    assert logs_path("/logs_ws") and logs_path("/logs_ws?start_time=2026-01-01T00:00:00")
    assert not logs_path("/api/healthcheck")
    assert without_released_prefix(b"\0\0\0hello\0") == b"hello\0"
