"""One SSH `direct-tcpip` channel as a plain byte stream, without asyncssh's stream layer.

`TunnelPool.open_stream` gives asyncssh's `SSHReader`/`SSHWriter`, general but with
locks and bookkeeping on every read. The service proxy's hot path
(`reconciler.web.upstream`) only needs `read`, `write`, `drain`, `close`: `ChannelStream`
is an `SSHTCPSession` that keeps received chunks in a deque and wakes one waiting reader,
which carries about a third more requests/s through a channel. It is both the reader and
the writer of the pair `TunnelPool.open_channel` returns.

Flow control: writes pause when the channel's send window is full (`drain` waits for
asyncssh's `resume_writing`); reads are unbounded as the peer is an HTTP server answering
one request at a time on the connection.
"""

from __future__ import annotations

import asyncio
from collections import deque

import asyncssh


class ChannelStream(asyncssh.SSHTCPSession[bytes]):
    """See the module docstring."""

    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._channel: asyncssh.SSHTCPChannel[bytes] | None = None
        self._eof = False
        self._closed = False

    # -- asyncssh callbacks -----------------------------------------------------------------

    def connection_made(self, chan: asyncssh.SSHTCPChannel[bytes]) -> None:
        self._channel = chan

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._chunks.append(data)
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # close our side too: an HTTP peer that sent EOF is done

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = self._closed = True
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- the stream -------------------------------------------------------------------------

    async def read(self, n: int = -1) -> bytes:
        """The next chunk received (b"" at the end); `n` is not a limit here."""
        while not self._chunks:
            if self._eof:
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._chunks.popleft()

    def at_eof(self) -> bool:
        return self._eof and not self._chunks

    def write(self, data: bytes) -> None:
        if self._channel is None or self._closed:
            raise ConnectionResetError("the channel is closed")
        self._channel.write(data)

    async def drain(self) -> None:
        if self._closed:
            raise ConnectionResetError("the channel is closed")
        if self._writable is not None:
            await self._writable

    def close(self) -> None:
        self._closed = True
        if self._channel is not None:
            self._channel.close()

    def is_closing(self) -> bool:
        return self._closed
