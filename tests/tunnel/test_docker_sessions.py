"""``ssh <run>`` into a Docker job: the session is ``docker exec`` in its container."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from agent.client import AgentClient
from agent.protocol import ExecutorKind, JobSpec, JobState, JobStatus
from agent.tunnel import TunnelPool
from tests.agent.conftest import wait_for
from tests.services.docker import DockerEngine, docker_engine  # noqa: F401 - fixture
from tests.tunnel.conftest import AgentOverSSH, Keys, free_port, unique_id, wait_job

pytestmark = pytest.mark.docker


@pytest.fixture
async def docker_agent(
    docker_engine: DockerEngine,  # noqa: F811 - the fixture
    keys: Keys,
    tmp_path: Path,
) -> AsyncIterator[AgentOverSSH]:
    from agent.server.serving import AgentConfig, start_agent
    from agent.ssh.server import SSHServerOptions
    from agent.ssh.service import ssh_server_service

    ssh_port = free_port()
    options = SSHServerOptions(ssh_port, keys.host_key, keys.authorized_keys)
    config = AgentConfig(
        data_dir=tmp_path / "agent", http_port=0, docker=True, docker_url=docker_engine.base_url
    )
    async with start_agent(config, [ssh_server_service(options)]) as context:
        yield AgentOverSSH(context.http_port, ssh_port, keys, config.data_dir)


@contextlib.asynccontextmanager
async def running_box(
    agent: AgentOverSSH, engine: DockerEngine, **spec: object
) -> AsyncIterator[JobState]:
    """A Docker job `box` running `sleep 600` on the agent; stopped and removed after."""
    pool = TunnelPool()
    client = AgentClient.over_tunnel(pool, agent.target(), agent.http_port)
    job = JobSpec.model_validate(
        {"id": unique_id("box"), "run_name": "box", "executor": ExecutorKind.DOCKER,
         "image": engine.image, "commands": ["sleep 600"], **spec}
    )  # fmt: skip
    await client.submit(job)
    try:
        state = await wait_job(
            client, job.id, lambda s: s.status == JobStatus.RUNNING or s.status.is_finished()
        )
        assert state.status == JobStatus.RUNNING, state
        yield state
    finally:
        await client.stop(job.id, force=True)
        await wait_job(client, job.id, lambda s: s.status.is_finished())
        await client.remove(job.id)
        await client.aclose()
        await pool.close()


async def connect_box(agent: AgentOverSSH) -> asyncssh.SSHClientConnection:
    """A user's SSH connection to the agent, for sessions in the job `box`."""
    return await asyncssh.connect(
        "127.0.0.1",
        agent.ssh_port,
        username="box",
        client_keys=[str(agent.keys.private)],
        known_hosts=None,
        config=None,
    )


async def test_ssh_run_execs_into_the_container(
    docker_agent: AgentOverSSH,
    docker_engine: DockerEngine,  # noqa: F811 - the fixture
) -> None:
    box = running_box(docker_agent, docker_engine, env={"FOO": "in-container"}, working_dir="/work")
    async with box, await connect_box(docker_agent) as conn:
        result = await conn.run("echo $FOO; pwd; test -f /.dockerenv && echo docker", check=True)
        shell = await conn.create_process(term_type="xterm-256color", encoding=None)
        shell.stdin.write(b"echo term=$TERM; tty; exit\n")
        async with asyncio.timeout(30):
            typed = await shell.stdout.read()
    assert str(result.stdout).splitlines() == ["in-container", "/work", "docker"]
    assert b"term=xterm-256color" in typed and b"/dev/pts/" in typed


async def test_a_container_sessions_commands_end_with_its_channel(
    docker_agent: AgentOverSSH,
    docker_engine: DockerEngine,  # noqa: F811 - the fixture
) -> None:
    """A session's `docker exec` client killed leaves its command running in the container;
    closing the channel (the client left, or its key was revoked) must end that command and
    what it started, while the job itself runs on."""
    engine = docker_engine.client()
    try:
        async with running_box(docker_agent, docker_engine) as state:
            container = engine.containers.get(state.container_id or "")

            def sleeping(seconds: str) -> bool:
                processes = container.top()["Processes"]
                return any(f"sleep {seconds}" in " ".join(p) for p in processes)

            async def both(running: bool) -> bool:
                found = [await asyncio.to_thread(sleeping, s) for s in ("777", "778")]
                return found == [running, running]

            conn = await connect_box(docker_agent)
            await conn.create_process("sleep 777 & sleep 778; echo never")
            await wait_for(lambda: both(True), "the session's commands to run")
            conn.close()
            await conn.wait_closed()
            await wait_for(lambda: both(False), "the session's commands to end")
            assert sleeping("600")  # the job's own command runs on
    finally:
        engine.close()
