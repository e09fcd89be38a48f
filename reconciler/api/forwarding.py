"""Local port forwarding to a job, through the server (`dockyard attach`, Python API).

`PortForwarder` listens on `127.0.0.1:<local>` for each `(local, remote)` pair; every
accepted connection opens the server's `runs/forward` WebSocket (bearer token, project,
run, job, container port) and copies bytes both ways until either side closes. The server
does the SSH part, so this works from any machine that can reach the server's HTTP port.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from reconciler.errors import UsageError

CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class ForwardTarget:
    url: str  # the server's base URL, http(s)://…
    token: str
    project: str
    run_name: str
    job_num: int = 0
    replica_num: int = 0

    def ws_url(self, port: int) -> str:
        base = "ws" + self.url.removeprefix("http")
        query = urlencode(
            {
                "run_name": self.run_name,
                "port": port,
                "job_num": self.job_num,
                "replica_num": self.replica_num,
            }
        )
        return f"{base}/api/project/{self.project}/runs/forward?{query}"


def parse_port_mapping(value: str) -> tuple[int, int]:
    """`8000` → (8000, 8000); `18000:8000` → (18000, 8000) as (local, remote)."""
    local, _, remote = value.partition(":")
    try:
        pair = (int(local), int(remote or local))
    except ValueError:
        raise UsageError(f"-p {value!r}: use PORT or LOCAL_PORT:PORT") from None
    if not all(0 <= p <= 65535 for p in pair):
        raise UsageError(f"-p {value!r}: ports are 0..65535")
    return pair


async def _copy_out(socket: ClientConnection, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for message in socket:
            writer.write(message if isinstance(message, bytes) else message.encode())
            await writer.drain()


async def _copy_in(socket: ClientConnection, reader: asyncio.StreamReader) -> None:
    while data := await reader.read(CHUNK):
        await socket.send(data)
    await socket.close()


class PortForwarder:
    """Listeners for each (local, remote) port pair; `start`, then `close`."""

    def __init__(
        self, target: ForwardTarget, mappings: list[tuple[int, int]], *, any_port: bool = False
    ) -> None:
        self.target = target
        self.mappings = mappings
        self.any_port = any_port  # a busy local port falls back to a free one
        self.on_error: Callable[[str], None] | None = None  # why a connection was refused
        self.bound: dict[int, int] = {}  # remote port → the local port actually bound
        self._servers: list[asyncio.Server] = []

    async def start(self) -> None:
        for local, remote in self.mappings:
            serve = functools.partial(self._serve, port=remote)
            try:
                server = await asyncio.start_server(serve, "127.0.0.1", local)
            except OSError:
                if not self.any_port:
                    await self.close()
                    raise UsageError(
                        f"local port {local} is in use; pick another with -p"
                    ) from None
                server = await asyncio.start_server(serve, "127.0.0.1", 0)
            self._servers.append(server)
            self.bound[remote] = server.sockets[0].getsockname()[1]

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, port: int
    ) -> None:
        headers = {"Authorization": f"Bearer {self.target.token}"}
        try:
            async with connect(
                self.target.ws_url(port), additional_headers=headers, max_size=None
            ) as socket:
                _, pending = await asyncio.wait(
                    [
                        asyncio.ensure_future(_copy_out(socket, writer)),
                        asyncio.ensure_future(_copy_in(socket, reader)),
                    ],
                    return_when=asyncio.FIRST_COMPLETED,
                )
                for task in pending:
                    task.cancel()
                reason = socket.close_reason
                if socket.close_code not in (None, 1000) and reason and self.on_error:
                    self.on_error(f"port {port}: {reason}")
        except (OSError, InvalidStatus, ConnectionClosed) as exc:
            if self.on_error:
                self.on_error(f"port {port}: cannot open the tunnel ({type(exc).__name__})")
        finally:
            writer.close()

    async def close(self) -> None:
        for server in self._servers:
            server.close()
            await server.wait_closed()
        self._servers.clear()
