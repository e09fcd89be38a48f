"""Services on the real local agent, reached through the built-in proxy."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from agent.server.listeners import listeners
from agent.server.portholders import job_marker, socket_holder
from reconciler.adapters.db.models import Run
from reconciler.engine.routes import StoreRoutes
from reconciler.web.proxy import ServiceProxy
from schemas import parse_config
from tests.e2e.runs_harness import (
    Harness,
)
from tests.services.ports import reserved_port

pytestmark = pytest.mark.timeout(180)
TOKEN = "member-token"


@pytest.fixture
def port() -> Iterator[int]:
    """The service's port, held for the test: v1 and, after it stops, v2 bind it (a port
    from `bind(0)`, released at once, was the kernel's to hand to any connection meanwhile)."""
    with reserved_port() as reserved:
        yield reserved


async def _authorize(project: str, token: str | None) -> bool:
    return token == TOKEN


def _service(port: int, version: str, auth: bool = True) -> str:
    return f"""
type: service
name: web
port: {port}
auth: {str(auth).lower()}
commands:
  - mkdir -p site && echo {version} > site/index.html
  - python3 -m http.server {port} --bind 127.0.0.1 --directory site
probes:
  - type: http
    url: /
    interval: 1s
"""


PATHS = pytest.mark.parametrize("direct", [False, True], ids=["tunnel", "loopback"])


def _proxy(h: Harness, direct: bool) -> httpx.AsyncClient:
    """The proxy over SSH channels, or dialling this host's replicas on loopback as the
    server does for its own local agent."""
    local = h.local.ssh_port if direct else None
    routes = StoreRoutes(h.store, h.agents, ttl=0.2, local_ssh_port=lambda: local)
    proxy = ServiceProxy(routes=routes, pool=h.pool, authorize=_authorize, stats=h.stats)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy), base_url="http://server")


def _ready(h: Harness, run: Run) -> bool:
    jobs = [j for j in h.jobs_of(run.id) if j.status == "running"]
    return any((j.runtime or {}).get("ready") for j in jobs)


@PATHS
async def test_service_answers_through_proxy_with_auth(h: Harness, direct: bool, port: int) -> None:
    run = h.submit(_service(port, "v1"))
    await h.until(lambda: _ready(h, run))
    route = StoreRoutes(h.store, h.agents, local_ssh_port=lambda: h.local.ssh_port).load(
        "main", "web"
    )
    assert route is not None and [u.direct for u in route.upstreams] == [True]
    async with _proxy(h, direct) as client:
        denied = await client.get("/proxy/services/main/web/")
        assert denied.status_code == 401
        ok = await client.get(
            "/proxy/services/main/web/", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert ok.status_code == 200
        assert ok.text.strip() == "v1"
    h.store.update(
        Run, run.id, status="terminating", termination_reason="stopped_by_user", due_at=None
    )
    await h.until(lambda: h.run(run.id).status == "terminated")


def _who_serves(h: Harness, run_id: str, port: int) -> str:
    """Which job each replica's spec is (deployment, the version its commands write) and
    which job's process holds the port: tells an old replica that outlived its recorded end
    (the holder is the terminated job) from a new replica given the old spec."""
    lines = []
    for job in h.jobs_of(run_id):
        commands = (job.job_spec or {}).get("spec", {}).get("commands") or []
        version = "v2" if any("echo v2" in c for c in commands) else "v1"
        lines.append(
            f"  job {job.id} replica {job.replica_num}: {job.status} "
            f"deployment {job.deployment_num}, commands write {version}"
        )
    for uid, inode in listeners(port):
        pid = socket_holder(inode, uid)
        holder = job_marker(pid) if pid is not None else None
        lines.append(f"  port {port}: socket {inode} held by pid {pid} of job {holder}")
    return "\n".join(lines)


@PATHS
async def test_rolling_update_fails_no_request(h: Harness, direct: bool, port: int) -> None:
    run = h.submit(_service(port, "v1", auth=False))
    await h.until(lambda: _ready(h, run))
    results: list[str] = []
    stop = asyncio.Event()
    warmed = asyncio.Event()

    async def hammer(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            response = await client.get("/proxy/services/main/web/")
            results.append(f"{response.status_code}:{response.text.strip()}")
            if len(results) >= 5:
                warmed.set()

    async with _proxy(h, direct) as client:
        task = asyncio.create_task(hammer(client))
        async with asyncio.timeout(10):
            await warmed.wait()
        new = parse_config(_service(port, "v2", auth=False), "web.dstack.yml")
        h.store.update(
            Run,
            run.id,
            spec=new.normalized(),
            spec_hash=new.spec_hash(),
            deployment_num=1,
            due_at=None,
        )

        def rolled() -> bool:
            if task.done():  # the requests stopped: say why, not only that time ran out
                task.result()
                raise AssertionError(f"the requests stopped; the last answers: {results[-5:]}")
            return (
                bool(results)
                and results[-1] == "200:v2"
                and all(j.deployment_num == 1 for j in h.jobs_of(run.id) if j.status == "running")
            )

        try:
            await h.until(rolled, within=90)
        except AssertionError as exc:  # a CI run once timed out here: keep what it saw
            raise AssertionError(
                f"{exc}\nthe last answers: {results[-5:]}\n{_who_serves(h, run.id, port)}"
            ) from exc
        stop.set()
        await task
    failures = [r for r in results if not r.startswith("200:")]
    assert not failures, failures[:5]
    assert "200:v1" in results and "200:v2" in results
    # v1 never answers after v2 has
    assert results.index("200:v2") > max(i for i, r in enumerate(results) if r == "200:v1")
