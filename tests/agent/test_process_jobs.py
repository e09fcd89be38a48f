"""Process jobs through the agent's HTTP API: commands, env, exit status, errors, removal."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import signal
import subprocess
from pathlib import Path

import pytest

from agent.protocol import JobReason, JobStatus, agent_build
from agent.server.executors import proctable
from agent.server.hostfacts import parse_ip_addresses, run_tool
from agent.server.serving import AgentConfig, start_agent
from tests.agent.conftest import AgentApi, _client, pid_alive, recorded_tools, wait_for
from tests.services.missing import need, needs_root


async def test_healthcheck_and_host(agent: AgentApi) -> None:
    health = (await agent.http.get("/healthcheck")).json()
    assert health == {
        "service": "dockyard-agent",
        "version": "0.1.0",
        "api_version": 1,
        "build": agent_build(),
        "disk_problem": "",
        "disk_free": health["disk_free"],
        "epoch": health["epoch"],
    }
    # the job events' epoch: new at each agent start, so the server sees a restart
    assert len(health["epoch"]) == 32
    host = (await agent.http.get("/host")).json()
    assert host["executors"] == ["process"]
    assert host["cpus"] >= 1 and host["memory_mib"] > 0 and host["disk_mib"] > 0
    assert host["gpus"] == []


async def test_commands_joined_with_and_stop_at_the_first_failure(agent: AgentApi) -> None:
    response = await agent.submit(id="j1", commands=["echo one", "echo two >&2", "false", "echo 3"])
    assert response.status_code == 200
    assert response.json()["status"] in ("pending", "running")
    state = await agent.wait_finished("j1")
    assert (state.status, state.exit_status, state.reason) == (JobStatus.EXITED, 1, None)
    assert state.started_at is not None and state.finished_at is not None
    assert await agent.read_log("j1") == b"one\ntwo\n"


async def test_env_working_dir_and_shell(agent: AgentApi, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    await agent.submit(
        id="env",
        commands=['echo "$GREETING $DOCKYARD_RUN_NAME [$CUDA_VISIBLE_DEVICES] $(pwd)"'],
        env={"GREETING": "hi"},
        working_dir=str(work),
        shell="/bin/bash",
    )
    assert (await agent.wait_finished("env")).exit_status == 0
    assert await agent.read_log("env") == f"hi run [] {work}\n".encode()


@needs_root("running a job as another user")
async def test_a_job_runs_as_its_user(agent: AgentApi) -> None:
    # real, effective, saved and filesystem ids all the user's: the job cannot take the
    # agent's root back (`setpriv`, or Python's own switch where there is none)
    ids = "grep -E '^(Uid|Gid):' /proc/self/status | tr -s '\\t' ' '"
    take_root = "perl -e '$< = 0; $> = 0; print $> == 0 ? qq(ROOT\\n) : qq(still-user\\n)'"
    await agent.submit(
        id="as-nobody",
        commands=[f"id -u; id -g; id -G; touch here; {ids}; {take_root}", "exit 3"],
        user="nobody",
    )
    state = await agent.wait_finished("as-nobody")
    assert (state.status, state.exit_status) == (JobStatus.EXITED, 3)
    nobody = pwd.getpwnam("nobody")
    uid, gid = nobody.pw_uid, nobody.pw_gid
    assert (
        await agent.read_log("as-nobody")
        == (
            f"{uid}\n{gid}\n{gid}\nUid: {uid} {uid} {uid} {uid}\nGid: {gid} {gid} {gid} {gid}\n"
            "still-user\n"
        ).encode()
    )
    assert (agent.data_dir / "jobs" / "as-nobody" / "work" / "here").stat().st_uid == uid
    job_json = agent.data_dir / "jobs" / "as-nobody" / "job.json"
    assert job_json.stat().st_mode & 0o777 == 0o600
    unknown = await agent.submit(id="ghost", commands=["true"], user="no-such-user")
    assert unknown.status_code == 200
    failed = await agent.wait_finished("ghost")
    assert (failed.status, failed.reason, failed.message) == (
        JobStatus.FAILED,
        JobReason.EXECUTOR_ERROR,
        "no user no-such-user here",
    )


async def test_default_working_dir_is_per_job(agent: AgentApi) -> None:
    await agent.submit(id="wd", commands=["pwd", "touch made-here"])
    await agent.wait_finished("wd")
    work = agent.data_dir / "jobs" / "wd" / "work"
    assert await agent.read_log("wd") == f"{work}\n".encode()
    assert (work / "made-here").exists()


async def test_submit_is_idempotent(agent: AgentApi) -> None:
    first = await agent.submit(id="once", commands=["echo ran"])
    second = await agent.submit(id="once", commands=["echo ran"])
    assert first.status_code == second.status_code == 200
    await agent.wait_finished("once")
    third = await agent.submit(id="once", commands=["echo other"])
    assert third.json()["status"] == "exited"
    assert await agent.read_log("once") == b"ran\n"
    assert [job["id"] for job in (await agent.http.get("/jobs")).json()] == ["once"]


async def test_invalid_requests(agent: AgentApi) -> None:
    no_commands = await agent.submit(id="bad1")
    assert no_commands.status_code == 422
    assert no_commands.json() == {
        "error": "invalid_request",
        "message": "a process job needs commands",
    }
    bad_id = await agent.submit(id="../escape", commands=["true"])
    assert bad_id.status_code == 422 and bad_id.json()["error"] == "invalid_request"
    assert "id" in bad_id.json()["message"]
    typo = await agent.submit(id="typo", commands=["true"], comands=["true"])
    assert typo.status_code == 422
    docker = await agent.submit(id="d", executor="docker", image="x", commands=["true"])
    assert docker.status_code == 409
    assert docker.json() == {
        "error": "executor_unavailable",
        "message": "the docker executor is not available",
    }
    moved = await agent.submit(
        id="p", commands=["true"], ports=[{"container_port": 80, "host_port": 81}]
    )
    assert moved.status_code == 422
    missing = await agent.http.get("/jobs/nope")
    assert missing.status_code == 404
    assert missing.json() == {"error": "not_found", "message": "no job nope on this agent"}


async def test_remove_only_finished_jobs(agent: AgentApi, tmp_path: Path) -> None:
    go = tmp_path / "go"
    await agent.submit(id="rm", commands=[f"while [ ! -e {go} ]; do sleep 0.05; done"])
    await agent.wait_status("rm", JobStatus.RUNNING)
    busy = await agent.http.delete("/jobs/rm")
    assert busy.status_code == 409 and busy.json()["error"] == "job_active"
    go.touch()
    await agent.wait_finished("rm")
    assert (await agent.http.delete("/jobs/rm")).status_code == 204
    assert (await agent.http.get("/jobs/rm")).status_code == 404
    assert not (agent.data_dir / "jobs" / "rm").exists()


@pytest.fixture
def gpu_agent_config(tmp_path: Path) -> AgentConfig:
    return AgentConfig(
        data_dir=tmp_path / "gpu-agent", http_port=0, docker=False, tool_runner=recorded_tools(True)
    )


async def test_gpu_allocation_and_visible_devices(
    gpu_agent_config: AgentConfig, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    async with start_agent(gpu_agent_config) as context, _client(context.http_port) as http:
        agent = AgentApi(http, gpu_agent_config.data_dir)
        host = (await http.get("/host")).json()
        assert [gpu["index"] for gpu in host["gpus"]] == [0, 1, 2, 3]
        hold = f'echo "[$CUDA_VISIBLE_DEVICES]"; while [ ! -e {go} ]; do sleep 0.05; done'
        assert (await agent.submit(id="a", commands=[hold], gpus=[1, 3])).status_code == 200
        refused = await agent.submit(id="b", commands=["true"], gpus=[0, 3])
        assert refused.status_code == 409
        assert refused.json() == {
            "error": "no_capacity",
            "message": "GPU 3 already allocated to job a",
        }
        assert (await agent.submit(id="c", commands=["true"], gpus=[0, 2])).status_code == 200
        await agent.wait_log("a", b"[1,3]\n")
        metrics = (await http.get("/jobs/a/metrics")).json()
        assert [gpu["index"] for gpu in metrics["gpus"]] == [1, 3]
        assert metrics["gpus"][1] == {"index": 3, "utilization": 12.0, "memory_used_mib": 1024}
        go.touch()
        await agent.wait_finished("a")
        # finished jobs free their GPUs
        assert (await agent.submit(id="d", commands=["true"], gpus=[3])).status_code == 200


async def test_metrics_of_a_busy_job(agent: AgentApi) -> None:
    await agent.submit(id="busy", commands=["echo go; while :; do :; done"])
    await agent.wait_log("busy", b"go\n")
    metrics = (await agent.http.get("/jobs/busy/metrics")).json()
    assert metrics["cpu_percent"] > 20
    assert metrics["memory_bytes"] > 0
    assert metrics["gpus"] == []
    await agent.http.post("/jobs/busy/stop", json={"force": True})
    await agent.wait_finished("busy")
    idle = (await agent.http.get("/jobs/busy/metrics")).json()
    assert (idle["cpu_percent"], idle["memory_bytes"]) == (0.0, 0)


async def test_a_second_agent_on_the_same_data_dir_is_refused(
    agent: AgentApi, agent_config: AgentConfig
) -> None:
    from agent.server.serving import AgentLockedError

    with pytest.raises(AgentLockedError):
        async with start_agent(agent_config):
            pass


async def test_jobs_reached_after_an_in_process_restart(
    agent_config: AgentConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    go = tmp_path / "go"
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        first = AgentApi(http, agent_config.data_dir)
        await first.submit(
            id="long", commands=[f"echo a; while [ ! -e {go} ]; do sleep 0.05; done; exit 5"]
        )
        running = await first.wait_status("long", JobStatus.RUNNING)
        await first.wait_log("long", b"a\n")
    caplog.set_level(logging.INFO, logger="agent.server.jobs")
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        # the restarted agent says which jobs it took back
        assert "re-adopted 1 unfinished job(s): long (run, running)" in caplog.text
        second = AgentApi(http, agent_config.data_dir)
        adopted = await second.state("long")
        assert adopted.status == JobStatus.RUNNING and adopted.pid == running.pid
        assert adopted.started_at == running.started_at
        go.touch()
        state = await second.wait_finished("long")
        assert (state.status, state.exit_status, state.reason) == (JobStatus.EXITED, 5, None)
        assert await second.read_log("long") == b"a\n"


async def test_unknown_state_is_lost_not_guessed(agent_config: AgentConfig) -> None:
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        agent = AgentApi(http, agent_config.data_dir)
        await agent.submit(id="gone", commands=["echo hi; sleep 30"])
        state = await agent.wait_status("gone", JobStatus.RUNNING)
        await agent.http.post("/jobs/gone/stop", json={"force": True})
        await agent.wait_finished("gone")
    # forge a running record whose process and exit code are gone (e.g. after a reboot)
    record = agent_config.data_dir / "jobs" / "gone" / "job.json"
    record.write_text(
        record.read_text().replace('"terminated"', '"running"').replace('"stop":{', '"stop_was":{')
    )
    (agent_config.data_dir / "jobs" / "gone" / "exit_code").unlink(missing_ok=True)
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        agent = AgentApi(http, agent_config.data_dir)

        async def lost() -> bool:
            current = await agent.state("gone")
            return current.status == JobStatus.FAILED and current.reason == JobReason.LOST

        assert state.pid is not None
        assert await wait_for(lost, "the job to be reported lost")


async def test_the_api_listens_on_loopback_only(agent: AgentApi) -> None:
    info = json.loads((agent.data_dir / "agent.json").read_text())
    port = int(info["http_port"])
    output = await run_tool(("ip", "-j", "-4", "addr", "show"))
    addresses = parse_ip_addresses(output or "[]")
    need(bool(addresses), "a global IPv4 address on this host", "the test connects to it")
    with pytest.raises(OSError):
        _, writer = await asyncio.wait_for(asyncio.open_connection(addresses[0], port), 5)
        writer.close()


def _unrelated_process() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "1000"], start_new_session=True)


async def test_a_record_from_another_boot_is_read_not_acted_on(
    agent_config: AgentConfig, tmp_path: Path
) -> None:
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        agent = AgentApi(http, agent_config.data_dir)
        await agent.submit(id="old", commands=["echo up; sleep 1000"])
        running = await agent.wait_status("old", JobStatus.RUNNING)
        await agent.wait_log("old", b"up\n")
    assert running.pid is not None
    os.killpg(running.pid, signal.SIGKILL)  # the reboot: the job is gone, its marker too
    # ... and after it, an unrelated process has the pid the record names
    other = _unrelated_process()
    files = agent_config.data_dir / "jobs" / "old"
    other_stat = proctable.read_stat(other.pid)
    assert other_stat is not None
    identity = {"pid": other.pid, "start_ticks": other_stat.start_ticks, "boot_id": "earlier"}
    (files / "pid.json").write_text(json.dumps(identity))
    (files / "exit_code").write_text("5\n")  # it ended before that reboot
    try:
        async with start_agent(agent_config) as context, _client(context.http_port) as http:
            state = await AgentApi(http, agent_config.data_dir).wait_finished("old")
            assert (state.status, state.exit_status) == (JobStatus.EXITED, 5)
        # the pid means nothing in this boot: whatever runs under it is left alone
        assert pid_alive(other.pid)
    finally:
        other.kill()
        other.wait()


async def test_a_job_started_just_before_a_crash_is_found_not_started_twice(
    agent_config: AgentConfig, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        agent = AgentApi(http, agent_config.data_dir)
        await agent.submit(
            id="once", commands=[f"echo up; while [ ! -e {go} ]; do sleep 0.05; done"]
        )
        running = await agent.wait_status("once", JobStatus.RUNNING)
        await agent.wait_log("once", b"up\n")
    # as if the agent died after starting the wrapper, before recording anything of it
    files = agent_config.data_dir / "jobs" / "once"
    (files / "pid.json").unlink()
    record = json.loads((files / "job.json").read_text())
    record["state"] = {"id": "once", "status": "pending"}
    (files / "job.json").write_text(json.dumps(record))
    async with start_agent(agent_config) as context, _client(context.http_port) as http:
        agent = AgentApi(http, agent_config.data_dir)
        adopted = await agent.wait_status("once", JobStatus.RUNNING)
        assert adopted.pid == running.pid
        go.touch()
        state = await agent.wait_finished("once")
        assert (state.status, state.exit_status) == (JobStatus.EXITED, 0)
        assert await agent.read_log("once") == b"up\n"
