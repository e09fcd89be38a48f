"""The server's listeners that reach agents' SSH servers for users (dstack's `attach`).

An agent deployed to an SSH host runs its SSH server for users on 127.0.0.1 of that host
(`agent.deploy`, the session port); users' keys are authorized there, never on the host's
sshd. dstack's client attaches to a job with plain OpenSSH, so the server gives it a TCP
endpoint instead: one listener per (host, port) on the server's listen address, on a free
port, each of whose connections is a ``direct-tcpip`` channel through the server's pooled
SSH connection to the host (the same pool the agent tunnels and the service proxy use) to
127.0.0.1:<session port> there. The bytes are the user's own SSH session, end to end with
the agent's SSH server: the server neither sees nor holds the user's key.

The listen address is 127.0.0.1, or the server's `attach_host` (`--attach-host`) so that
dstack clients on other machines can attach; then the local agent's SSH server, which
listens on 127.0.0.1 only, gets a listener too (`local`: each connection is a plain TCP
connection to it on this machine, made from `LOCAL_SOURCE`, 127.0.0.2: the local agent
accepts the server's own key from 127.0.0.1 only, `agent.local.CONTROL_FROM`, so that key
opens nothing through the listener; users' keys are accepted from anywhere).

Each listener takes a free port, or with `ports` (`--attach-ports START-END`, so a firewall
can open them) the first free port of that range; a full range is an `OSError`.

`SessionForwards.port`/`local` start a listener on first need; `close` stops them all (the
controller's `stop`). Called by `reconciler.engine.controller.EngineController`
(`session_forward`, `local_session_forward`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import asyncssh

from agent.tunnel import AgentUnreachable, SSHTarget, TunnelPool

log = logging.getLogger(__name__)

LISTEN_HOST = "127.0.0.1"
LOCAL_SOURCE = "127.0.0.2"  # where `local` listeners' connections to the local agent come from
CHUNK = 65536
CLOSE_WAIT = 5.0  # seconds `close` waits for each listener (never holds up a shutdown)


class _Reader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    def write_eof(self) -> None: ...

    def close(self) -> None: ...


Opener = Callable[[], Awaitable[tuple["_Reader", "_Writer"]]]


class SessionForwards:
    """The server's listeners to agents' SSH servers, by (target, remote port); target
    None: the local agent's, on this machine."""

    def __init__(
        self, pool: TunnelPool, host: str = LISTEN_HOST, ports: range | None = None
    ) -> None:
        self._pool = pool
        self.host = host
        self.ports = ports
        self._servers: dict[tuple[SSHTarget | None, int], asyncio.Server] = {}
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def port(self, target: SSHTarget, remote_port: int) -> int:
        """The local port whose connections reach 127.0.0.1:remote_port on `target`."""

        async def through_host() -> tuple[_Reader, _Writer]:
            return await self._pool.open_stream(target, "127.0.0.1", remote_port)

        return await self._listen((target, remote_port), through_host)

    async def local(self, local_port: int) -> int:
        """The port on `host` whose connections reach 127.0.0.1:local_port of this machine."""

        async def direct() -> tuple[_Reader, _Writer]:
            return await asyncio.open_connection(
                "127.0.0.1", local_port, local_addr=(LOCAL_SOURCE, 0)
            )

        return await self._listen((None, local_port), direct)

    async def _listen(self, key: tuple[SSHTarget | None, int], opener: Opener) -> int:
        async with self._lock:
            server = self._servers.get(key)
            if server is None:
                server = await self._start(lambda r, w: self._serve(r, w, opener, key))
                self._servers[key] = server
        return int(server.sockets[0].getsockname()[1])

    async def _start(self, serve: Callable[..., Awaitable[None]]) -> asyncio.Server:
        """A server on `host`: any free port, or the first free one of `ports`."""
        if self.ports is None:
            return await asyncio.start_server(serve, self.host, 0)
        for port in self.ports:
            try:
                return await asyncio.start_server(serve, self.host, port)
            except OSError:  # taken (by us or anyone): the next one
                continue
        first, last = self.ports.start, self.ports.stop - 1
        raise OSError(f"no free port in the attach ports {first}-{last} on {self.host}")

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        opener: Opener,
        key: tuple[SSHTarget | None, int],
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            try:
                remote_reader, remote_writer = await opener()
            except (AgentUnreachable, OSError) as exc:
                log.warning("session forward to %s:%d: %s", key[0] or "this host", key[1], exc)
                return
            try:
                await asyncio.gather(_copy(reader, remote_writer), _copy(remote_reader, writer))
            finally:
                remote_writer.close()
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def close(self) -> None:
        """Stop every listener and the connections they carry."""
        servers = list(self._servers.values())
        self._servers.clear()
        for server in servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), CLOSE_WAIT)


async def _copy(reader: _Reader, writer: _Writer) -> None:
    """Bytes from `reader` to `writer` until end of file, then half-close `writer`."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            drain = getattr(writer, "drain", None)
            if drain is not None:
                await drain()
        with contextlib.suppress(OSError, AttributeError):
            writer.write_eof()
    except (OSError, asyncssh.Error) as exc:  # a side went away: the other one ends too
        log.debug("session forward ended: %s", exc)
        writer.close()
