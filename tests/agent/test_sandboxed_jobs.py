"""Process jobs keep their semantics inside the sandbox (a root agent with bubblewrap): a
stop's SIGTERM reaches the job and its status is kept, SIGKILL follows the grace period,
processes the job left behind or hid in another session end with it, and a restarted
agent adopts a running job. The stop tests of `test_process_faults.py` run here again, on an
agent whose process jobs are sandboxed (the `agent_config` below)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.__main__ import job_account
from agent.protocol import ExecutorKind, JobStatus
from agent.server.executors import proctable
from agent.server.executors.process import ProcessExecutor
from agent.server.serving import AgentConfig, start_agent
from tests.agent.conftest import LOOP, AgentApi, _client, recorded_tools, wait_for
from tests.agent.test_process_faults import (  # noqa: F401 - collected again, sandboxed
    test_a_stopped_jobs_port_is_free_when_it_is_reported_ended,
    test_non_utf8_output_is_kept_byte_for_byte,
    test_stop_forced_after_the_grace_period,
    test_stop_uses_the_jobs_stop_duration_and_force_overrides_it,
    test_stop_within_the_grace_period,
)
from tests.services.missing import needs, needs_root

pytestmark = [
    needs_root("sandboxing jobs"),
    needs(
        shutil.which("bwrap") is not None,
        "bubblewrap (bwrap)",
        "apt-get install bubblewrap (scripts/setup.sh installs it)",
    ),
]


@pytest.fixture
def agent_config(tmp_path: Path) -> AgentConfig:
    data_dir = tmp_path / "agent"
    account = job_account("auto", tmp_path / "work", data_dir, hidden=(data_dir,))
    assert account.sandbox is not None
    return AgentConfig(
        data_dir=data_dir,
        http_port=0,
        docker=False,
        tool_runner=recorded_tools(False),
        job_account=account,
    )


def _alive(job_id: str) -> list[int]:
    return [process.pid for process in proctable.job_processes(-1, job_id)]


async def test_processes_left_behind_or_hidden_end_with_the_job(agent: AgentApi) -> None:
    script = (
        "sleep 1001 & setsid sh -c 'trap \"\" TERM; exec sleep 1002' & "
        "(sh -c 'exec sleep 1003' &); echo ready"
    )
    await agent.submit(id="leaver", commands=[script])
    state = await agent.wait_finished("leaver")
    assert state.exit_status == 0 and await agent.read_log("leaver") == b"ready\n"

    async def gone() -> bool:
        return not _alive("leaver")

    assert await wait_for(gone, "every process of the job to be gone", deadline=5)


async def test_a_job_ending_by_itself_leaves_nothing_and_costs_no_table_read(
    agent_config: AgentConfig,
) -> None:
    """The job's wrapper is PID 1 of its namespace (bubblewrap's `--as-pid-1`): when it
    exits the kernel kills what the job left behind, hidden in another session or not,
    before bubblewrap exits; so the agent reports the job ended without reading the
    process table, and nothing of the job is alive when it does. A stopped job's end
    still reads it."""
    script = (
        "setsid sh -c 'trap \"\" TERM HUP; exec sleep 1001' & "
        "(sh -c 'exec sleep 1002' &); env -i sleep 1003 & echo ready"
    )
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        api = AgentApi(http, agent_config.data_dir)
        executor = context.executors[ExecutorKind.PROCESS]
        assert isinstance(executor, ProcessExecutor)
        reads = executor.scans.reads
        await api.submit(id="left", commands=[script])
        state = await api.wait_finished("left")
        assert state.exit_status == 0 and await api.read_log("left") == b"ready\n"
        assert not _alive("left"), "nothing of the job outlives its report"
        assert executor.scans.reads == reads, "its end read no process table"

        await api.submit(id="stopped", commands=[f"echo ready; {LOOP}"])
        await api.wait_log("stopped", b"ready\n")
        await http.post("/jobs/stopped/stop", json={"force": True})
        await api.wait_finished("stopped")
        assert executor.scans.reads > reads, "a killed sandbox's end reads the table"
        assert not _alive("stopped")


async def test_a_restarted_agent_adopts_a_sandboxed_job(agent_config: AgentConfig) -> None:
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        api = AgentApi(http, agent_config.data_dir)
        body = {"commands": [f"trap 'echo bye; exit 5' TERM; echo ready; {LOOP}"]}
        await api.submit(id="kept", **body)
        await api.wait_log("kept", b"ready\n")
    assert _alive("kept"), "the job outlives its agent"
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        api = AgentApi(http, agent_config.data_dir)
        assert (await api.state("kept")).status == JobStatus.RUNNING
        await http.post("/jobs/kept/stop", json={"timeout": 20})
        state = await api.wait_finished("kept")
        assert (state.status, state.exit_status) == (JobStatus.TERMINATED, 5)
        assert (await api.read_log("kept")).endswith(b"bye\n")
