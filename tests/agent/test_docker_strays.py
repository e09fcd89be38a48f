"""A container of a job the agent does not run is killed (Docker executor), as a stray
process is (``test_process_strays.py``): real agents on a real Docker engine.

The agent's record of a running container job is lost (deleted with the agent away); the
next agent of that data dir kills the container when it starts. A container of another
agent (another data dir, the same engine) is never touched.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import docker
import pytest

from agent.protocol import JobStatus
from agent.server.serving import AgentConfig, start_agent
from agent.server.store import JobStore
from tests.agent.conftest import LOOP, AgentApi, _client, recorded_tools, wait_for
from tests.services.docker import DockerEngine

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def _remove_strays(docker_client: docker.DockerClient) -> Iterator[None]:
    """Removes this file's containers (label dockyard.test=strays) after each test."""
    yield
    labelled = docker_client.containers.list(all=True, filters={"label": "dockyard.test=strays"})
    for container in labelled:
        container.remove(force=True)


def _config(data_dir: Path, engine: DockerEngine) -> AgentConfig:
    return AgentConfig(
        data_dir=data_dir,
        http_port=0,
        docker_url=engine.base_url,
        tool_runner=recorded_tools(False),
    )


async def _started(stack: AsyncExitStack, config: AgentConfig) -> AgentApi:
    context = await stack.enter_async_context(start_agent(config))
    http = await stack.enter_async_context(_client(context.http_port))
    return AgentApi(http, config.data_dir)


async def _run_loop(api: AgentApi, engine: DockerEngine, job_id: str) -> None:
    labels = {"dockyard.test": "strays"}
    spec = {"executor": "docker", "image": engine.image, "labels": labels, "commands": [LOOP]}
    await api.submit(id=job_id, **spec)
    await api.wait_status(job_id, JobStatus.RUNNING)


def _running(client: docker.DockerClient, job_id: str) -> bool:
    found = client.containers.list(filters={"label": f"dockyard.job-id={job_id}"})
    return bool(found)


async def test_a_container_whose_record_is_lost_is_killed_at_start(
    tmp_path: Path, docker_engine: DockerEngine, docker_client: docker.DockerClient
) -> None:
    lost, elsewhere = (f"t-{uuid.uuid4().hex[:10]}" for _ in range(2))
    mine = _config(tmp_path / "mine", docker_engine)
    async with AsyncExitStack() as other:
        await _run_loop(
            await _started(other, _config(tmp_path / "other", docker_engine)),
            docker_engine,
            elsewhere,
        )
        async with AsyncExitStack() as first:
            await _run_loop(await _started(first, mine), docker_engine, lost)
        # the agent is gone, its container runs on; its record goes missing
        assert _running(docker_client, lost)
        JobStore(mine.data_dir).delete(lost)
        async with AsyncExitStack() as second:
            api = await _started(second, mine)

            async def killed() -> bool:
                return not _running(docker_client, lost)

            await wait_for(killed, f"the container of {lost} to be killed", deadline=30)
            assert (await api.http.get(f"/jobs/{lost}")).status_code == 404
        assert _running(docker_client, elsewhere)  # another agent's job, never touched
