"""WebSocket bridging for the service proxy: ASGI messages <-> an upstream byte stream.

The upstream is an SSH channel to the replica's port; `websockets`' sans-I/O client
protocol does the handshake and framing on it, so the proxy needs no local port. Called
by `reconciler.web.proxy.ServiceProxy` for `websocket` scopes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import asyncssh
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def _flush(protocol: ClientProtocol, writer: asyncssh.SSHWriter[bytes]) -> None:
    for data in protocol.data_to_send():
        if data:
            writer.write(data)
        else:
            writer.write_eof()
    await writer.drain()


async def bridge_websocket(
    scope: MutableMapping[str, Any],
    receive: Receive,
    send: Send,
    *,
    reader: asyncssh.SSHReader[bytes],
    writer: asyncssh.SSHWriter[bytes],
    path: str,
    host: str,
) -> None:
    """Handshake with the upstream, accept the client, then pump frames both ways."""
    connect = await receive()
    if connect.get("type") != "websocket.connect":
        writer.close()
        return
    protocol = ClientProtocol(parse_uri(f"ws://{host}{path}"))
    request = protocol.connect()
    protocol.send_request(request)
    await _flush(protocol, writer)
    if not await _handshake(protocol, reader):
        writer.close()
        await send({"type": "websocket.close", "code": 1011})
        return
    await send({"type": "websocket.accept"})
    upstream = asyncio.create_task(_pump_upstream(protocol, reader, writer, send))
    try:
        await _pump_downstream(protocol, receive, writer)
    finally:
        upstream.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await upstream
        writer.close()


async def _handshake(protocol: ClientProtocol, reader: asyncssh.SSHReader[bytes]) -> bool:
    while True:
        data = await reader.read(65536)
        if not data:
            return False
        protocol.receive_data(data)
        for event in protocol.events_received():
            if isinstance(event, Response):
                return event.status_code == 101 and protocol.handshake_exc is None


async def _pump_downstream(
    protocol: ClientProtocol, receive: Receive, writer: asyncssh.SSHWriter[bytes]
) -> None:
    while True:
        message = await receive()
        kind = message.get("type")
        if kind == "websocket.receive":
            if message.get("text") is not None:
                protocol.send_text(str(message["text"]).encode())
            else:
                protocol.send_binary(bytes(message.get("bytes") or b""))
        elif kind == "websocket.disconnect":
            with contextlib.suppress(Exception):
                protocol.send_close(int(message.get("code", 1000)))
                await _flush(protocol, writer)
            return
        await _flush(protocol, writer)


async def _pump_upstream(
    protocol: ClientProtocol,
    reader: asyncssh.SSHReader[bytes],
    writer: asyncssh.SSHWriter[bytes],
    send: Send,
) -> None:
    parts: list[bytes] = []
    opcode = Opcode.TEXT
    while True:
        data = await reader.read(65536)
        if not data:
            protocol.receive_eof()
        else:
            protocol.receive_data(data)
        for event in protocol.events_received():
            if not isinstance(event, Frame):
                continue
            if event.opcode == Opcode.CLOSE:
                await send({"type": "websocket.close", "code": 1000})
                return
            if event.opcode in (Opcode.TEXT, Opcode.BINARY):
                opcode = event.opcode
                parts = [bytes(event.data)]
            elif event.opcode == Opcode.CONT:
                parts.append(bytes(event.data))
            else:
                continue
            if event.fin:
                payload = b"".join(parts)
                if opcode == Opcode.TEXT:
                    await send({"type": "websocket.send", "text": payload.decode()})
                else:
                    await send({"type": "websocket.send", "bytes": payload})
        await _flush(protocol, writer)
        if not data:
            await send({"type": "websocket.close", "code": 1011})
            return
