"""A run without `image:` through the server: in a container of the local agent's default
image when Docker has it; else a process job whose run says why (an event on the job).

The local agent runs with `--job-isolation auto` and a default image that is a fresh tag of
the busybox test image (`tests/services/docker.py`), or a tag no engine has.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker.errors
import pytest

from agent.local import ensure_client_key, ensure_local_agent, stop_local_agent
from agent.tunnel import TunnelPool
from tests.e2e.runs_harness import AgentEnv, close_harness, make_harness
from tests.services.docker import DockerEngine

pytestmark = [pytest.mark.timeout(120), pytest.mark.docker]
TASK = """
type: task
name: where
commands:
  - echo "pidns $(readlink /proc/self/ns/pid)"
"""


async def _env(root: Path, image: str) -> AgentEnv:
    pool = TunnelPool()
    key = ensure_client_key(root / "ssh" / "id_ed25519")
    local = await ensure_local_agent(
        root, key, pool, job_user="self", job_isolation="auto", default_image=image
    )
    await pool.close()
    return AgentEnv(root, key, local)


@contextlib.asynccontextmanager
async def _agent(root: Path, image: str) -> AsyncIterator[AgentEnv]:
    env = await _env(root, image)
    try:
        yield env
    finally:
        stop_local_agent(root)


async def test_a_run_without_image_runs_in_the_default_image(
    tmp_path: Path, docker_engine: DockerEngine
) -> None:
    client = docker_engine.client()
    tag = f"dockyard-test/default-{uuid.uuid4().hex[:8]}:1"
    client.images.get(docker_engine.image).tag(tag)
    try:
        async with _agent(tmp_path / "agent", tag) as env:
            h = await make_harness(tmp_path, env)
            try:
                run = h.submit(TASK)
                await h.until(lambda: h.run(run.id).status in ("done", "failed"))
                [job] = h.jobs_of(run.id)
                assert (h.run(run.id).status, job.runtime["executor"]) == ("done", "docker"), (
                    h.describe()
                )
                text = h.log_text(run)
                assert "pidns pid:[" in text and os.readlink("/proc/self/ns/pid") not in text
            finally:
                await close_harness(h)
    finally:
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(tag, force=True)
        client.close()


async def test_without_the_default_image_the_run_says_why(
    tmp_path: Path, docker_engine: DockerEngine
) -> None:
    absent = f"dockyard-test/absent-{uuid.uuid4().hex[:8]}:1"
    async with _agent(tmp_path / "agent", absent) as env:
        h = await make_harness(tmp_path, env)
        try:
            run = h.submit(TASK)
            await h.until(lambda: h.run(run.id).status in ("done", "failed"))
            [job] = h.jobs_of(run.id)
            assert (h.run(run.id).status, job.runtime["executor"]) == ("done", "process")
            assert os.readlink("/proc/self/ns/pid") in h.log_text(run)
            events = [event.message for event in h.store.list_events(target_id=job.id)]
            assert any(
                f"the default image {absent} is not on this host" in message
                and f"docker pull {absent}" in message
                for message in events
            ), events
        finally:
            await close_harness(h)
