"""Docker jobs against a real engine (``tests/services/docker.py``), image from ``docker
import``: commands, env, user, ports, volumes, limits, stop, logs, restart re-adoption."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import httpx
import pytest

from agent.protocol import JobReason, JobState, JobStatus
from agent.server.serving import AgentConfig, start_agent
from tests.agent.conftest import LOOP, AgentApi, AgentProcess, _client, recorded_tools, wait_for
from tests.agent.registry import FakeRegistry
from tests.services.docker import DockerEngine, rootfs_tarball

pytestmark = pytest.mark.docker


@pytest.fixture
def job_id() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def dagent(
    tmp_path: Path, docker_engine: DockerEngine, docker_client: docker.DockerClient
) -> AsyncIterator[AgentApi]:
    config = AgentConfig(
        data_dir=tmp_path / "agent",
        http_port=0,
        docker_url=docker_engine.base_url,
        tool_runner=recorded_tools(False),
        volume_roots=(tmp_path,),  # the tests' volumes are temp dirs
    )
    async with start_agent(config) as context, _client(context.http_port) as http:
        yield AgentApi(http, config.data_dir)
    for container in docker_client.containers.list(
        all=True, filters={"label": f"dockyard.test-dir={tmp_path}"}
    ):
        container.remove(force=True)


def docker_job(engine: DockerEngine, tmp_path: Path, **spec: object) -> dict[str, object]:
    labels = {"dockyard.test-dir": str(tmp_path)}
    return {"executor": "docker", "image": engine.image, "labels": labels, **spec}


async def test_host_offers_docker(dagent: AgentApi) -> None:
    host = (await dagent.http.get("/host")).json()
    assert host["executors"] == ["process", "docker"]


async def test_container_runs_joined_commands_with_env_and_user(
    dagent: AgentApi,
    docker_engine: DockerEngine,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    job_id: str,
) -> None:
    commands = ['echo "$GREETING from $(id -u) in $(pwd)"', "echo err >&2", "exit 3", "echo no"]
    spec = docker_job(docker_engine, tmp_path, id=job_id, commands=commands, env={"GREETING": "hi"})
    spec |= {"user": "nobody", "working_dir": "/tmp"}
    assert (await dagent.submit(**spec)).status_code == 200
    state = await dagent.wait_finished(job_id)
    assert (state.status, state.exit_status) == (JobStatus.EXITED, 3)
    assert state.container_id is not None
    assert await dagent.read_log(job_id) == b"hi from 65534 in /tmp\nerr\n"
    container = docker_client.containers.get(state.container_id)
    assert container.name == f"dockyard-{job_id}"
    assert container.labels["dockyard.job-id"] == job_id
    assert container.labels["dockyard.run-name"] == "run"
    assert (await dagent.http.delete(f"/jobs/{job_id}")).status_code == 204
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(state.container_id)


async def test_entrypoint_takes_commands_as_arguments(
    dagent: AgentApi, docker_engine: DockerEngine, tmp_path: Path, job_id: str
) -> None:
    spec = docker_job(docker_engine, tmp_path, id=job_id, entrypoint=["echo"], commands=["a", "b"])
    await dagent.submit(**spec)
    assert (await dagent.wait_finished(job_id)).exit_status == 0
    assert await dagent.read_log(job_id) == b"a b\n"


async def test_limits_volumes_and_bridge_ports(
    dagent: AgentApi,
    docker_engine: DockerEngine,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    job_id: str,
) -> None:
    shared, readonly = tmp_path / "shared", tmp_path / "ro"
    shared.mkdir()
    readonly.mkdir()
    (shared / "index.html").write_text("served from a volume\n")
    script = (
        "touch /ro/x 2>/dev/null && echo ro-writable; echo written > /data/out; "
        "echo ready; httpd -f -p 8080 -h /data"
    )
    spec = docker_job(docker_engine, tmp_path, id=job_id, commands=[script])
    spec |= {
        "network_mode": "bridge",
        "ports": [{"container_port": 8080}],
        "volumes": [
            {"host_path": str(shared), "container_path": "/data"},
            {"host_path": str(readonly), "container_path": "/ro", "read_only": True},
        ],
        "shm_size_mib": 64,
        "memory_mib": 256,
        "cpus": 0.5,
    }
    await dagent.submit(**spec)
    state = await dagent.wait_status(job_id, JobStatus.RUNNING)
    await dagent.wait_log(job_id, b"ready\n")
    assert (shared / "out").read_text() == "written\n" and not (readonly / "x").exists()
    [mapping] = state.ports
    assert mapping.container_port == 8080 and mapping.host_port > 0

    async def served() -> str | None:
        try:
            async with httpx.AsyncClient() as http:
                response = await http.get(f"http://127.0.0.1:{mapping.host_port}/index.html")
        except httpx.TransportError:
            return None
        return response.text

    assert await wait_for(served, "httpd behind the mapped port") == "served from a volume\n"
    host_config = docker_client.api.inspect_container(state.container_id)["HostConfig"]
    assert host_config["ShmSize"] == 64 * 2**20
    assert host_config["Memory"] == 256 * 2**20
    assert host_config["NanoCpus"] == 500_000_000
    assert host_config["PortBindings"]["8080/tcp"][0]["HostIp"] == "127.0.0.1"
    await dagent.http.post(f"/jobs/{job_id}/stop", json={"force": True})
    assert (await dagent.wait_finished(job_id)).reason == JobReason.KILLED


async def test_stop_with_grace_then_force(
    dagent: AgentApi, docker_engine: DockerEngine, tmp_path: Path
) -> None:
    polite, stubborn = f"p-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    trapping = f"trap 'echo bye; exit 7' TERM; echo ready; {LOOP}"
    await dagent.submit(**docker_job(docker_engine, tmp_path, id=polite, commands=[trapping]))
    ignoring = f"trap '' TERM; echo ready; {LOOP}"
    await dagent.submit(**docker_job(docker_engine, tmp_path, id=stubborn, commands=[ignoring]))
    await dagent.wait_log(polite, b"ready\n")
    await dagent.wait_log(stubborn, b"ready\n")
    await dagent.http.post(f"/jobs/{polite}/stop", json={"timeout": 20})
    await dagent.http.post(f"/jobs/{stubborn}/stop", json={"timeout": 0.3})
    first = await dagent.wait_finished(polite)
    assert (first.status, first.reason, first.exit_status) == (
        JobStatus.TERMINATED,
        JobReason.STOPPED,
        7,
    )
    assert (await dagent.read_log(polite)).endswith(b"bye\n")
    second = await dagent.wait_finished(stubborn)
    assert (second.status, second.reason, second.exit_status) == (
        JobStatus.TERMINATED,
        JobReason.KILLED,
        137,
    )


async def test_stop_reaches_every_process_of_the_job(
    dagent: AgentApi, docker_engine: DockerEngine, tmp_path: Path, job_id: str
) -> None:
    # no handler anywhere: SIGTERM's default action ends the shell and its children
    script = f"sleep 1000 & echo ready; {LOOP}"
    await dagent.submit(**docker_job(docker_engine, tmp_path, id=job_id, commands=[script]))
    await dagent.wait_log(job_id, b"ready\n")
    await dagent.http.post(f"/jobs/{job_id}/stop", json={"timeout": 30})
    state = await dagent.wait_finished(job_id)
    assert (state.status, state.reason, state.exit_status) == (
        JobStatus.TERMINATED,
        JobReason.STOPPED,
        143,
    )


@pytest.fixture
async def registry(docker_client: docker.DockerClient) -> AsyncIterator[FakeRegistry]:
    unique = uuid.uuid4().hex[:8]  # a layer the engine has not got yet
    rootfs = rootfs_tarball({"etc/dockyard-test": unique.encode()})
    fake = FakeRegistry(rootfs, name=f"dockyard/pulled-{unique}")
    fake.hold_layer = True
    async for serving in fake.serve():
        yield serving
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(serving.image, force=True)


async def test_a_pull_is_reported_with_progress_and_skipped_once_local(
    dagent: AgentApi, registry: FakeRegistry, tmp_path: Path, job_id: str
) -> None:
    spec = {"executor": "docker", "image": registry.image, "commands": ["echo pulled"]}
    spec["labels"] = {"dockyard.test-dir": str(tmp_path)}
    await dagent.submit(id=job_id, **spec)
    await asyncio.wait_for(registry.wait_half_sent(), 30)

    async def halfway() -> JobState | None:
        state = await dagent.state(job_id)
        progress = state.pull_progress or 0.0
        return state if state.status == JobStatus.PULLING and 0 < progress < 1 else None

    pulling = await wait_for(halfway, "a pull in progress")
    assert pulling.message == f"pulling {registry.image}"
    registry.release()
    state = await dagent.wait_finished(job_id)
    assert (state.status, state.exit_status, state.pull_progress) == (JobStatus.EXITED, 0, None)
    assert await dagent.read_log(job_id) == b"pulled\n"
    await dagent.submit(id=f"{job_id}-again", **spec)  # the image is local now: no pull
    assert (await dagent.wait_finished(f"{job_id}-again")).exit_status == 0
    assert registry.layer_requests == 1


async def test_stop_during_a_pull(
    dagent: AgentApi,
    registry: FakeRegistry,
    docker_client: docker.DockerClient,
    job_id: str,
) -> None:
    spec = {"executor": "docker", "image": registry.image, "commands": ["echo never"]}
    await dagent.submit(id=job_id, **spec)
    await asyncio.wait_for(registry.wait_half_sent(), 30)
    await dagent.wait_status(job_id, JobStatus.PULLING)
    answer = await dagent.http.post(f"/jobs/{job_id}/stop", json={})
    assert answer.status_code == 200, answer.text
    stopping = JobState.model_validate(answer.json())  # the state when the stop was taken
    assert (stopping.id, stopping.status, stopping.reason) == (job_id, JobStatus.PULLING, None)
    state = await dagent.wait_finished(job_id)
    assert (state.status, state.reason, state.container_id) == (
        JobStatus.TERMINATED,
        JobReason.STOPPED,
        None,
    )
    assert docker_client.containers.list(all=True, filters={"name": f"dockyard-{job_id}"}) == []
    # a stop cancels the agent's wait, not the engine's pull: the engine (and the agent's
    # thread blocked in it) pulls on while the registry holds the layer. Release it here,
    # not in teardown, and see the pull's late events change nothing of the stopped job.
    registry.release()
    await asyncio.wait_for(registry.wait_layer_sent(), 30)

    async def pulled() -> bool:
        with contextlib.suppress(docker.errors.ImageNotFound):
            return bool(docker_client.images.get(registry.image))
        return False

    await wait_for(pulled, "the engine's pull to end")
    after = await dagent.state(job_id)
    assert (after.status, after.reason, after.pull_progress) == (
        JobStatus.TERMINATED,
        JobReason.STOPPED,
        None,
    )
    assert docker_client.containers.list(all=True, filters={"name": f"dockyard-{job_id}"}) == []


async def test_missing_image_fails_with_a_reason(dagent: AgentApi, job_id: str) -> None:
    spec = {"executor": "docker", "image": "registry.invalid/nothing:1", "commands": ["true"]}
    await dagent.submit(id=job_id, **spec)
    state = await dagent.wait_finished(job_id)
    assert (state.status, state.reason) == (JobStatus.FAILED, JobReason.IMAGE_NOT_FOUND)
    assert "registry.invalid/nothing:1" in state.message


async def test_a_container_that_cannot_start_fails_and_leaves_nothing(
    dagent: AgentApi,
    docker_engine: DockerEngine,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    job_id: str,
) -> None:
    spec = docker_job(docker_engine, tmp_path, id=job_id, commands=["true"], user="nosuchuser")
    await dagent.submit(**spec)
    state = await dagent.wait_finished(job_id)
    assert (state.status, state.reason) == (JobStatus.FAILED, JobReason.EXECUTOR_ERROR)
    assert state.message.startswith("Docker refused:") and "nosuchuser" in state.message
    assert docker_client.containers.list(all=True, filters={"name": f"dockyard-{job_id}"}) == []


async def test_binary_output_and_metrics(
    dagent: AgentApi, docker_engine: DockerEngine, tmp_path: Path, job_id: str
) -> None:
    script = (
        rf"printf 'caf\351 \377\000\n'; head -c 3000000 /dev/zero | tr '\000' 'z'; echo; {LOOP}"
    )
    await dagent.submit(**docker_job(docker_engine, tmp_path, id=job_id, commands=[script]))
    data = await dagent.wait_log(job_id, b"z\n")
    assert data == b"caf\xe9 \xff\x00\n" + b"z" * 3_000_000 + b"\n"

    async def metrics() -> dict[str, float] | None:  # the engine's first stats may be empty
        answer: dict[str, float] = (await dagent.http.get(f"/jobs/{job_id}/metrics")).json()
        return answer if answer["memory_bytes"] > 0 else None

    assert (await wait_for(metrics, "memory in the metrics"))["cpu_percent"] >= 0
    await dagent.http.post(f"/jobs/{job_id}/stop", json={"force": True})
    await dagent.wait_finished(job_id)


@pytest.mark.parametrize("logging", ["file", "engine"])
async def test_agent_killed_container_readopted_and_logs_exactly_once(
    logging: str,
    agent_process: AgentProcess,
    docker_engine: DockerEngine,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    job_id: str,
) -> None:
    agent_process.extra_args = (
        *("--docker-url", docker_engine.base_url),
        *("--volume-root", str(tmp_path)),  # the volume is a temp dir
    )
    shared = tmp_path / "shared"
    shared.mkdir()
    script = "i=0; while [ ! -e /w/go ]; do i=$((i+1)); echo line-$i; sleep 0.01; done; exit 4"
    if logging == "file":  # joined commands: the container writes the log file itself
        spec = docker_job(docker_engine, tmp_path, id=job_id, commands=[script])
    else:  # the image's program: the agent copies the engine's log
        spec = docker_job(
            docker_engine, tmp_path, id=job_id, entrypoint=["sh", "-c"], commands=[script]
        )
    spec["volumes"] = [{"host_path": str(shared), "container_path": "/w"}]
    api = await agent_process.start()
    try:
        await api.submit(**spec)
        await api.wait_log(job_id, b"line-20\n")
        await api.http.aclose()
        agent_process.kill()
        api = await agent_process.start()
        assert (await api.state(job_id)).status == JobStatus.RUNNING
        await api.wait_log(job_id, b"line-300\n")
        (shared / "go").touch()
        state = await api.wait_finished(job_id)
        assert (state.status, state.exit_status) == (JobStatus.EXITED, 4)
        lines = (await api.read_log(job_id)).decode().splitlines()
        assert lines == [f"line-{n}" for n in range(1, len(lines) + 1)]
    finally:
        await api.http.aclose()
        for container in docker_client.containers.list(
            all=True, filters={"label": f"dockyard.job-id={job_id}"}
        ):
            container.remove(force=True)
