"""A job the agent reports ended has no process left (process executor).

Each test breaks one thing a real agent meets (its pid file unreadable, an error while it
waits for a job, a process it cannot kill, a job it does not know) and checks that no
process of the job outlives its finished state. Real agents (``python -m agent serve`` or
in-process), real processes found by their ``DOCKYARD_JOB_ID`` marker in /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from agent.protocol import ExecutorKind, JobReason, JobSpec, JobState, JobStatus
from agent.server.executors import proctable
from agent.server.executors.process import ProcessExecutor
from agent.server.executors.procscans import SharedScans
from agent.server.jobaccount import agent_tag
from agent.server.serving import AgentConfig, start_agent
from agent.server.store import JobStore, StoredJob
from tests.agent.conftest import AgentApi, AgentProcess, _client, pid_alive, wait_for


def _unique(prefix: str) -> str:
    """A job id no other test run on this machine uses (the helpers below find processes
    by the job marker alone)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


NOPID = _unique("nopid")
EXITS = _unique("exits")
BROKEN = _unique("broken")
STUCK = _unique("stuck")
FORGOTTEN = _unique("forgotten")
GHOST = _unique("ghost")
KEPT = _unique("kept")
ELSEWHERE = _unique("elsewhere")
MANY = _unique("many")
STRAY = _unique("stray")


def _processes(job_id: str) -> list[int]:
    """Live processes carrying the job's marker, whoever started them."""
    return [stat.pid for stat in proctable.job_processes(-1, job_id)]


async def _all_gone(job_id: str, deadline: float = 30.0) -> None:
    async def gone() -> bool:
        return not _processes(job_id)

    await wait_for(gone, f"every process of {job_id} to be gone", deadline=deadline)


