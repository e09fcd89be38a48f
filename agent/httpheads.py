"""A bound on the size of each HTTP request's head (request line and headers).

uvicorn's httptools protocol keeps every header byte until the head is complete, with no
limit: 8 connections sending 60 MB headers grew a server by 400 MB before its answer of
401. `bounded_heads(base, limit)` counts the bytes each request's head has taken and, past
`limit`, answers `431` and closes the connection, so a connection costs at most `limit`
plus one read (256 KiB). Used by the agent's HTTP server (`agent.server.serving`) and the
Dockyard server (`reconciler.app`); for uvicorn's h11 protocol the same limit is
`h11_max_incomplete_event_size`.
"""

from __future__ import annotations

import asyncio
from typing import Any


def _httptools_protocol() -> type[asyncio.Protocol] | None:
    """uvicorn's httptools protocol, or None without httptools (an SSH host's agent bundle:
    uvicorn serves with h11 there)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return None
    return HttpToolsProtocol


HttpToolsProtocol = _httptools_protocol()

DEFAULT_MAX_HEADER_BYTES = 64 * 1024


def head_too_large_answer(limit: int, setting: str) -> bytes:
    """The whole `431` response: which limit, and the setting that raises it."""
    message = (
        f"the request's headers are over {limit} bytes; the limit is the server setting {setting}\n"
    ).encode()
    return (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: text/plain; charset=utf-8\r\n"
        b"content-length: " + str(len(message)).encode() + b"\r\n"
        b"connection: close\r\n\r\n" + message
    )


def bounded_heads(base: type[asyncio.Protocol], limit: int, setting: str) -> type[asyncio.Protocol]:
    """`base` (uvicorn's httptools protocol or a subclass) refusing heads over `limit` bytes.

    Any other protocol class is returned as it is (h11 has its own limit).
    """
    if HttpToolsProtocol is None or not issubclass(base, HttpToolsProtocol):
        return base
    answer = head_too_large_answer(limit, setting)

    class BoundedHeads(base):  # type: ignore[valid-type,misc]
        _head_bytes = 0
        _in_head = True
        _refused = False

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            if self._in_head and self._head_bytes > limit:
                self._refused = True
                transport: Any = self.transport
                transport.write(answer)
                transport.close()

        def on_message_begin(self) -> None:
            self._in_head = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._head_bytes = 0
            super().on_headers_complete()

    return BoundedHeads
