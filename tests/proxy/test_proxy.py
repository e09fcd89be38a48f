"""The service proxy against a real service behind the agent's embedded SSH server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import httpx
import pytest
import uvicorn
import websockets
from fastapi import FastAPI, Request, WebSocket

from agent.ssh.server import SSHServerOptions, start_ssh_server
from agent.tunnel import SSHTarget, TunnelPool
from reconciler.engine.service_routes import ServiceRoute, Upstream
from reconciler.engine.service_stats import RequestStats
from reconciler.web.proxy import ServiceProxy

TOKEN = "member-token"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _service_app() -> FastAPI:
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def echo(path: str, request: Request) -> dict[str, object]:
        return {
            "path": "/" + path,
            "method": request.method,
            "body": (await request.body()).decode(),
            "auth": request.headers.get("authorization"),
            "query": str(request.url.query),
        }

    @app.websocket("/ws")
    async def ws(socket: WebSocket) -> None:
        await socket.accept()
        while True:
            text = await socket.receive_text()
            await socket.send_text(text.upper())

    return app


async def _serve(app: object, port: int) -> uvicorn.Server:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))  # type: ignore[arg-type]
    asyncio.get_running_loop().create_task(server.serve())
    async with asyncio.timeout(10):
        while not server.started:  # noqa: ASYNC110 - uvicorn has no started event
            await asyncio.sleep(0.01)
    return server


class StaticRoutes:
    def __init__(self, route: ServiceRoute | None) -> None:
        self.route_value = route

    async def route(self, project: str, run_name: str) -> ServiceRoute | None:
        if self.route_value and (project, run_name) == ("main", self.route_value.run_name):
            return self.route_value
        return None


async def _authorize(project: str, token: str | None) -> bool:
    return token == TOKEN


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[ServiceProxy, StaticRoutes, int, SSHTarget]]:
    service_port = _free_port()
    service = await _serve(_service_app(), service_port)
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(tmp_path / "key"))
    key.write_public_key(str(tmp_path / "authorized_keys"))
    ssh_port = _free_port()

    async def no_sessions(name: str, projects: frozenset[str] | None) -> None:
        return None

    acceptor = await start_ssh_server(
        SSHServerOptions(ssh_port, tmp_path / "host_key", tmp_path / "authorized_keys"),
        policy=lambda p, by_user: p == service_port,
        sessions=no_sessions,
    )
    target = SSHTarget("127.0.0.1", ssh_port, user="dockyard", identity_file=str(tmp_path / "key"))
    pool = TunnelPool()
    route = ServiceRoute("main", "svc", True, True, (Upstream(target, service_port, "job-1"),))
    routes = StaticRoutes(route)
    proxy = ServiceProxy(routes=routes, pool=pool, authorize=_authorize, stats=RequestStats())
    yield proxy, routes, service_port, target
    await proxy.aclose()
    await pool.close()
    acceptor.close()
    service.should_exit = True


async def test_forwards_with_auth_and_strip_prefix(setup: tuple) -> None:  # type: ignore[type-arg]
    proxy, _routes, _, _ = setup
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=proxy), base_url="http://server"
    ) as client:
        denied = await client.get("/proxy/services/main/svc/hello")
        assert denied.status_code == 401
        ok = await client.post(
            "/proxy/services/main/svc/a/b?x=1",
            content=b"payload",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert ok.status_code == 200
        body = ok.json()
        assert body["path"] == "/a/b"
        assert body["body"] == "payload"
        assert body["query"] == "x=1"
        assert body["auth"] is None  # the member token is not passed upstream
        redirect = await client.get("/proxy/services/main/svc")
        assert redirect.status_code == 308
        assert redirect.headers["location"] == "/proxy/services/main/svc/"
        missing = await client.get("/proxy/services/main/nope/")
        assert missing.status_code == 404
    totals = proxy._stats.totals()
    assert totals[("main", "svc", "4xx")][0] == 1 and totals[("main", "svc", "2xx")][0] == 1
    assert not any(run == "nope" for _, run, _ in totals), "unknown services are not counted"


async def test_no_auth_keeps_prefix_and_skips_dead_replica(setup: tuple) -> None:  # type: ignore[type-arg]
    proxy, routes, service_port, target = setup
    dead = Upstream(target, _free_port(), "job-dead")
    live = Upstream(target, service_port, "job-1")
    routes.route_value = ServiceRoute("main", "svc", False, False, (dead, live))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=proxy), base_url="http://server"
    ) as client:
        for _ in range(4):
            ok = await client.get("/proxy/services/main/svc/x")
            assert ok.status_code == 200
            assert ok.json()["path"] == "/proxy/services/main/svc/x"


async def test_websocket_bridged(setup: tuple) -> None:  # type: ignore[type-arg]
    proxy, routes, service_port, target = setup
    routes.route_value = ServiceRoute(
        "main", "svc", False, True, (Upstream(target, service_port, "job-1"),)
    )
    port = _free_port()
    server = await _serve(proxy, port)
    try:
        async with websockets.connect(f"ws://127.0.0.1:{port}/proxy/services/main/svc/ws") as ws:
            await ws.send("hello")
            assert await ws.recv() == "HELLO"
            await ws.send("again")
            assert await ws.recv() == "AGAIN"
    finally:
        server.should_exit = True


async def test_bodies_larger_than_the_channel_window_pass_both_ways(setup: tuple) -> None:  # type: ignore[type-arg]
    proxy, _routes, _, _ = setup
    payload = b"0123456789abcdef" * (12 * 2**20 // 16)  # 12 MiB: more than the 8 MiB window
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=proxy), base_url="http://server", timeout=60
    ) as client:
        echoed = await client.post(
            "/proxy/services/main/svc/big",
            content=payload,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert echoed.status_code == 200
    assert echoed.json()["body"] == payload.decode()
