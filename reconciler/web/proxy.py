"""The built-in service proxy: `/proxy/services/<project>/<run>/…` to a ready replica.

A raw ASGI app that the server mounts at `/proxy/services`. For each request it asks a
`RouteSource` (backed by the store) for the service's ready replicas, checks the bearer
token unless the service has `auth: false`, and forwards over the SSH tunnel of the
replica's instance to the job's port on that host (httpx over `agent.ssh.transport`).
WebSocket upgrades are bridged frame by frame. A replica that refuses the connection is
skipped and the next one tried, and while a service has no ready replica requests wait
(up to `wait_ready`), so a rolling update delays requests but does not fail them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from agent.ssh.transport import SSHTransport
from agent.tunnel import AgentUnreachable, SSHTarget, TunnelPool
from reconciler.web.proxy_bridge import bridge_websocket
from reconciler.web.proxy_stats import RequestStats

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

PREFIX = "/proxy/services"
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
MAX_BODY = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Upstream:
    """One ready replica: the SSH endpoint of its host and the job's port there."""

    target: SSHTarget
    port: int
    job_id: str


@dataclass(frozen=True, slots=True)
class ServiceRoute:
    project: str
    run_name: str
    auth: bool
    strip_prefix: bool
    upstreams: tuple[Upstream, ...]


class RouteSource(Protocol):
    async def route(self, project: str, run_name: str) -> ServiceRoute | None:
        """The service's route, or None when no such running service exists."""


Authorizer = Callable[[str, str | None], Awaitable[bool]]
"""`authorize(project, bearer_token)`: whether the token belongs to a project member."""


