"""The logs dstack's attached stream reads (agent/ssh/joblogs.py, agent/ssh/runner_api.py):
a job's log stays readable after the job's directory is removed, for a while, even when the
removal came first."""

from __future__ import annotations

import shutil
from pathlib import Path

from agent.protocol import JobSpec
from agent.server.serving import AgentConfig, start_agent
from agent.ssh.joblogs import KeptLogs
from agent.ssh.jump import JobLink
from agent.ssh.runner_api import logs_path, without_released_prefix
from agent.ssh.service import job_access, keep_before_removal
from tests.agent.conftest import agent_config  # noqa: F401 - the module's fixture


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


def test_a_log_kept_again_is_the_newest_and_every_old_one_goes(tmp_path: Path) -> None:
    """The kept logs stay in the order they were last kept: the limit drops the one kept
    longest ago, and a prune drops every expired one (it looks from the oldest)."""
    now = [0.0]
    kept = KeptLogs(keep_seconds=10, limit=3, clock=lambda: now[0])
    for index in range(3):
        now[0] = float(index)
        (tmp_path / f"{index}.log").write_bytes(b"x")
        kept.keep(JobLink(f"job-{index}", None), f"run-{index}", tmp_path / f"{index}.log")
    now[0] = 5.0
    kept.keep(JobLink("job-0", None), "run-0", tmp_path / "0.log")  # kept again: newest
    (tmp_path / "3.log").write_bytes(b"x")
    kept.keep(JobLink("job-3", None), "run-3", tmp_path / "3.log")  # over the limit
    assert [kept.find(f"job-{i}") is not None for i in range(4)] == [True, False, True, True]
    now[0] = 14.5  # job-2 (kept at 2.0) has expired; job-0 and job-3 (at 5.0) have not
    assert [kept.find(f"job-{i}") is not None for i in range(4)] == [True, False, False, True]
    now[0] = 15.5
    assert all(kept.find(f"job-{i}") is None for i in range(4))
    kept.close()


def test_the_stream_path_and_a_given_back_prefix() -> None:
    assert logs_path("/logs_ws") and logs_path("/logs_ws?start_time=2026-01-01T00:00:00")
    assert not logs_path("/api/healthcheck")
    assert without_released_prefix(b"\0\0\0hello\0") == b"hello\0"


async def test_a_job_removed_before_its_end_was_seen_is_still_found_by_a_late_attach(
    agent_config: AgentConfig,  # noqa: F811
) -> None:
    """The server's removal follows the job's end event and can come before the keeper
    (`keep_ended_logs`) has seen that event: the log is kept just before the removal
    (`keep_before_removal`), so a late `attach` still finds the run and reads its log."""
    async with start_agent(agent_config) as context:
        kept = KeptLogs()
        manager = context.manager
        spec = JobSpec(id="quick-1", run_name="quick", commands=["echo all of it"])
        with keep_before_removal(context, kept):  # no keeper runs here: only the hook
            await manager.submit(spec)
            while not manager.get(spec.id).status.is_finished():
                await manager.events.published(within=5.0)
            await manager.remove(spec.id)
        access = job_access(context, kept)
        link = access.find("quick", None)
        assert link is not None and link.job_id == spec.id
        piece = access.log(spec.id)(0)
        assert piece.data == b"all of it\n" and piece.finished
        kept.close()
