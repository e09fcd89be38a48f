"""The proxy's HTTP/1.1 client against scripted loopback servers: framing, reuse, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from reconciler.web.upstream import (
    UpstreamFailedError,
    UpstreamPool,
    UpstreamRefusedError,
    UpstreamTimeoutError,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Script"], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@dataclass
class Script:
    """A loopback server running `handler` per connection; counts connections."""

    handler: Handler
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def opener(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[Script]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> Script:
        script = Script(handler)
        server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
        script.port = server.sockets[0].getsockname()[1]
        servers.append(server)
        return script

    yield start
    for server in servers:
        server.close()


async def _read_request(reader: asyncio.StreamReader, script: Script) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    script.requests.append(head)
    return head


def _head(method: str = "GET", path: str = "/") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode()


async def _body(pool: UpstreamPool, script: Script, method: str = "GET") -> bytes:
    response = await pool.request("k", script.opener, _head(method), b"", method=method)
    parts = [response.first]
    async for piece in response.body():
        parts.append(piece)
    return b"".join(parts)


async def test_keep_alive_connections_are_reused(serve: Callable[..., Awaitable[Script]]) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Script) -> None:
        while True:
            await _read_request(r, s)
            w.write(OK)

    script = await serve(handler)
    pool = UpstreamPool()
    bodies = [await _body(pool, script) for _ in range(3)]
    assert bodies == [b"ok"] * 3
    assert script.connections == 1, "one keep-alive connection carries all three requests"
    pool.close()


async def test_chunked_body_streams_before_the_replica_finishes(
    serve: Callable[..., Awaitable[Script]],
) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Script) -> None:
        await _read_request(r, s)
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await w.drain()
        await s.release.wait()  # the rest only once the client has seen the first chunk
        w.write(b"6\r\n world\r\n0\r\n\r\n")
        await w.drain()
        await r.read()

    script = await serve(handler)
    pool = UpstreamPool()
    response = await pool.request("k", script.opener, _head(), b"", method="GET")
    assert response.status == 200 and not response.complete
    body = response.body()
    first = response.first or await anext(body)
    assert first == b"hello", "the first chunk is passed on before the replica sends more"
    script.release.set()
    rest = [piece async for piece in body]
    assert b"".join([first, *rest]) == b"hello world"
    pool.close()


async def test_body_framed_by_close_ends_at_eof(serve: Callable[..., Awaitable[Script]]) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Script) -> None:
        await _read_request(r, s)
        w.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
        await w.drain()

    script = await serve(handler)
    pool = UpstreamPool()
    assert await _body(pool, script) == b"until the end"
    assert await _body(pool, script) == b"until the end"
    assert script.connections == 2, "a close-framed connection is never reused"
    pool.close()


async def test_head_response_completes_without_a_body(
    serve: Callable[..., Awaitable[Script]],
) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Script) -> None:
        while True:
            await _read_request(r, s)
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")

    script = await serve(handler)
    pool = UpstreamPool(timeout=5.0)
    response = await pool.request("k", script.opener, _head("HEAD"), b"", method="HEAD")
    assert response.complete and response.first == b""
    assert dict(response.headers)[b"Content-Length"] == b"100"
    pool.close()


async def test_stale_keep_alive_connection_is_retried_for_any_method(
    serve: Callable[..., Awaitable[Script]],
) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Script) -> None:
        await _read_request(r, s)
        w.write(OK)  # keep-alive by HTTP/1.1's default, then closed while idle
        await w.drain()

    script = await serve(handler)
    pool = UpstreamPool()
    assert await _body(pool, script) == b"ok"
    assert await _body(pool, script, method="POST") == b"ok"
    assert script.connections == 2 and len(script.requests) == 2
    pool.close()


async def test_unanswered_request_on_a_new_connection(
    serve: Callable[..., Awaitable[Script]],
) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Script) -> None:
        await _read_request(r, s)  # then close without a byte of response

    script = await serve(handler)
    pool = UpstreamPool()
    with pytest.raises(UpstreamRefusedError):  # GET: safe to send to another replica
        await _body(pool, script)
    with pytest.raises(UpstreamFailedError):  # POST: the replica may have acted on it
        await _body(pool, script, method="POST")
    pool.close()


async def test_refused_port_and_garbage_and_timeout(
    serve: Callable[..., Awaitable[Script]],
) -> None:
    async def garbage(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Script) -> None:
        await _read_request(r, s)
        w.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await w.drain()
        await r.read()

    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Script) -> None:
        await _read_request(r, s)
        await s.release.wait()

    closed = await serve(garbage)
    pool = UpstreamPool(timeout=0.2)
    with pytest.raises(UpstreamFailedError, match="no valid HTTP response"):
        await _body(pool, closed)

    async def refused() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", 1)

    with pytest.raises(UpstreamRefusedError):
        await pool.request("r", refused, _head(), b"", method="GET")
    quiet = await serve(silent)
    with pytest.raises(UpstreamTimeoutError):
        await _body(pool, quiet)
    quiet.release.set()
    pool.close()


async def test_request_body_and_head_reach_the_replica(
    serve: Callable[..., Awaitable[Script]],
) -> None:
    received: list[bytes] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Script) -> None:
        head = await _read_request(r, s)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        received.append(await r.readexactly(length))
        w.write(OK)
        await w.drain()

    script = await serve(handler)
    pool = UpstreamPool()
    big = b"x" * 200_000  # above the size written together with the head
    head = b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n" % len(big)
    response = await pool.request("k", script.opener, head, big, method="POST")
    assert response.status == 200 and received == [big]
    pool.close()
