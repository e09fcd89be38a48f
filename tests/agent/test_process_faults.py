"""Process jobs under stress: stop with grace then force, forked children, big and binary
logs, log offsets, and an agent killed with SIGKILL while its job runs."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from agent.protocol import JobReason, JobStatus
from agent.server.executors import proctable
from tests.agent.conftest import LOOP, AgentApi, AgentProcess, pid_alive, wait_for
from tests.services.ports import bindable, reserved_port


async def test_stop_within_the_grace_period(agent: AgentApi) -> None:
    await agent.submit(id="polite", commands=[f"trap 'echo bye; exit 7' TERM; echo ready; {LOOP}"])
    await agent.wait_log("polite", b"ready\n")
    response = await agent.http.post("/jobs/polite/stop", json={"timeout": 20})
    assert response.status_code == 200
    state = await agent.wait_finished("polite")
    assert (state.status, state.reason, state.exit_status) == (
        JobStatus.TERMINATED,
        JobReason.STOPPED,
        7,
    )
    assert (await agent.read_log("polite")).endswith(b"bye\n")


async def test_stop_forced_after_the_grace_period(agent: AgentApi) -> None:
    await agent.submit(id="stubborn", commands=[f"trap '' TERM; echo ready; {LOOP}"])
    await agent.wait_log("stubborn", b"ready\n")
    await agent.http.post("/jobs/stubborn/stop", json={"timeout": 0.3})
    state = await agent.wait_finished("stubborn")
    assert (state.status, state.reason, state.exit_status) == (
        JobStatus.TERMINATED,
        JobReason.KILLED,
        137,
    )


async def test_stop_uses_the_jobs_stop_duration_and_force_overrides_it(agent: AgentApi) -> None:
    await agent.submit(id="slow", commands=[f"trap '' TERM; echo ready; {LOOP}"], stop_duration=600)
    await agent.wait_log("slow", b"ready\n")
    await agent.http.post("/jobs/slow/stop")
    assert (await agent.state("slow")).status == JobStatus.RUNNING  # SIGTERM is ignored
    await agent.http.post("/jobs/slow/stop", json={"force": True})
    state = await agent.wait_finished("slow")
    assert state.reason == JobReason.KILLED


async def test_stop_kills_forked_and_escaped_children(agent: AgentApi, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = (
        f"sleep 1001 & echo $! >> {pids}; "
        f"(sh -c 'echo $$ >> {pids}; exec sleep 1002' &); "
        f"setsid sh -c 'trap \"\" TERM; echo $$ >> {pids}; exec sleep 1003' & "
        f"trap '' TERM; while [ $(wc -l < {pids}) -lt 3 ]; do sleep 0.05; done; echo ready; {LOOP}"
    )
    await agent.submit(id="forks", commands=[script])
    await agent.wait_log("forks", b"ready\n")
    children = [int(line) for line in pids.read_text().split()]
    assert len(children) == 3 and all(pid_alive(pid) for pid in children)
    await agent.http.post("/jobs/forks/stop", json={"timeout": 0.5})
    state = await agent.wait_finished("forks")
    assert state.status == JobStatus.TERMINATED

    async def all_gone() -> bool:
        return not any(pid_alive(pid) for pid in children)

    assert await wait_for(all_gone, "every child of the job to be gone", deadline=5)


async def test_a_stopped_jobs_port_is_free_when_it_is_reported_ended(agent: AgentApi) -> None:
    """A graceful stop whose job shell exits 0 (its wrapper too: inside the sandbox,
    bubblewrap exits 0 and the agent reads no process table) while a process the job hid
    in another session ignores SIGTERM and listens on the job's port: when the agent
    reports the job ended, that process is gone and the port is free, so the next replica
    of a rolling update binds it (a CI run once saw the old replica answer on the port
    after its job was recorded terminated; `tests/e2e/test_runs_services.py`). Asserted at
    the report, not eventually."""
    with reserved_port() as port:
        listener = (
            "import signal, socket, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
            "print('listening', flush=True); time.sleep(1000)"
        )
        script = f"setsid python3 -c \"{listener}\" & trap 'exit 0' TERM; {LOOP}"
        job = f"holder-{port}"  # unique: the sandboxed copy of this test may run beside it
        await agent.submit(id=job, commands=[script])
        await agent.wait_log(job, b"listening\n")
        assert not bindable(port), "the job's hidden process holds its port"
        await agent.http.post(f"/jobs/{job}/stop", json={"timeout": 20})
        state = await agent.wait_finished(job)
        assert (state.status, state.reason, state.exit_status) == (
            JobStatus.TERMINATED,
            JobReason.STOPPED,
            0,
        )
        alive = [p.pid for p in proctable.job_processes(-1, job)]
        for pid in alive:  # a failure leaves nothing behind for the tests after it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not alive, f"processes of the job alive at its reported end: {alive}"
        assert bindable(port), "the job's port is free at its reported end"


async def test_children_left_behind_are_killed_when_the_job_ends(
    agent: AgentApi, tmp_path: Path
) -> None:
    pid_file = tmp_path / "bg"
    await agent.submit(id="leaver", commands=[f"sleep 1000 & echo $! > {pid_file}"])
    state = await agent.wait_finished("leaver")
    assert state.exit_status == 0
    pid = int(pid_file.read_text())

    async def gone() -> bool:
        return not pid_alive(pid)

    assert await wait_for(gone, "the left-behind child to be killed", deadline=5)


async def test_non_utf8_output_is_kept_byte_for_byte(agent: AgentApi) -> None:
    await agent.submit(id="bytes", commands=[r"printf 'caf\351 \377\376\000end\r\n'"])
    await agent.wait_finished("bytes")
    assert await agent.read_log("bytes") == b"caf\xe9 \xff\xfe\x00end\r\n"


async def test_log_offsets_are_monotonic_and_pages_join(agent: AgentApi) -> None:
    await agent.submit(id="pages", commands=["seq 1 2000"])
    await agent.wait_finished("pages")
    expected = "".join(f"{n}\n" for n in range(1, 2001)).encode()
    offset, pages = 0, []
    while True:
        response = await agent.http.get("/jobs/pages/logs", params={"offset": offset, "limit": 999})
        assert response.headers["X-Log-Offset"] == str(offset)
        assert response.headers["X-Job-Finished"] == "1"
        next_offset = int(response.headers["X-Next-Offset"])
        assert next_offset == offset + len(response.content) and len(response.content) <= 999
        if not response.content:
            break
        pages.append(response.content)
        offset = next_offset
    assert b"".join(pages) == expected and offset == len(expected)
    beyond = await agent.http.get("/jobs/pages/logs", params={"offset": 10**9})
    assert beyond.content == b"" and beyond.headers["X-Next-Offset"] == str(10**9)
    negative = await agent.http.get("/jobs/pages/logs", params={"offset": -1})
    assert negative.status_code == 422


async def test_log_of_a_running_job_is_not_finished(agent: AgentApi) -> None:
    await agent.submit(id="live", commands=[f"echo first; {LOOP}"])
    await agent.wait_log("live", b"first\n")
    response = await agent.http.get("/jobs/live/logs")
    assert response.headers["X-Job-Finished"] == "0" and response.content == b"first\n"
    await agent.http.post("/jobs/live/stop", json={"force": True})
    await agent.wait_finished("live")


async def test_a_hundred_megabytes_of_logs(agent: AgentApi) -> None:
    size = 100 * 2**20
    await agent.submit(id="big", commands=[f"yes abcdefghi | head -c {size}"])
    state = await agent.wait_finished("big")
    assert state.exit_status == 0
    data = await agent.read_log("big")
    assert len(data) == size
    assert data == (b"abcdefghi\n" * (size // 10 + 1))[:size]


async def test_agent_killed_job_keeps_running_and_is_readopted(
    agent_process: AgentProcess, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    api = await agent_process.start()
    await api.submit(
        id="survivor",
        commands=[f"echo before; while [ ! -e {go} ]; do sleep 0.05; done", "echo after; exit 9"],
    )
    running = await api.wait_status("survivor", JobStatus.RUNNING)
    await api.wait_log("survivor", b"before\n")
    await api.http.aclose()
    agent_process.kill()
    assert running.pid is not None and pid_alive(running.pid)

    api = await agent_process.start()
    try:
        adopted = await api.state("survivor")
        assert (adopted.status, adopted.pid) == (JobStatus.RUNNING, running.pid)
        go.touch()
        state = await api.wait_finished("survivor")
        assert (state.status, state.exit_status) == (JobStatus.EXITED, 9)
        assert await api.read_log("survivor") == b"before\nafter\n"
    finally:
        await api.http.aclose()


async def test_exit_status_of_a_job_that_ended_while_the_agent_was_down(
    agent_process: AgentProcess, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    api = await agent_process.start()
    await api.submit(id="orphan", commands=[f"while [ ! -e {go} ]; do sleep 0.05; done; exit 42"])
    running = await api.wait_status("orphan", JobStatus.RUNNING)
    await api.http.aclose()
    agent_process.kill()
    go.touch()
    exit_file = agent_process.data_dir / "jobs" / "orphan" / "exit_code"

    async def exited() -> bool:
        return exit_file.exists() and running.pid is not None and not pid_alive(running.pid)

    await wait_for(exited, "the job to end while no agent runs")
    api = await agent_process.start()
    try:
        state = await api.wait_finished("orphan")
        assert (state.status, state.exit_status) == (JobStatus.EXITED, 42)
    finally:
        await api.http.aclose()


async def test_a_stop_interrupted_by_an_agent_crash_is_finished(
    agent_process: AgentProcess,
) -> None:
    api = await agent_process.start()
    await api.submit(id="halfway", commands=[f"trap '' TERM; echo ready; {LOOP}"])
    await api.wait_log("halfway", b"ready\n")
    await api.http.post("/jobs/halfway/stop", json={"timeout": 1})
    await api.http.aclose()
    agent_process.kill()
    api = await agent_process.start()
    try:
        state = await api.wait_finished("halfway")
        assert (state.status, state.reason, state.exit_status) == (
            JobStatus.TERMINATED,
            JobReason.KILLED,
            137,
        )
    finally:
        await api.http.aclose()
