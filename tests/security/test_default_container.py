"""On a host with Docker and the default image, a run without `image:` is a container.

The attack of a project member (role `user`) on the local fleet, as in
`test_job_isolation.py`, but with the local agent started as the server starts it with
`--job-isolation auto` and a default image the engine has: the job is in a container of
that image (its own PID namespace), and neither the server's data dir (admin token,
database), nor the agent's data dir, nor the Docker socket is there; the agent's API,
reached over the host network, refuses it (docs/security.md, "Jobs and the host").
The default image is a fresh tag of the busybox test image (`tests/services/docker.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker.errors
import pytest

from agent.client import AgentClient
from agent.local import LocalAgent, ensure_client_key, ensure_local_agent, stop_local_agent
from agent.protocol import ExecutorKind, JobSpec, JobState, JobStatus
from agent.tunnel import TunnelPool
from reconciler.app import build_server
from reconciler.settings import Settings
from tests.security.local_users import need_root
from tests.services.docker import DockerEngine

pytestmark = pytest.mark.docker


@pytest.fixture
def default_image(docker_engine: DockerEngine) -> Iterator[str]:
    client = docker_engine.client()
    tag = f"dockyard-test/default-{uuid.uuid4().hex[:8]}:1"
    client.images.get(docker_engine.image).tag(tag)
    yield tag
    with contextlib.suppress(docker.errors.APIError):
        client.images.remove(tag, force=True)
    client.close()


@pytest.fixture
async def local_fleet(
    tmp_path: Path, default_image: str
) -> AsyncIterator[tuple[Path, LocalAgent, AgentClient]]:
    need_root()
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir, cli_config=tmp_path / "cli.yml")
    server = build_server(settings)
    server.store.close()
    pool = TunnelPool()
    key = ensure_client_key(data_dir / "ssh" / "id_ed25519")
    local = await ensure_local_agent(
        data_dir, key, pool, job_isolation="auto", default_image=default_image
    )
    try:
        async with AgentClient.over_tunnel(pool, local.target, local.agent_port) as client:
            yield data_dir, local, client
    finally:
        await pool.close()
        stop_local_agent(data_dir)


async def _finished(client: AgentClient, job_id: str) -> JobState:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = await client.job(job_id)
        if state.status in (JobStatus.EXITED, JobStatus.FAILED, JobStatus.TERMINATED):
            return state
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish")


async def test_a_run_without_image_is_a_container_that_sees_none_of_dockyard(
    local_fleet: tuple[Path, LocalAgent, AgentClient],
) -> None:
    data_dir, local, client = local_fleet
    token = (data_dir / "admin-token").read_text().strip()
    agent_data = data_dir / "local-agent" / "data"
    api = f"http://127.0.0.1:{local.agent_port}/api/v1/jobs"
    commands = [
        'echo "pidns $(readlink /proc/self/ns/pid)"',
        f"cat {data_dir}/admin-token || echo no-token",
        f"head -c 16 {data_dir}/dockyard.db >/dev/null && echo READ-DB || echo no-db",
        f"ls {agent_data}/jobs && echo LISTED-JOBS || echo no-jobs",
        "ls /var/run/docker.sock /run/docker.sock 2>/dev/null && echo SOCKET || echo no-socket",
        f"wget -q -O- {api} && echo API-ANSWERED || echo no-api",
    ]
    spec = JobSpec(id="member-job", run_name="member-job", commands=["; ".join(commands)])
    await client.submit(spec)
    state = await _finished(client, spec.id)
    log = (await client.logs(spec.id, limit=2**20)).data.decode(errors="replace")
    await client.remove(spec.id)
    assert state.status == JobStatus.EXITED, (state, log)
    assert state.executor == ExecutorKind.DOCKER and state.container_id, (state, log)
    assert f"pidns {os.readlink('/proc/self/ns/pid')}" not in log, "in the host's namespace"
    assert token not in log, "the job read the admin token"
    for refused in ("no-token", "no-db", "no-jobs", "no-socket", "no-api"):
        assert refused in log, log
    for escaped in ("READ-DB", "LISTED-JOBS", "SOCKET\n", "API-ANSWERED"):
        assert escaped not in log, log
