"""HTTP/1.1 to a service replica: the small keep-alive client of the service proxy.

`reconciler.web.proxy.ServiceProxy` sends each request to a replica over a byte stream —
an SSH `direct-tcpip` channel to the replica's host, or a loopback TCP connection when the
replica runs on this host — and streams the response back as it arrives (server-sent
events of a model server reach the client token by token). A general client (httpx)
spent about a millisecond per request here; this one writes the request head itself,
parses the response with httptools (llhttp, in C) and keeps idle connections per replica.

Errors: `UpstreamRefusedError` when the request can go to another replica (the connection was
refused, or an idempotent request got no response byte), `UpstreamFailedError` when it cannot
(the replica may have acted on it, or broke the protocol), `UpstreamTimeoutError` when the
replica took the request but did not answer in time. Which exceptions of the byte streams
count as connection errors is passed in (`stream_errors`: asyncssh's, the tunnel's).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httptools


class Reader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class Writer(Protocol):
    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...
    def is_closing(self) -> bool: ...


Opener = Callable[[], Awaitable[tuple[Any, Any]]]
"""Opens one byte stream to the replica's port: `(reader, writer)`."""

READ_SIZE = 256 * 1024


_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})


class UpstreamRefusedError(Exception):
    """Nothing reached the replica: it is stopping, gone, or its host is unreachable."""


class UpstreamFailedError(Exception):
    """The replica broke off after it may have acted on the request: not retried."""


class UpstreamTimeoutError(Exception):
    """The replica took the request but sent no (further) response in time."""


@dataclass(slots=True)
class _Parse:
    """httptools callbacks: the response head and the body pieces not yet passed on."""

    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    head_done: bool = False
    complete: bool = False
    keep_alive: bool = False
    parser: httptools.HttpResponseParser = field(init=False)

    def __post_init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        # llhttp resets its flags once the message is done: ask while it still knows.
        self.keep_alive = self.parser.should_keep_alive()


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: Reader, writer: Writer) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        at_eof = getattr(self.reader, "at_eof", None)
        return not self.writer.is_closing() and not (at_eof is not None and at_eof())

    def close(self) -> None:
        # Closing a stream that already died is fine.
        with contextlib.suppress(Exception):
            self.writer.close()


class UpstreamResponse:
    """A response whose head has arrived; iterate `body()` once to stream the rest.

    `first` holds the body bytes that came with the head; when `complete` the whole body
    is in `first` and the connection is already back in the pool.
    """

    def __init__(
        self,
        pool: UpstreamPool,
        key: Hashable,
        conn: _Connection,
        state: _Parse,
        bodyless: bool,
    ) -> None:
        self.status = state.parser.get_status_code()
        self.headers: Sequence[tuple[bytes, bytes]] = state.headers
        self._pool, self._key, self._conn = pool, key, conn
        self._state = state
        self.first = b"".join(state.chunks)
        state.chunks.clear()
        self.complete = bodyless or state.complete
        if self.complete:
            self._finish(reusable=not bodyless)

    def _finish(self, *, reusable: bool) -> None:
        if reusable and self._state.keep_alive:
            self._pool.release(self._key, self._conn)
        else:
            self._conn.close()

    async def body(self) -> AsyncIterator[bytes]:
        """The body after `first`, piece by piece as the replica sends it."""
        state = self._state
        try:
            while not self.complete:
                data = await self._pool.read(self._conn)
                if not data:
                    # The end of a body framed by the connection's close (no length).
                    if not _framed(self.headers):
                        self.complete = True
                        self._conn.close()
                        return
                    raise UpstreamFailedError("the replica closed the connection mid-response")
                state.parser.feed_data(data)
                if state.chunks:
                    piece = b"".join(state.chunks)
                    state.chunks.clear()
                    yield piece
                if state.complete:
                    self.complete = True
                    self._finish(reusable=True)
        except BaseException:
            if not self.complete:
                self._conn.close()
            raise

    def aclose(self) -> None:
        """Drop an unfinished response (the client went away): its connection is closed."""
        if not self.complete:
            self.complete = True
            self._conn.close()


def _framed(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"content-length" or (
            lowered == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            return True
    return False


class UpstreamPool:
    """Keep-alive connections per replica key; see the module docstring."""

    def __init__(
        self,
        *,
        timeout: float = 300.0,
        max_idle: int = 256,
        stream_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._timeout = timeout
        self._max_idle = max_idle
        self._errors: tuple[type[BaseException], ...] = (OSError, EOFError, *stream_errors)
        self._idle: dict[Hashable, list[_Connection]] = {}

    def release(self, key: Hashable, conn: _Connection) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) < self._max_idle and conn.usable():
            idle.append(conn)
        else:
            conn.close()

    async def read(self, conn: _Connection) -> bytes:
        """The next bytes from the replica; b"" at its end, however the stream ended."""
        try:
            async with asyncio.timeout(self._timeout):
                return await conn.reader.read(READ_SIZE)
        except TimeoutError as exc:
            conn.close()
            raise UpstreamTimeoutError("the replica did not answer in time") from exc
        except self._errors:
            conn.close()
            return b""

    async def request(
        self, key: Hashable, opener: Opener, head: bytes, body: bytes, *, method: str
    ) -> UpstreamResponse:
        """Send `head` (request line and headers, ending in a blank line) and `body`;
        return once the response head has arrived.

        A reused connection that the replica closed while idle is retried on a new one
        (the usual keep-alive race: the request never reached the application)."""
        while True:
            conn, reused = await self._connection(key, opener)
            try:
                return await self._exchange(key, conn, head, body, method)
            except _UnansweredError as exc:
                if not reused:
                    if method in _IDEMPOTENT:
                        raise UpstreamRefusedError(str(exc)) from exc
                    raise UpstreamFailedError(str(exc)) from exc

    async def _connection(self, key: Hashable, opener: Opener) -> tuple[_Connection, bool]:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn, True
            conn.close()
        try:
            reader, writer = await opener()
        except self._errors as exc:
            raise UpstreamRefusedError(str(exc) or type(exc).__name__) from exc
        return _Connection(reader, writer), False

    async def _exchange(
        self, key: Hashable, conn: _Connection, head: bytes, body: bytes, method: str
    ) -> UpstreamResponse:
        try:
            if len(body) < 65536:
                conn.writer.write(head + body)
            else:
                conn.writer.write(head)
                conn.writer.write(body)
            await conn.writer.drain()
        except self._errors as exc:
            conn.close()
            raise _UnansweredError(str(exc) or type(exc).__name__) from exc
        state = _Parse()
        parser = state.parser
        while not state.head_done:
            data = await self.read(conn)
            if not data:
                conn.close()
                if state.headers or parser.get_status_code():
                    raise UpstreamFailedError("the replica closed the connection mid-response")
                raise _UnansweredError("the replica closed the connection without answering")
            try:
                parser.feed_data(data)
            except httptools.HttpParserError as exc:
                conn.close()
                message = f"the replica sent no valid HTTP response: {exc}"
                raise UpstreamFailedError(message) from exc
        status = parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            conn.close()
            raise UpstreamFailedError(f"the replica sent an interim response ({status})")
        return UpstreamResponse(self, key, conn, state, bodyless=method == "HEAD")

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


class _UnansweredError(Exception):
    """No response byte came back: whether to retry depends on the connection and method."""
