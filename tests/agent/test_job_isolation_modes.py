"""Jobs without an image: a container of the default image, or a process that says why.

`--job-isolation auto|container|process` and `--default-image` (`agent/server/isolation.py`)
against a real Docker engine (`tests/services/docker.py`). The default image of each test
is a fresh tag of the busybox test image, never dstack's own name: the engine is shared
with the rest of the suite, whose process jobs must stay process jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from agent.protocol import ErrorCode, ExecutorKind, JobReason, JobSpec, JobStatus
from agent.server import isolation
from agent.server.errors import AgentError
from agent.server.isolation import (
    DEFAULT_IMAGE,
    EngineFacts,
    Isolation,
    JobIsolation,
    decide,
)
from agent.server.serving import AgentConfig, start_agent
from reconciler.core.dstack_wire import DEFAULT_IMAGE as DSTACK_DEFAULT_IMAGE
from tests.agent.conftest import AgentApi, _client, recorded_tools
from tests.services.docker import DockerEngine

# (the test machine may itself be a container: its PID namespace tells, /.dockerenv not)
PROBE = (
    'echo "pidns $(readlink /proc/self/ns/pid)"; '
    "ls {data} >/dev/null 2>&1 && echo SAW-DATA-DIR || echo no-data-dir"
)

HOST_PID_NS = os.readlink("/proc/self/ns/pid")


def test_the_default_image_is_dstacks() -> None:
    assert DEFAULT_IMAGE == DSTACK_DEFAULT_IMAGE


# --- the decision (pure) and the probe's cache -------------------------------------------


def _spec(**fields: object) -> JobSpec:
    return JobSpec.model_validate({"id": "j", "run_name": "r", "commands": ["true"], **fields})


def test_decide_per_mode_and_engine() -> None:
    engine = EngineFacts(answers=True, has_image=True, nvidia=False)
    placed = decide(Isolation.AUTO, engine, _spec(), "img:1")
    assert (placed.spec.executor, placed.spec.image, placed.notice) == ("docker", "img:1", "")
    assert decide(Isolation.PROCESS, engine, _spec(), "img:1").spec.executor == "process"
    assert decide(Isolation.AUTO, EngineFacts(), _spec(), "img:1").notice == ""
    absent = decide(Isolation.AUTO, EngineFacts(answers=True), _spec(), "img:1")
    assert absent.spec.executor == "process"
    assert "img:1 is not on this host" in absent.notice
    assert "docker pull img:1" in absent.notice and "--job-isolation container" in absent.notice
    gpus = decide(Isolation.AUTO, engine, _spec(gpus=[0]), "img:1")
    assert gpus.spec.executor == "process" and "nvidia" in gpus.notice
    pulled = decide(Isolation.CONTAINER, EngineFacts(answers=True), _spec(), "img:1")
    assert pulled.spec.executor == "docker"  # pulled at launch
    with pytest.raises(AgentError) as refused:
        decide(Isolation.CONTAINER, EngineFacts(), _spec(), "img:1")
    assert refused.value.code == ErrorCode.EXECUTOR_UNAVAILABLE
    assert "--job-isolation container" in refused.value.message
    own = _spec(executor="docker", image="mine:2")
    assert decide(Isolation.CONTAINER, engine, own, "img:1").spec == own


async def test_the_engine_is_asked_once_per_ttl() -> None:
    asked: list[str] = []
    now = [0.0]

    async def probe(image: str) -> EngineFacts:
        asked.append(image)
        return EngineFacts(answers=True, has_image=True)

    isolation = JobIsolation(Isolation.AUTO, "img:1", probe, clock=lambda: now[0], ttl=30)
    for _ in range(5):
        assert (await isolation.place(_spec())).spec.executor == ExecutorKind.DOCKER
    assert asked == ["img:1"]
    await isolation.place(_spec(executor="docker", image="other"))  # has one: not asked
    now[0] = 31.0
    await isolation.place(_spec())
    assert asked == ["img:1", "img:1"]


async def test_an_engine_that_hangs_counts_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "PROBE_TIMEOUT", 0.01)
    never = asyncio.Event()

    async def hanging(image: str) -> EngineFacts:
        await never.wait()
        return EngineFacts(answers=True, has_image=True)

    placed = await JobIsolation(Isolation.AUTO, "img:1", hanging).place(_spec())
    assert (placed.spec.executor, placed.notice) == (ExecutorKind.PROCESS, "")


# --- against a real engine -----------------------------------------------------------------


@pytest.fixture
def default_image(docker_engine: DockerEngine) -> Iterator[str]:
    """The test image under a tag of this test's own."""
    client = docker_engine.client()
    tag = f"dockyard-test/default-{uuid.uuid4().hex[:8]}:1"
    client.images.get(docker_engine.image).tag(tag)
    yield tag
    with contextlib.suppress(docker.errors.APIError):
        client.images.remove(tag)
    client.close()


