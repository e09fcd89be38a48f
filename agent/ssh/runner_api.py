"""dstack-runner's log stream (``/logs_ws`` on port 10999), served inside the agent's SSH server.

dstack 0.22.5's client, once attached (``dstack apply`` without ``-d``, ``dstack attach
--logs``, ``Run.logs()`` after ``Run.attach()``), reads a job's output from the runner's
WebSocket ``ws://localhost:<forwarded 10999>/logs_ws``: binary messages with the bytes the
job wrote, from its start, then a normal close once the job has ended and everything was
sent. The agent has no runner: `agent.ssh.server` answers a forward of port 10999 on a
connection tied to one job (`agent.ssh.jump`) with `serve_logs_ws`, which speaks that
protocol over the SSH channel itself (websockets' sans-I/O protocol, no listening socket).

Differences from dstack-runner: the agent's log has no timestamps, so ``start_time`` can
only drop a whole job: a job that ended before it streams nothing, any other job streams
from its first byte; a log prefix that the agent already
gave back to the disk (`agent.server.logs.release_log`, after the server copied it) reads
as NUL bytes and is skipped. Any other path is answered 404.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import asyncssh
from websockets.exceptions import InvalidState
from websockets.frames import CloseCode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol

RUNNER_HTTP_PORT = 10999  # dstack's DSTACK_RUNNER_HTTP_PORT
LOGS_PATH = "/logs_ws"
CHUNK = 64 * 1024
MAX_REQUEST = 16 * 1024  # an HTTP upgrade request is a few hundred bytes


@dataclass(frozen=True)
class LogPiece:
    """What one read of a job's log gives: bytes, where to read next, and whether the job
    had ended before the read (so nothing can follow what was read)."""

    data: bytes
    next_offset: int
    finished: bool


LogReader = Callable[[int], LogPiece]  # offset -> the next piece of one job's log


class _Channel:
    """A websocket server protocol over one SSH channel's reader and writer."""

    def __init__(
        self, reader: asyncssh.SSHReader[bytes], writer: asyncssh.SSHWriter[bytes]
    ) -> None:
        self.reader, self.writer = reader, writer
        self.protocol = ServerProtocol(max_size=MAX_REQUEST)

    def flush(self) -> None:
        for data in self.protocol.data_to_send():
            if data:
                self.writer.write(data)

    async def request(self) -> Request | None:
        """Read until the HTTP request is complete (None: the client went away)."""
        received = 0
        while True:
            data = await self.reader.read(CHUNK)
            if not data:
                return None
            received += len(data)
            self.protocol.receive_data(data)
            for event in self.protocol.events_received():
                if isinstance(event, Request):
                    return event
            if received > MAX_REQUEST or self.protocol.parser_exc is not None:
                return None

    async def incoming(self) -> None:
        """Read the client's frames (pings are answered) until it closes or goes away."""
        while not self.protocol.close_rcvd:
            data = await self.reader.read(CHUNK)
            if not data:
                self.protocol.receive_eof()
                return
            self.protocol.receive_data(data)
            self.protocol.events_received()
            self.flush()


def logs_path(request_path: str) -> bool:
    """Pure: is this request for the log stream (any query string)?"""
    return urlsplit(request_path).path == LOGS_PATH


def start_time(request_path: str) -> float | None:
    """Pure: dstack's ``start_time`` query parameter in unix seconds (None: absent or not a
    time; a time without an offset is UTC)."""
    values = parse_qs(urlsplit(request_path).query).get("start_time")
    try:
        moment = datetime.fromisoformat(values[0]) if values else None
    except ValueError:
        return None
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _nothing(offset: int) -> LogPiece:
    return LogPiece(b"", offset, True)


def without_released_prefix(data: bytes) -> bytes:
    """Pure: the stream's first bytes without the NULs a given-back log prefix reads as."""
    return data.lstrip(b"\0")


async def serve_logs_ws(
    reader: asyncssh.SSHReader[bytes],
    writer: asyncssh.SSHWriter[bytes],
    read: LogReader,
    *,
    poll_seconds: float = 0.2,
    ended_at: Callable[[], float | None] = lambda: None,
) -> None:
    """Answer one forwarded connection to port 10999 as dstack-runner's ``/logs_ws``
    (`ended_at`: when the job ended, unix seconds, None while it runs or if unknown)."""
    channel = _Channel(reader, writer)
    try:
        request = await channel.request()
        if request is None:
            return
        if not logs_path(request.path):
            channel.protocol.send_response(channel.protocol.reject(404, "Not Found\n"))
            channel.flush()
            return
        response = channel.protocol.accept(request)
        channel.protocol.send_response(response)
        channel.flush()
        if channel.protocol.handshake_exc is not None:
            return
        since, ended = start_time(request.path), ended_at()
        if since is not None and ended is not None and ended < since:
            read = _nothing  # it ended before the time asked for: none of its lines are after
        listener = asyncio.create_task(channel.incoming())
        try:
            await _stream(channel, read, listener, poll_seconds)
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
    except (OSError, asyncssh.Error, InvalidState):
        # the client went away or closed first: nothing to answer (an exception out of this
        # handler would make asyncssh close the whole SSH connection, other forwards too)
        return
    finally:
        writer.close()


async def _stream(
    channel: _Channel, read: LogReader, listener: asyncio.Task[None], poll_seconds: float
) -> None:
    offset, started = 0, False
    while not listener.done():
        piece = await asyncio.to_thread(read, offset)
        if channel.protocol.state is not State.OPEN:  # the client closed meanwhile: the
            channel.flush()  # protocol's answer to its close goes, nothing more
            return
        data = piece.data if started else without_released_prefix(piece.data)
        started = started or bool(data)
        offset = piece.next_offset
        if data:
            channel.protocol.send_binary(data)
            channel.flush()
            await channel.writer.drain()
        elif piece.finished:
            channel.protocol.send_close(CloseCode.NORMAL_CLOSURE, "")
            channel.flush()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(listener), timeout=5)
            return
        else:
            await asyncio.wait({listener}, timeout=poll_seconds)
