"""A forward to a job's port: opened only to the job's own socket, and counted as the job's
SSH activity when the job watches its connections.

`agent.ssh.server` answers a ``direct-tcpip`` channel to a job's port with
`checked_forward`: first `check` (`agent.server.portholders` through
`agent.ssh.service.port_check`) says whether the socket listening on that port is held by
the job; if not, the channel is refused with the reason (the server's proxy and
`runs/forward` pass it on). Then asyncssh's own forwarder, refused as asyncssh would refuse
it, with the channel counted open in `ConnectionActivity` until it is gone for a job that
watches its connections (``watch_connections``: dstack's inactivity rules).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import cast

import asyncssh
from asyncssh.forward import SSHForwarder

from agent.server.activity import ConnectionActivity

log = logging.getLogger(__name__)

PortCheck = Callable[[int], Awaitable[str | None]]
"""`check(port)`: why a connection to this job port would not reach its job, or None."""


class _WatchedForwarder(SSHForwarder):
    """asyncssh's own forwarder (channel side) that says when the channel is gone."""

    def __init__(self, peer: SSHForwarder, on_lost: Callable[[], None]) -> None:
        super().__init__(peer)
        self._on_lost = on_lost

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            self._on_lost()


async def checked_forward(
    host: str,
    port: int,
    check: PortCheck | None,
    watched: tuple[str, ConnectionActivity] | None = None,
) -> asyncssh.SSHTCPSession[bytes]:
    """Forward like asyncssh does (refused as it would be) once `check` passes; with
    `watched` (the job's id and the activity), counting the channel's life."""
    problem = None if check is None else await check(port)
    if problem is not None:
        log.warning("forward to %s:%d refused: %s", host, port, problem)
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, problem)
    loop = asyncio.get_running_loop()
    try:
        _, peer = await loop.create_connection(SSHForwarder, host, port)
    except OSError as error:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(error)) from None
    if watched is None:
        return cast(asyncssh.SSHTCPSession[bytes], SSHForwarder(peer))
    job_id, activity = watched
    holder = object()
    activity.opened(holder, job_id)
    forwarder = _WatchedForwarder(peer, lambda: activity.closed(holder))
    return cast(asyncssh.SSHTCPSession[bytes], forwarder)  # as asyncssh treats its own
