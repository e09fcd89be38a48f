"""Port forwarding to a job through the server: `WS /api/project/{p}/runs/forward`.

`dockyard attach` listens on local ports and, per connection, opens this WebSocket with the
run, the job and the container port; the server checks the token and the project role,
finds the job's instance and the host port its container port is published on, opens a
`direct-tcpip` channel over the engine's SSH tunnel to `127.0.0.1:<host port>` on that host
(the same path the service proxy uses) and pumps bytes both ways as binary frames. Only the
ports the run declares can be reached, so a token gives no way to the agent's own port.
The tunnel opener is given by the composition root; without one the route answers 1011.
A port that another process than the job holds is refused by the agent
(`agent.server.portholders`): the socket is closed with `1014` (bad gateway) and the
reason, and the job gets an event (`reconciler.web.jobnotes`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from fastapi import APIRouter, HTTPException, WebSocket, WebSocketDisconnect

from agent.tunnel import AgentUnreachable
from reconciler.adapters.db.readmodels.runs import find_endpoint as find_endpoint
from reconciler.domain.inventory import InstanceRecord
from reconciler.errors import DockyardError
from reconciler.web.auth import authenticate, find_membership
from reconciler.web.context import WebContext
from reconciler.web.jobnotes import JobNotes, is_port_refusal

CHUNK = 64 * 1024
BAD_GATEWAY = 1014  # the WebSocket close code (RFC 6455 registry): the upstream refused


class StreamReader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class StreamWriter(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...


OpenTunnel = Callable[[InstanceRecord, int], Awaitable[tuple[Any, Any]]]
"""`open(instance, host_port)` → (reader, writer) of a channel to 127.0.0.1:port there."""


async def _pump_in(websocket: WebSocket, writer: StreamWriter) -> None:
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            data = await websocket.receive_bytes()
            writer.write(data)
            await writer.drain()


async def _pump_out(websocket: WebSocket, reader: StreamReader) -> None:
    while True:
        data = await reader.read(CHUNK)
        if not data:
            return
        await websocket.send_bytes(data)


async def bridge(websocket: WebSocket, reader: StreamReader, writer: StreamWriter) -> None:
    """Copy both ways until either side closes; then close the other."""
    async with anyio.create_task_group() as group:

        async def inbound() -> None:
            await _pump_in(websocket, writer)
            group.cancel_scope.cancel()

        async def outbound() -> None:
            with contextlib.suppress(OSError):
                await _pump_out(websocket, reader)
            group.cancel_scope.cancel()

        group.start_soon(inbound)
        group.start_soon(outbound)
    writer.close()
    with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):  # the client left first
        await websocket.close()


async def _authorize(websocket: WebSocket, context: WebContext, project: str) -> str | None:
    """The project id if the caller may use it; None after closing the socket (policy)."""
    try:
        principal = await authenticate(context, websocket.headers.get("authorization", ""))
    except HTTPException:
        await websocket.close(code=1008, reason="missing or invalid token")
        return None
    project_id, role = await context.db.read(find_membership, project, principal.user_id)
    if not project_id or (role is None and not principal.is_admin):
        await websocket.close(code=1008, reason=f"no access to project {project}")
        return None
    return project_id


def build_forward_router(open_tunnel: OpenTunnel | None) -> APIRouter:
    router = APIRouter()
    notes: dict[int, JobNotes] = {}  # one per database (one app): throttles its events

    @router.websocket("/api/project/{project_name}/runs/forward")
    async def forward(
        websocket: WebSocket,
        project_name: str,
        run_name: str,
        port: int,
        job_num: int = 0,
        replica_num: int = 0,
    ) -> None:
        context: WebContext = websocket.app.state.context
        project_id = await _authorize(websocket, context, project_name)
        if project_id is None:
            return
        await websocket.accept()  # authorized: from here on, refusals carry a reason
        if open_tunnel is None:
            await websocket.close(code=1011, reason="port forwarding is not available here")
            return
        try:
            instance, host_port = await context.db.read(
                find_endpoint, project_id, run_name, replica_num, job_num, port
            )
            reader, writer = await open_tunnel(instance, host_port)
        except DockyardError as exc:
            await websocket.close(code=4400, reason=str(exc)[:120])
            return
        except AgentUnreachable as exc:
            if not is_port_refusal(exc.detail):
                await websocket.close(code=1011, reason="cannot reach the job's host")
                return
            note = notes.setdefault(id(context.db), JobNotes(context.db))
            message = f"a forward to port {port} was refused: {exc.detail}"
            await note.forwarded(project_id, run_name, replica_num, job_num, message)
            reason = exc.detail.partition(": ")[2] or exc.detail  # without 127.0.0.1:port
            await websocket.close(code=BAD_GATEWAY, reason=reason[:120])
            return
        except OSError:
            await websocket.close(code=1011, reason="cannot reach the job's host")
            return
        await bridge(websocket, reader, writer)

    return router
