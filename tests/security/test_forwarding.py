"""Forwarding carries only what the target should see (docs/security.md, "Service callers").

- A service behind the proxy never sees the caller's Dockyard token or Dockyard cookies,
  with `auth: true` and with `auth: false`: an echo service answers with the headers it got.
  A service's own credentials (a bearer that is not a Dockyard token, its own cookies) pass.
- A run that declares the agent's port as its own gets neither `runs/forward` nor proxy
  traffic to it: the agent's API is only for the server.

The server's store, admin token and token checks are the real ones (`build_server`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from sqlalchemy import select

from agent.tunnel import SSHTarget, TunnelPool
from reconciler.adapters.db.models import Fleet, Instance, Job, Project, Run
from reconciler.adapters.db.readmodels.database import Database
from reconciler.adapters.db.store import Store
from reconciler.app import build_server
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.routes import StoreRoutes
from reconciler.engine.service_routes import ServiceRoute, Upstream
from reconciler.engine.service_stats import RequestStats
from reconciler.settings import Settings
from reconciler.web.auth import token_authorizer, token_recogniser
from reconciler.web.errors import InvalidError
from reconciler.web.forwarding import find_endpoint
from reconciler.web.proxy import ServiceProxy

AGENT_PORT = 10998


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _echo() -> FastAPI:
    app = FastAPI()

    @app.get("/{path:path}")
    async def echo(path: str, request: Request) -> dict[str, str | None]:
        return {
            "authorization": request.headers.get("authorization"),
            "cookie": request.headers.get("cookie"),
        }

    return app


@dataclass
class World:
    store: Store
    token: str
    proxy: ServiceProxy
    routes: StaticRoutes


class StaticRoutes:
    def __init__(self) -> None:
        self.route_value: ServiceRoute | None = None

    async def route(self, project: str, run_name: str) -> ServiceRoute | None:
        return self.route_value


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    server = build_server(Settings(data_dir=tmp_path / "data", cli_config=tmp_path / "cli.yml"))
    assert server.admin_token is not None
    db = Database(server.store.engine)
    port = _free_port()
    echo = uvicorn.Server(uvicorn.Config(_echo(), host="127.0.0.1", port=port, log_level="error"))
    task = asyncio.create_task(echo.serve())
    async with asyncio.timeout(10):
        while not echo.started:  # noqa: ASYNC110 - uvicorn has no started event
            await asyncio.sleep(0.01)
    routes = StaticRoutes()
    upstream = Upstream(SSHTarget("127.0.0.1"), port, "job-1", direct=True)
    routes.route_value = ServiceRoute("main", "echo", True, True, (upstream,))
    proxy = ServiceProxy(
        routes=routes,
        pool=TunnelPool(),
        authorize=token_authorizer(db),
        is_dockyard_token=token_recogniser(db),
        stats=RequestStats(),
    )
    try:
        yield World(server.store, server.admin_token, proxy, routes)
    finally:
        await proxy.aclose()
        echo.should_exit = True
        await task
        server.store.close()


async def _seen(world: World, headers: dict[str, str]) -> dict[str, str | None]:
    transport = httpx.ASGITransport(app=world.proxy)
    async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
        response = await client.get("/proxy/services/main/echo/", headers=headers)
    assert response.status_code == 200, response.text
    seen: dict[str, str | None] = response.json()
    return seen


@pytest.mark.parametrize("auth", [True, False])
async def test_a_service_never_sees_the_callers_dockyard_token(world: World, auth: bool) -> None:
    route = world.routes.route_value
    assert route is not None
    world.routes.route_value = ServiceRoute("main", "echo", auth, True, route.upstreams)
    seen = await _seen(
        world,
        {
            "Authorization": f"Bearer {world.token}",
            "Cookie": "dockyard_session=s3cret; theme=dark",
        },
    )
    assert seen["authorization"] is None, "the caller's Dockyard token reached the service"
    assert seen["cookie"] == "theme=dark", "Dockyard's cookies reached the service"


async def test_an_auth_false_service_keeps_its_own_credentials(world: World) -> None:
    route = world.routes.route_value
    assert route is not None
    world.routes.route_value = ServiceRoute("main", "echo", False, True, route.upstreams)
    seen = await _seen(world, {"Authorization": "Bearer the-services-own-key"})
    assert seen["authorization"] == "Bearer the-services-own-key"


def _service_on_the_agents_port(store: Store) -> str:
    """A running service whose declared port is its host's agent port; its project id."""
    now = datetime.now(UTC)
    with store.writing() as session:
        project = session.scalars(select(Project).where(Project.name == "main")).one()
        fleet = Fleet(project_id=project.id, name="local", spec={}, status="active", created_at=now)
        session.add(fleet)
        session.flush()
        instance = Instance(
            fleet_id=fleet.id,
            project_id=project.id,
            name="local-0",
            status="busy",
            created_at=now,
            backend="ssh",
            hostname="10.0.0.9",
            agent_port=AGENT_PORT,
        )
        spec = {"type": "service", "name": "sneaky", "port": AGENT_PORT, "commands": ["x"]}
        run = Run(
            project_id=project.id,
            run_name="sneaky",
            run_type="service",
            spec=spec,
            spec_hash="h",
            status="running",
            submitted_at=now,
        )
        session.add_all([instance, run])
        session.flush()
        session.add(
            Job(
                run_id=run.id,
                status="running",
                job_spec={},
                submitted_at=now,
                instance_id=instance.id,
                runtime={"ready": True},
            )
        )
        return str(project.id)


async def test_runs_forward_to_the_agents_port_is_refused(world: World) -> None:
    project_id = _service_on_the_agents_port(world.store)
    with world.store.writing() as session, pytest.raises(InvalidError, match="agent's own port"):
        find_endpoint(session, project_id, "sneaky", 0, 0, AGENT_PORT)


async def test_the_proxy_has_no_replica_on_the_agents_port(world: World) -> None:
    _service_on_the_agents_port(world.store)
    routes = StoreRoutes(world.store, AgentDirectory(TunnelPool(), identity_file=None))
    route = routes.load("main", "sneaky")
    assert route is not None and route.upstreams == (), "the agent's API became a replica"
