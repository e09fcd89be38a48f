"""The built-in service proxy: `/proxy/services/<project>/<run>/…` to a ready replica.

A raw ASGI app that the server mounts at `/proxy/services`. For each request it asks a
`RouteSource` (backed by the store) for the service's ready replicas, checks the bearer
token unless the service has `auth: false`, and forwards over the SSH tunnel of the
replica's instance to the job's port on that host — or straight to the loopback port when
the replica runs on this host's local fleet, where a tunnel would only cost CPU — with
the keep-alive client of `reconciler.web.upstream`. WebSocket upgrades are bridged frame
by frame. A replica that refuses the connection is
skipped and the next one tried, and while a service has no ready replica requests wait
(up to `wait_ready`), so a rolling update delays requests but does not fail them.

A connection reaches a replica's port only while the job itself holds it
(`reconciler.web.portguard`, `agent.server.portholders`): a refusal counts as the replica
refusing (the answer is `502` with the reason once no replica answered) and the job gets
an event (`notes`, `reconciler.web.jobnotes`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from functools import partial
from typing import Any
from urllib.parse import quote

import asyncssh

from agent.tunnel import AgentUnreachable, TunnelPool
from reconciler.engine.service_routes import RouteSource, ServiceRoute, Upstream
from reconciler.engine.service_stats import RequestStats
from reconciler.web.jobnotes import JobNotes
from reconciler.web.portguard import PortCheck, PortGuard
from reconciler.web.proxy_bridge import bridge_websocket
from reconciler.web.upstream import (
    UpstreamFailedError,
    UpstreamPool,
    UpstreamRefusedError,
    UpstreamResponse,
    UpstreamTimeoutError,
)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

PREFIX = "/proxy/services"
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Request headers the proxy writes itself (or must not pass: the body is already read).
_REQUEST_OWN = _HOP_BY_HOP | {b"host", b"content-length", b"expect", b"x-forwarded-for"}
MAX_BODY = 64 * 1024 * 1024


Authorizer = Callable[[str, str | None], Awaitable[bool]]
"""`authorize(project, bearer_token)`: whether the token belongs to a project member."""
TokenCheck = Callable[[str], Awaitable[bool]]
"""`is_dockyard_token(bearer_token)`: whether it is any user's Dockyard token."""


async def _every_bearer(token: str) -> bool:
    return True  # without a way to tell, no bearer token reaches a service


class ServiceProxy:
    """ASGI app; see the module docstring."""

    def __init__(
        self,
        *,
        routes: RouteSource,
        pool: TunnelPool,
        authorize: Authorizer,
        stats: RequestStats,
        is_dockyard_token: TokenCheck = _every_bearer,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 300.0,
        wait_ready: float = 30.0,
        port_check: PortCheck | None = None,
        notes: JobNotes | None = None,
    ) -> None:
        self._routes = routes
        self._guard = PortGuard(pool, port_check, notes)  # only the job's own port
        self._pool = pool
        self._authorize = authorize
        self._is_dockyard_token = is_dockyard_token
        self._stats = stats
        self._clock = clock
        self._timeout = timeout
        self._wait_ready_for = wait_ready
        self._upstreams = UpstreamPool(
            timeout=timeout, stream_errors=(asyncssh.Error, AgentUnreachable)
        )
        self._turn = itertools.count()

    async def aclose(self) -> None:
        self._upstreams.close()
        await self._guard.aclose()

    async def _open(self, upstream: Upstream) -> tuple[Any, Any]:
        """A byte stream to the replica's port: loopback TCP or an SSH channel; refused
        (and the job told) when the port is not the job's (`PortGuard`)."""
        await self._guard.before_open(upstream)
        if upstream.direct:
            return await asyncio.open_connection("127.0.0.1", upstream.port)
        try:
            stream = await self._pool.open_channel(upstream.target, "127.0.0.1", upstream.port)
        except AgentUnreachable as exc:
            await self._guard.refused(upstream, exc)
            raise
        return stream, stream

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
        started = self._clock()
        status = 0  # the client went away before an answer
        try:
            status = await self._serve(scope, receive, send, route)
        finally:
            if scope["type"] == "http":
                self._stats.observe(project, run_name, status, self._clock() - started)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, route: ServiceRoute) -> int:
        """Answer a request for a known service; the HTTP status sent."""
        project, run_name = route.project, route.run_name
        bearer = _bearer(scope)
        if route.auth and not await self._authorize(project, bearer):
            return await _respond(send, scope, 401, "a project member's bearer token is required")
        # the caller's Dockyard token never reaches a service, `auth: false` or not
        strip_auth = route.auth or (bearer is not None and await self._is_dockyard_token(bearer))
        if not route.upstreams:
            route = await self._wait_ready(project, run_name) or route
        if not route.upstreams:
            return await _respond(send, scope, 503, f"service {run_name!r} has no ready replica")
        self._stats.record(project, run_name)
        path = _upstream_path(scope, project, run_name, strip_prefix=route.strip_prefix)
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send, route, path)
            return 101
        return await self._http(scope, receive, send, route, path, strip_auth=strip_auth)

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
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        route: ServiceRoute,
        path: str,
        *,
        strip_auth: bool,
    ) -> int:
        body = await _read_body(receive)
        if body is None:
            return await _respond(send, scope, 413, "request body too large")
        method: str = scope["method"]
        query: bytes = scope.get("query_string", b"")
        target = path.encode("latin-1") + (b"?" + query if query else b"")
        headers = _request_headers(scope, strip_auth=strip_auth, body=body)
        refused: set[str] = set()
        last_error = "no replica answered"
        deadline = self._clock() + self._wait_ready_for
        current: ServiceRoute | None = route
        while current is not None:
            for upstream in self._ordered(current):
                if upstream.job_id in refused:
                    continue
                head = b"%s %s HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n%s\r\n" % (
                    method.encode("latin-1"),
                    target,
                    upstream.port,
                    headers,
                )
                try:
                    response = await self._upstreams.request(
                        upstream, partial(self._open, upstream), head, body, method=method
                    )
                except UpstreamRefusedError as exc:
                    # Nothing reached the replica (it is stopping, or gone): try another.
                    refused.add(upstream.job_id)
                    last_error = f"replica {upstream.job_id}: {exc}"
                    continue
                except UpstreamTimeoutError:
                    return await _respond(send, scope, 504, "the replica did not answer in time")
                except UpstreamFailedError as exc:
                    return await _respond(send, scope, 502, f"bad gateway: {exc}")
                await _stream_response(send, response)
                return response.status
            if self._clock() >= deadline:
                break
            # Every known replica refused: a rollout or restart is under way. Wait for the
            # route to show a replica not yet tried.
            await asyncio.sleep(0.1)
            current = await self._routes.route(current.project, current.run_name)
        return await _respond(send, scope, 502, f"bad gateway: {last_error}")

    async def _websocket(
        self, scope: Scope, receive: Receive, send: Send, route: ServiceRoute, path: str
    ) -> None:
        upstream = self._ordered(route)[0]
        try:
            reader, writer = await self._open(upstream)
        except (AgentUnreachable, OSError):
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


