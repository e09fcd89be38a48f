"""A service scales out on the proxy's request rate (containers on one shared instance)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from reconciler.engine.routes import StoreRoutes
from reconciler.web.proxy import ServiceProxy
from tests.e2e.runs_harness import (
    Harness,
    close_harness,
    make_harness,
    start_agent_env,
    stop_agent_env,
)
from tests.services.docker import DockerEngine, docker_engine  # noqa: F401
from tests.services.missing import skip_or_fail

pytestmark = [pytest.mark.timeout(180), pytest.mark.docker]


@pytest.fixture
async def h(tmp_path: Path, docker_engine: DockerEngine) -> AsyncIterator[Harness]:  # noqa: F811
    env = await start_agent_env(tmp_path / "agent")
    harness = await make_harness(tmp_path, env, total_blocks=4)
    if "docker" not in (harness.instance.host_info or {}).get("executors", []):
        await close_harness(harness)
        stop_agent_env(env)
        skip_or_fail("the local agent sees no Docker engine (its executors: no docker)")
    yield harness
    await close_harness(harness)
    stop_agent_env(env)


async def _allow(project: str, token: str | None) -> bool:
    return True


async def test_scales_out_on_request_rate(h: Harness, docker_engine: DockerEngine) -> None:  # noqa: F811
    run = h.submit(
        f"""
type: service
name: api
image: {docker_engine.image}
port: 8080
auth: false
replicas: 1..2
scaling:
  metric: rps
  target: 1
  scale_up_delay: 0s
commands:
  - mkdir -p /www && echo hello > /www/index.html
  - httpd -f -p 8080 -h /www
"""
    )

    def running() -> list[int]:
        return [
            int((j.runtime or {}).get("ports", {}).get("8080", 0))
            for j in h.jobs_of(run.id)
            if j.status == "running" and (j.runtime or {}).get("ready")
        ]

    await h.until(lambda: len(running()) == 1, within=90)
    proxy = ServiceProxy(
        routes=StoreRoutes(h.store, h.agents), pool=h.pool, authorize=_allow, stats=h.stats
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=proxy), base_url="http://server"
    ) as client:
        for _ in range(150):  # 2.5 requests/s over the 60 s window: 3 wanted, 2 at most
            response = await client.get("/proxy/services/main/api/")
            assert response.status_code == 200
            assert response.text.strip() == "hello"
    await h.until(lambda: len(running()) == 2, within=90)
    ports = running()
    assert len(set(ports)) == 2 and 8080 not in ports, "containers share the host via mapped ports"
    await proxy.aclose()
