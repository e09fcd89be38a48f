"""An httpx transport whose connections are SSH ``direct-tcpip`` channels.

`AgentClient` speaks HTTP to the agent's 127.0.0.1 port *as seen from the remote host*. Each
HTTP connection of httpcore's pool is one channel on the host's pooled SSH connection
(`agent.tunnel.TunnelPool.open_stream`), so there is no local listening port, nothing to
re-bind after a reconnect, and keep-alive HTTP connections reuse their channel. A channel
that died with its SSH connection reports itself readable while idle, which makes httpcore
discard it instead of sending the next request into the void.

httpcore errors are mapped to httpx's tree (as httpx's own transport does); errors of the
tunnel itself (`AgentUnreachable`) pass through untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any

import asyncssh
import httpcore
import httpx

OpenStream = Callable[
    [str, int], Awaitable[tuple[asyncssh.SSHReader[bytes], asyncssh.SSHWriter[bytes]]]
]

# Most specific first: the first match wins.
_ERROR_MAP: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


@contextlib.contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except httpcore.ProtocolError as exc:
        raise _to_httpx(exc) from exc
    except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.UnsupportedProtocol) as exc:
        raise _to_httpx(exc) from exc


def _to_httpx(exc: Exception) -> httpx.HTTPError:
    for source, target in _ERROR_MAP:
        if isinstance(exc, source):
            return target(str(exc) or type(exc).__name__)
    return httpx.TransportError(str(exc))  # pragma: no cover - the map covers httpcore's tree


class ChannelStream(httpcore.AsyncNetworkStream):
    """One SSH channel seen as a byte stream by httpcore."""

    def __init__(self, reader: asyncssh.SSHReader[bytes], writer: asyncssh.SSHWriter[bytes]):
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout("read timed out") from exc
        except (OSError, asyncssh.Error) as exc:
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        try:
            async with asyncio.timeout(timeout):
                self._writer.write(buffer)
                await self._writer.drain()
        except TimeoutError as exc:
            raise httpcore.WriteTimeout("write timed out") from exc
        except (OSError, asyncssh.Error) as exc:
            raise httpcore.WriteError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        self._writer.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("TLS is not used inside SSH tunnels")

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return self.is_dead()
        return self._writer.get_extra_info(info)

    def is_dead(self) -> bool:
        conn = self._writer.get_extra_info("connection")
        closed = conn is not None and conn.is_closed()
        return bool(closed or self._reader.at_eof() or self._writer.is_closing())


class SSHNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend that opens SSH channels instead of sockets."""

    def __init__(self, open_stream: OpenStream) -> None:
        self._open_stream = open_stream

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await self._open_stream(host, port)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"opening a channel to {host}:{port} timed out") from exc
        return ChannelStream(reader, writer)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable through SSH channels")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            with _mapped_errors():
                await self._stream.aclose()


class SSHTransport(httpx.AsyncBaseTransport):
    """httpx transport: HTTP/1.1 keep-alive connections over SSH channels."""

    def __init__(
        self,
        open_stream: OpenStream,
        *,
        max_connections: int | None = 20,
        keepalive_expiry: float = 30.0,
    ) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=max_connections,
            keepalive_expiry=keepalive_expiry,
            network_backend=SSHNetworkBackend(open_stream),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _mapped_errors():
            response = await self._pool.handle_async_request(core_request)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