def _kill_marked(job_id: str) -> None:
    """Cleanup, whatever the test left: nothing of the job may outlive the test."""
    for pid in _processes(job_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def _running_then_killed(agent_process: AgentProcess, job_id: str) -> AgentApi:
    """A job `echo up; sleep` running, its agent SIGKILLed: (the job lives on)."""
    api = await agent_process.start()
    await api.submit(id=job_id, commands=["echo up; sleep 1000"])
    await api.wait_status(job_id, JobStatus.RUNNING)
    await api.wait_log(job_id, b"up\n")
    await api.http.aclose()
    agent_process.kill()
    assert len(_processes(job_id)) == 3  # the wrapper, the job's shell, sleep
    return api


async def test_a_job_whose_pid_file_is_unreadable_is_found_by_its_marker(
    agent_process: AgentProcess,
) -> None:
    try:
        await _running_then_killed(agent_process, NOPID)
        (agent_process.data_dir / "jobs" / NOPID / "pid.json").write_text("{not json")
        api = await agent_process.start()
        try:
            # still running: the wrapper is found by the marker and waited for
            await api.http.post(f"/jobs/{NOPID}/stop", json={"force": True})
            state = await api.wait_finished(NOPID)
            assert (state.status, state.reason) == (JobStatus.TERMINATED, JobReason.KILLED)
            assert not _processes(NOPID)  # ended only once nothing of it lives
        finally:
            await api.http.aclose()
    finally:
        _kill_marked(NOPID)


async def test_a_job_without_pid_file_that_exits_gives_its_status(
    agent_process: AgentProcess, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    api = await agent_process.start()
    try:
        await api.submit(id=EXITS, commands=[f"while [ ! -e {go} ]; do sleep 0.05; done; exit 4"])
        await api.wait_status(EXITS, JobStatus.RUNNING)
        await api.http.aclose()
        agent_process.kill()
        identity = agent_process.data_dir / "jobs" / EXITS / "pid.json"
        record = json.loads(identity.read_text())
        identity.write_text(json.dumps({**record, "boot_id": ""}))  # boot unknown
        api = await agent_process.start()
        assert (await api.state(EXITS)).status == JobStatus.RUNNING
        go.touch()
        state = await api.wait_finished(EXITS)
        assert (state.status, state.exit_status) == (JobStatus.EXITED, 4)
        assert not _processes(EXITS)
    finally:
        await api.http.aclose()
        _kill_marked(EXITS)


async def test_an_agent_error_while_waiting_kills_the_job_before_failing_it(
    agent_process: AgentProcess,
) -> None:
    try:
        await _running_then_killed(agent_process, BROKEN)
        identity = agent_process.data_dir / "jobs" / BROKEN / "pid.json"
        record = json.loads(identity.read_text())
        identity.write_text(json.dumps({**record, "pid": 0}))  # waiting for it raises
        api = await agent_process.start()
        try:
            state = await api.wait_finished(BROKEN)
            assert (state.status, state.reason) == (JobStatus.FAILED, JobReason.EXECUTOR_ERROR)
            assert not _processes(BROKEN)  # killed before it was reported failed
        finally:
            await api.http.aclose()
    finally:
        _kill_marked(BROKEN)


async def test_a_process_that_cannot_be_killed_keeps_its_job_unfinished(
    tmp_path: Path,
) -> None:
    """`wait` returns only once the leftover it was refused permission to kill is gone."""
    refused: list[int] = []
    allowed = asyncio.Event()

    def kill(pid: int, number: int) -> None:
        if pid == leftover and not allowed.is_set():
            refused.append(pid)
            raise PermissionError(1, "Operation not permitted")
        os.kill(pid, number)

    pid_file = tmp_path / "leftover"
    spec = JobSpec(id=STUCK, run_name="run", commands=[f"sleep 1000 & echo $! > {pid_file}"])
    store = JobStore(tmp_path / "data")
    files = store.create(StoredJob(spec=spec, state=JobState(id=STUCK, status="pending")))
    executor = ProcessExecutor(kill=kill)
    leftover = -1
    try:
        await executor.launch(spec, files)
        leftover = int(await wait_for(_read_pid(pid_file), "the leftover's pid"))
        waiting = asyncio.create_task(executor.wait(spec, files))

        async def refused_many() -> bool:  # more than the 20 tries it used to give up after
            return len(refused) > 20

        await wait_for(refused_many, "the kill to be refused again and again")
        assert not waiting.done() and pid_alive(leftover)
        allowed.set()
        assert await asyncio.wait_for(waiting, 30) == 0
        assert not pid_alive(leftover)
    finally:
        _kill_marked(STUCK)


def _read_pid(path: Path) -> Callable[[], Awaitable[str | None]]:
    async def probe() -> str | None:
        return _text(path)

    return probe


def _text(path: Path) -> str | None:
    text = path.read_text().strip() if path.exists() else ""
    return text or None


async def test_a_restarted_agent_kills_the_processes_of_jobs_it_does_not_know(
    agent_process: AgentProcess,
) -> None:
    try:
        await _running_then_killed(agent_process, FORGOTTEN)
        (agent_process.data_dir / "jobs" / FORGOTTEN / "job.json").unlink()  # record lost
        api = await agent_process.start()
        try:
            assert not _processes(FORGOTTEN)  # gone before the agent serves
            assert (await api.http.get(f"/jobs/{FORGOTTEN}")).status_code == 404
        finally:
            await api.http.aclose()
    finally:
        _kill_marked(FORGOTTEN)


def _marked(job_id: str, tag: str) -> subprocess.Popen[bytes]:
    env = os.environ | {proctable.MARKER_ENV: job_id, proctable.AGENT_MARKER_ENV: tag}
    return subprocess.Popen(["sleep", "1000"], env=env, start_new_session=True)


async def test_a_stop_of_an_unknown_job_kills_its_processes_first(
    agent_config: AgentConfig,
) -> None:
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        ghost = _marked(GHOST, agent_tag(agent_config.data_dir))
        try:
            response = await http.post(f"/jobs/{GHOST}/stop", json={"force": True})
            assert response.status_code == 404
            assert ghost.wait(timeout=10) == -signal.SIGKILL  # killed before the answer
        finally:
            ghost.kill()
            ghost.wait()


async def test_the_agent_sweeps_strays_of_its_own_jobs_only(agent_config: AgentConfig) -> None:
    config = AgentConfig(
        data_dir=agent_config.data_dir,
        http_port=0,
        docker=False,
        tool_runner=agent_config.tool_runner,
        sweep_seconds=0.05,
    )
    tag = agent_tag(config.data_dir)
    other = _marked(ELSEWHERE, "another-agent")
    strays: list[subprocess.Popen[bytes]] = []
    try:
        async with start_agent(config) as context, _client(context.http_port) as http:
            api = AgentApi(http, config.data_dir)
            await api.submit(id=KEPT, commands=["echo up; sleep 1000"])
            await api.wait_log(KEPT, b"up\n")
            for name in (f"{STRAY}-1", f"{STRAY}-2"):  # the second: one more whole pass after
                strays.append(_marked(name, tag))

                async def reaped(process: subprocess.Popen[bytes] = strays[-1]) -> bool:
                    return process.poll() is not None

                await wait_for(reaped, f"{name} to be killed by a sweep")
            assert other.poll() is None  # another agent's job: left alone
            assert (await api.state(KEPT)).status == JobStatus.RUNNING
            assert len(_processes(KEPT)) == 3
            await http.post(f"/jobs/{KEPT}/stop", json={"force": True})
            await api.wait_finished(KEPT)
            assert not _processes(KEPT)
    finally:
        for process in (other, *strays):
            process.kill()
            process.wait()
        _kill_marked(KEPT)


async def test_kills_of_many_jobs_share_their_reads_of_proc(agent_config: AgentConfig) -> None:
    """30 jobs force-stopped at once: each kill reads a table read after it asked, and the
    kills waiting together share one read (they each read /proc twice or more before)."""
    ids = [f"{MANY}-{i}" for i in range(30)]
    try:
        async with start_agent(agent_config) as context, _client(context.http_port) as http:
            api = AgentApi(http, agent_config.data_dir)
            for job_id in ids:
                await api.submit(id=job_id, commands=["sleep 1000"])
            for job_id in ids:
                await api.wait_status(job_id, JobStatus.RUNNING)
            executor = context.executors[ExecutorKind.PROCESS]
            assert isinstance(executor, ProcessExecutor)
            before = executor.scans.reads
            stops = [http.post(f"/jobs/{job_id}/stop", json={"force": True}) for job_id in ids]
            await asyncio.gather(*stops)
            for job_id in ids:
                await api.wait_finished(job_id)
            assert all(not _processes(job_id) for job_id in ids)
            assert executor.scans.reads - before < 2 * len(ids)
    finally:
        for job_id in ids:
            _kill_marked(job_id)


async def test_a_shared_read_starts_after_every_caller_asked() -> None:
    started: list[int] = []
    gate = threading.Event()

    def scan() -> proctable.ProcTable:
        started.append(len(started))
        gate.wait(30)
        return proctable.ProcTable(())

    scans = SharedScans(scan)
    first = asyncio.create_task(scans.fresh())

    async def reading() -> bool:
        return bool(started)

    await wait_for(reading, "the first read to start")
    # asked while the first read runs: they share the second one, none is served the first
    late = [asyncio.create_task(scans.fresh()) for _ in range(5)]
    gate.set()
    await asyncio.wait_for(asyncio.gather(first, *late), 30)
    assert scans.reads == 2 and len(started) == 2