class ServiceProxy:
    """ASGI app; see the module docstring."""

    def __init__(
        self,
        *,
        routes: RouteSource,
        pool: TunnelPool,
        authorize: Authorizer,
        stats: RequestStats,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 300.0,
        wait_ready: float = 30.0,
    ) -> None:
        self._routes = routes
        self._pool = pool
        self._authorize = authorize
        self._stats = stats
        self._clock = clock
        self._timeout = timeout
        self._wait_ready_for = wait_ready
        self._clients: dict[SSHTarget, httpx.AsyncClient] = {}
        self._turn = itertools.count()

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()

    def _client(self, target: SSHTarget) -> httpx.AsyncClient:
        client = self._clients.get(target)
        if client is None:

            async def open_stream(host: str, port: int) -> Any:
                return await self._pool.open_stream(target, host, port)

            client = httpx.AsyncClient(
                transport=SSHTransport(open_stream, max_connections=32),
                timeout=httpx.Timeout(self._timeout, connect=10.0),
            )
            self._clients[target] = client
        return client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return
        rest = _relative_path(scope)
        parts = rest.split("/", 3)  # "", project, run, tail
        if len(parts) < 3 or not parts[1] or not parts[2]:
            await _respond(send, scope, 404, "not a service path: /proxy/services/<project>/<run>/")
            return
        project, run_name = parts[1], parts[2]
        if len(parts) == 3:
            if scope["type"] == "http":
                location = f"{PREFIX}/{project}/{run_name}/"
                query = scope.get("query_string", b"").decode("latin-1")
                await _redirect(send, location + (f"?{query}" if query else ""))
            else:
                await _respond(send, scope, 404, "missing trailing slash")
            return
        route = await self._routes.route(project, run_name)
        if route is None:
            await _respond(send, scope, 404, f"service {run_name!r} not found in {project!r}")
            return
        if route.auth and not await self._authorize(project, _bearer(scope)):
            await _respond(send, scope, 401, "a project member's bearer token is required")
            return
        if not route.upstreams:
            route = await self._wait_ready(project, run_name)
        if route is None or not route.upstreams:
            await _respond(send, scope, 503, f"service {run_name!r} has no ready replica")
            return
        self._stats.record(project, run_name)
        path = "/" + parts[3] if route.strip_prefix else f"{PREFIX}/{project}/{run_name}/{parts[3]}"
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send, route, path)
        else:
            await self._http(scope, receive, send, route, path)

    async def _wait_ready(self, project: str, run_name: str) -> ServiceRoute | None:
        """Hold a request while the service has no ready replica (a replica restarting
        in a stop-first rollout, a cold start) for up to `wait_ready` seconds."""
        deadline = self._clock() + self._wait_ready_for
        route = None
        while self._clock() < deadline:
            await asyncio.sleep(0.1)
            route = await self._routes.route(project, run_name)
            if route is None or route.upstreams:
                return route
        return route

    def _ordered(self, route: ServiceRoute) -> list[Upstream]:
        ups = list(route.upstreams)
        if not ups:
            return []
        start = next(self._turn) % len(ups)
        return ups[start:] + ups[:start]

    async def _http(
        self, scope: Scope, receive: Receive, send: Send, route: ServiceRoute, path: str
    ) -> None:
        body = await _read_body(receive)
        if body is None:
            await _respond(send, scope, 413, "request body too large")
            return
        headers = _forward_headers(scope, strip_auth=route.auth)
        query = scope.get("query_string", b"").decode("latin-1")
        target = path + (f"?{query}" if query else "")
        refused: set[str] = set()
        last_error = "no replica answered"
        deadline = self._clock() + self._wait_ready_for
        current: ServiceRoute | None = route
        while current is not None:
            for upstream in self._ordered(current):
                if upstream.job_id in refused:
                    continue
                client = self._client(upstream.target)
                url = f"http://127.0.0.1:{upstream.port}{target}"
                request = client.build_request(scope["method"], url, headers=headers, content=body)
                try:
                    response = await client.send(request, stream=True)
                except (httpx.ConnectError, httpx.RemoteProtocolError, AgentUnreachable) as exc:
                    # Nothing reached the replica (it is stopping, or gone): try another.
                    refused.add(upstream.job_id)
                    last_error = f"replica {upstream.job_id}: {exc}"
                    continue
                except httpx.TimeoutException:
                    await _respond(send, scope, 504, "the replica did not answer in time")
                    return
                await _stream_response(send, response)
                return
            if self._clock() >= deadline:
                break
            # Every known replica refused: a rollout or restart is under way. Wait for the
            # route to show a replica not yet tried.
            await asyncio.sleep(0.1)
            current = await self._routes.route(current.project, current.run_name)
        await _respond(send, scope, 502, f"bad gateway: {last_error}")

    async def _websocket(
        self, scope: Scope, receive: Receive, send: Send, route: ServiceRoute, path: str
    ) -> None:
        upstream = self._ordered(route)[0]
        try:
            reader, writer = await self._pool.open_stream(
                upstream.target, "127.0.0.1", upstream.port
            )
        except AgentUnreachable:
            await send({"type": "websocket.close", "code": 1011})
            return
        query = scope.get("query_string", b"").decode("latin-1")
        await bridge_websocket(
            scope,
            receive,
            send,
            reader=reader,
            writer=writer,
            path=path + (f"?{query}" if query else ""),
            host=f"127.0.0.1:{upstream.port}",
        )


def _relative_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    if path.startswith(PREFIX):
        path = path[len(PREFIX) :]
    return path


def _bearer(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            text: str = value.decode("latin-1")
            if text.lower().startswith("bearer "):
                return text[7:].strip()
    return None


def _forward_headers(scope: Scope, *, strip_auth: bool) -> list[tuple[bytes, bytes]]:
    headers = []
    for key, value in scope.get("headers", ()):
        name = key.decode("latin-1").lower()
        if name in _HOP_BY_HOP or (strip_auth and name == "authorization"):
            continue
        headers.append((key, value))
    client = scope.get("client")
    if client:
        headers.append((b"x-forwarded-for", str(client[0]).encode()))
    return headers


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _stream_response(send: Send, response: httpx.Response) -> None:
    headers = [
        (k.lower(), v)
        for k, v in response.headers.raw
        if k.decode("latin-1").lower() not in _HOP_BY_HOP
    ]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    try:
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    finally:
        await response.aclose()
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _respond(send: Send, scope: Scope, status: int, message: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008 if status in (401, 403) else 1011})
        return
    body = ('{"detail": ' + _json_str(message) + "}").encode()
    headers: Iterable[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers = [*headers, (b"www-authenticate", b"Bearer")]
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Send, location: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 308,
            "headers": [(b"location", location.encode()), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})


def _json_str(text: str) -> str:
    return json.dumps(text)
