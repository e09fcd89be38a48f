"""A Docker job on the host's network cannot use the agent's API, though it runs as root.

A job on a whole instance gets `network_mode: host`, so it can connect to the agent on
127.0.0.1, and its processes are uid 0 (root in the container is root on the host): the
uid of its socket is one the agent serves. The agent also checks that the process holding
the socket runs in its own PID namespace, so the container's request is refused
(docs/security.md, "Jobs and the host"). A privileged container (root on the host) runs
only where the operator allowed it (`--allow-root-jobs`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import httpx
import pytest

from agent.protocol import API_PREFIX, JobStatus
from agent.server.jobaccount import DEFAULT_JOB_USER, JobAccount, ensure_job_user
from agent.server.serving import AgentConfig, start_agent
from tests.agent.conftest import AgentApi, recorded_tools
from tests.security.local_users import need_root
from tests.services.docker import DockerEngine


@pytest.fixture
async def dagent(tmp_path: Path, docker_engine: DockerEngine) -> AsyncIterator[AgentApi]:
    need_root()
    config = AgentConfig(
        data_dir=tmp_path / "agent",
        http_port=0,
        docker_url=docker_engine.base_url,
        tool_runner=recorded_tools(False),
    )
    async with start_agent(config) as context:
        base = f"http://127.0.0.1:{context.http_port}{API_PREFIX}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            yield AgentApi(http, config.data_dir)
    client = docker.DockerClient(base_url=docker_engine.base_url)
    for container in client.containers.list(
        all=True, filters={"label": f"dockyard.test-dir={tmp_path}"}
    ):
        container.remove(force=True)
    client.close()


async def test_a_host_network_container_cannot_call_the_agent(
    dagent: AgentApi, docker_engine: DockerEngine, tmp_path: Path
) -> None:
    port = dagent.http.base_url.port
    job_id = f"c-{uuid.uuid4().hex[:8]}"
    call = f"wget -q -O- http://127.0.0.1:{port}{API_PREFIX}/jobs 2>&1; echo rc=$?; id -u"
    response = await dagent.submit(
        id=job_id,
        executor="docker",
        image=docker_engine.image,
        network_mode="host",
        commands=[call],
        labels={"dockyard.test-dir": str(tmp_path)},
    )
    assert response.status_code == 200, response.text
    state = await dagent.wait_finished(job_id)
    log = (await dagent.read_log(job_id)).decode(errors="replace")
    assert state.status == JobStatus.EXITED, (state, log)
    assert log.rstrip().endswith("0"), f"the container runs as root: {log}"
    assert "403" in log and "rc=0" not in log, f"the container reached the agent's API: {log}"


async def test_a_privileged_container_needs_the_hosts_consent(
    tmp_path: Path, docker_engine: DockerEngine
) -> None:
    need_root()
    ensure_job_user(DEFAULT_JOB_USER)
    config = AgentConfig(
        data_dir=tmp_path / "agent",
        http_port=0,
        docker_url=docker_engine.base_url,
        tool_runner=recorded_tools(False),
        job_account=JobAccount(DEFAULT_JOB_USER, tmp_path / "work"),
    )
    async with start_agent(config) as context:
        base = f"http://127.0.0.1:{context.http_port}{API_PREFIX}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            response = await http.post(
                "/jobs",
                json={
                    "id": "priv",
                    "run_name": "priv",
                    "executor": "docker",
                    "image": docker_engine.image,
                    "privileged": True,
                    "commands": ["true"],
                },
            )
    assert response.status_code == 422, response.text
    assert "--allow-root-jobs" in response.json()["message"]


async def test_no_container_mounts_dockyards_data(
    tmp_path: Path, docker_engine: DockerEngine
) -> None:
    need_root()
    server_data = tmp_path / "server-data"
    volumes = server_data / "volumes" / "main" / "v1"
    volumes.mkdir(parents=True)
    (server_data / "admin-token").write_text("secret\n")
    config = AgentConfig(
        data_dir=server_data / "local-agent" / "data",
        http_port=0,
        docker_url=docker_engine.base_url,
        tool_runner=recorded_tools(False),
        protected_dirs=(server_data,),
        volume_dirs=(server_data / "volumes",),
        volume_roots=(tmp_path,),  # the data dirs lie below an allowed root, and stay refused
    )

    def job(name: str, host_path: Path) -> dict[str, object]:
        return {
            "id": name,
            "run_name": name,
            "executor": "docker",
            "image": docker_engine.image,
            "commands": ["cat /x/admin-token"],
            "volumes": [{"host_path": str(host_path), "container_path": "/x"}],
            "labels": {"dockyard.test-dir": str(tmp_path)},
        }

    async with start_agent(config) as context:
        base = f"http://127.0.0.1:{context.http_port}{API_PREFIX}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            for name, path in [
                ("data", server_data),
                ("root", Path("/")),
                ("agent", config.data_dir),
                ("docker-socket", Path("/var/run/docker.sock")),
            ]:
                refused = await http.post("/jobs", json=job(name, path))
                assert refused.status_code == 422, (name, refused.text)
                message = refused.json()["message"]
                # `/` and the socket are outside the roots (tests/security/test_volume_roots.py)
                outside = name in ("root", "docker-socket")
                assert ("--volume-root" if outside else "which no job may mount") in message
            volume = await http.post("/jobs", json=job("volume", volumes))
            assert volume.status_code == 200, volume.text
            await http.post("/jobs/volume/stop", json={"force": True})
    client = docker.DockerClient(base_url=docker_engine.base_url)
    for container in client.containers.list(
        all=True, filters={"label": f"dockyard.test-dir={tmp_path}"}
    ):
        container.remove(force=True)
    client.close()