async def _agent(
    tmp_path: Path, engine: DockerEngine, mode: Isolation, image: str
) -> AsyncIterator[AgentApi]:
    config = AgentConfig(
        data_dir=tmp_path / "agent",
        http_port=0,
        docker_url=engine.base_url,
        tool_runner=recorded_tools(False),
        job_isolation=mode,
        default_image=image,
    )
    async with start_agent(config) as context, _client(context.http_port) as http:
        yield AgentApi(http, config.data_dir)
    client = engine.client()
    for container in client.containers.list(all=True, filters={"label": f"run-dir={tmp_path}"}):
        container.remove(force=True)
    client.close()


def _job(tmp_path: Path, data_dir: Path) -> dict[str, object]:
    job_id = f"t-{uuid.uuid4().hex[:10]}"
    return {
        "id": job_id,
        "commands": [PROBE.format(data=data_dir)],
        "labels": {"run-dir": str(tmp_path)},
    }


@pytest.mark.docker
async def test_a_job_without_image_runs_in_a_container_of_the_default_image(
    tmp_path: Path, docker_engine: DockerEngine, default_image: str
) -> None:
    async for agent in _agent(tmp_path, docker_engine, Isolation.AUTO, default_image):
        job = _job(tmp_path, agent.data_dir)
        assert (await agent.submit(**job)).status_code == 200
        state = await agent.wait_finished(str(job["id"]))
        log = (await agent.read_log(str(job["id"]))).decode()
        assert (state.status, state.exit_status) == (JobStatus.EXITED, 0), (state, log)
        assert state.executor == ExecutorKind.DOCKER and state.container_id, state
        assert state.notice == ""
        assert "pidns pid:[" in log, log
        assert f"pidns {HOST_PID_NS}" not in log, f"in the host's PID namespace: {log}"
        assert "no-data-dir" in log and "SAW-DATA-DIR" not in log, log
        container = docker_engine.client().containers.get(state.container_id)
        assert container.labels["dockyard.default-image"] == default_image
        mounts = [mount["Source"] for mount in container.attrs["Mounts"]]
        assert mounts == [str(agent.data_dir / "jobs" / str(job["id"]) / "output.log")]


@pytest.mark.docker
async def test_without_the_image_a_job_runs_as_a_process_and_says_why(
    tmp_path: Path, docker_engine: DockerEngine
) -> None:
    absent = f"dockyard-test/absent-{uuid.uuid4().hex[:8]}:1"
    async for agent in _agent(tmp_path, docker_engine, Isolation.AUTO, absent):
        job = _job(tmp_path, agent.data_dir)
        response = await agent.submit(**job)
        assert response.status_code == 200
        assert f"the default image {absent} is not on this host" in response.json()["notice"]
        state = await agent.wait_finished(str(job["id"]))
        log = (await agent.read_log(str(job["id"]))).decode()
        assert state.executor == ExecutorKind.PROCESS and state.exit_status == 0, (state, log)
        assert f"docker pull {absent}" in state.notice
        assert "--job-isolation container" in state.notice
        assert f"pidns {HOST_PID_NS}" in log, log


@pytest.mark.docker
async def test_container_mode_fails_the_job_clearly_when_the_image_cannot_be_pulled(
    tmp_path: Path, docker_engine: DockerEngine
) -> None:
    missing = "127.0.0.1:1/dockyard-test/missing:1"  # nothing listens: refused at once
    async for agent in _agent(tmp_path, docker_engine, Isolation.CONTAINER, missing):
        job = _job(tmp_path, agent.data_dir)
        assert (await agent.submit(**job)).status_code == 200
        state = await agent.wait_finished(str(job["id"]))
        assert (state.status, state.reason) == (JobStatus.FAILED, JobReason.IMAGE_NOT_FOUND)
        assert f"cannot pull {missing}" in state.message
        assert "--default-image" in state.message and "pre-pull" in state.message


async def test_container_mode_without_docker_refuses_the_job(tmp_path: Path) -> None:
    config = AgentConfig(
        data_dir=tmp_path / "agent",
        http_port=0,
        docker=False,
        tool_runner=recorded_tools(False),
        job_isolation=Isolation.CONTAINER,
    )
    async with start_agent(config) as context, _client(context.http_port) as http:
        response = await AgentApi(http, config.data_dir).submit(id="j1", commands=["true"])
    assert response.status_code == 409
    assert response.json()["error"] == "executor_unavailable"
    assert "no Docker engine answers" in response.json()["message"]