def _request_headers(scope: Scope, *, strip_auth: bool, body: bytes) -> bytes:
    """The client's end-to-end headers as a block of lines, plus the proxy's own."""
    lines = []
    for key, value in scope.get("headers", ()):
        if key in _REQUEST_OWN or (strip_auth and key == b"authorization"):
            continue
        if key == b"cookie" and _DOCKYARD_COOKIE.search(value):
            value = _without_dockyard_cookies(value)
            if not value:
                continue
        lines.append(b"%s: %s\r\n" % (key, value))
    client = scope.get("client")
    if client:
        lines.append(b"x-forwarded-for: %s\r\n" % str(client[0]).encode("latin-1"))
    if body or scope["method"] not in ("GET", "HEAD", "OPTIONS", "DELETE"):
        lines.append(b"content-length: %d\r\n" % len(body))
    return b"".join(lines)


_DOCKYARD_COOKIE = re.compile(rb"(?:^|;)\s*dockyard", re.IGNORECASE)


def _without_dockyard_cookies(header: bytes) -> bytes:
    """A Cookie header without the cookies named `dockyard*` (Dockyard's own)."""
    kept = [c for c in header.split(b";") if not c.strip().lower().startswith(b"dockyard")]
    return b";".join(kept).strip()


def _upstream_path(scope: Scope, project: str, run_name: str, *, strip_prefix: bool) -> str:
    """The path to ask the replica for, as the client encoded it (`raw_path`)."""
    mount = f"{PREFIX}/{project}/{run_name}/"
    raw: bytes = scope.get("raw_path") or b""
    at = raw.find(mount.encode("latin-1"))
    if at >= 0:
        tail = raw[at + len(mount) :].decode("latin-1")
    else:  # a client that percent-encoded the project or run name
        tail = quote(_relative_path(scope).split("/", 3)[3], safe="/:@!$&'()*+,;=-._~%")
    return "/" + tail if strip_prefix else mount + tail


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


async def _stream_response(send: Send, response: UpstreamResponse) -> None:
    headers = [(k.lower(), v) for k, v in response.headers if k.lower() not in _HOP_BY_HOP]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    if response.complete:
        await send({"type": "http.response.body", "body": response.first})
        return
    try:
        if response.first:
            await send({"type": "http.response.body", "body": response.first, "more_body": True})
        async for chunk in response.body():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    finally:
        response.aclose()
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _respond(send: Send, scope: Scope, status: int, message: str) -> int:
    """Answer with `status` and a JSON `detail` (close a WebSocket); returns `status`."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008 if status in (401, 403) else 1011})
        return status
    body = ('{"detail": ' + _json_str(message) + "}").encode()
    headers: Iterable[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers = [*headers, (b"www-authenticate", b"Bearer")]
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body})
    return status


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
