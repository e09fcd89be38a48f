"""A full disk on the agent: new jobs wait with the reason, running jobs keep running, and
the agent takes jobs again once space returns (a real tmpfs filled by the test)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.diskspace import DiskWatch
from agent.protocol import JobStatus
from agent.server.serving import AgentConfig, start_agent
from tests.agent.conftest import AgentApi, _client
from tests.operations.tmpfs import fill, tmpfs

MIN_FREE = 8 * 2**20


@pytest.fixture
async def small_agent(agent_config: AgentConfig, tmp_path: Path) -> AsyncIterator[AgentApi]:
    with tmpfs(tmp_path / "small", 24) as mount:
        config = dataclasses.replace(agent_config, data_dir=mount / "agent", min_free_disk=MIN_FREE)
        async with start_agent(config) as context, _client(context.http_port) as http:
            yield AgentApi(http, config.data_dir)


async def test_full_disk_refuses_new_jobs_keeps_running_ones_and_recovers(
    small_agent: AgentApi,
) -> None:
    agent = small_agent
    started = await agent.submit(id="long", commands=["while true; do echo tick; sleep 0.05; done"])
    assert started.status_code == 200, started.text
    await agent.wait_status("long", JobStatus.RUNNING)
    await agent.wait_log("long", b"tick")

    filler = fill(agent.data_dir.parent, leave_mib=2)
    health = (await agent.http.get("/healthcheck")).json()
    assert "disk almost full" in health["disk_problem"]
    assert health["disk_free"]["data dir"] < MIN_FREE
    refused = await agent.submit(id="new", commands=["echo hi"])
    assert refused.status_code >= 400
    assert refused.json()["error"] == "no_capacity"
    assert "disk almost full" in refused.json()["message"]
    assert "Traceback" not in refused.text
    assert (await agent.state("long")).status is JobStatus.RUNNING

    filler.unlink()
    health = (await agent.http.get("/healthcheck")).json()
    assert health["disk_problem"] == ""
    accepted = await agent.submit(id="new", commands=["echo hi"])
    assert accepted.status_code == 200, accepted.text
    assert (await agent.wait_finished("new")).exit_status == 0
    assert (await agent.state("long")).status is JobStatus.RUNNING
    await agent.http.post("/jobs/long/stop", json={"force": True})
    await agent.wait_finished("long")


def test_disk_watch_names_every_path_below_the_threshold(tmp_path: Path) -> None:
    free = {tmp_path / "a": 10, tmp_path / "b": 5000}
    watch = DiskWatch({"data dir": tmp_path / "a", "docker root": tmp_path / "b"}, 100, free.get)  # type: ignore[arg-type]
    state = watch.check()
    assert state.low and "data dir" in state.problem and "docker root" not in state.problem
    assert dict(state.free) == {"data dir": 10, "docker root": 5000}
    assert not DiskWatch({"x": tmp_path / "b"}, 100, free.get).check().low  # type: ignore[arg-type]


async def test_a_job_that_ends_on_a_full_disk_keeps_its_exit_status(
    small_agent: AgentApi,
) -> None:
    # The disk fills while the job runs: how it ended (the wrapper's exit code file, the
    # job's record) must not be lost to it — not `lost`/"vanished without an exit status",
    # not failed by an agent error: exited 3, as it did.
    agent = small_agent
    started = await agent.submit(id="ends", commands=["echo started; sleep 1; exit 3"])
    assert started.status_code == 200, started.text
    await agent.wait_log("ends", b"started")
    filler = fill(agent.data_dir.parent, leave_mib=0)
    try:
        ended = await agent.wait_finished("ends")
        assert (ended.status, ended.exit_status) == (JobStatus.EXITED, 3), ended
    finally:
        filler.unlink()
