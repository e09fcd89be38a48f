"""A forward to a job's port whose life is counted as the job's SSH activity.

`agent.ssh.server` answers a user's ``direct-tcpip`` channel to the port of a job that
watches its connections (``watch_connections``: dstack's inactivity rules) with
`watched_forward`: asyncssh's own forwarder, refused as asyncssh would refuse it, with the
channel counted open in `ConnectionActivity` until it is gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import asyncssh
from asyncssh.forward import SSHForwarder

from agent.server.activity import ConnectionActivity


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


async def watched_forward(
    host: str, port: int, job_id: str, activity: ConnectionActivity
) -> asyncssh.SSHTCPSession[bytes]:
    """Forward like asyncssh does (refused as it would be), counting the channel's life."""
    loop = asyncio.get_running_loop()
    try:
        _, peer = await loop.create_connection(SSHForwarder, host, port)
    except OSError as error:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(error)) from None
    holder = object()
    activity.opened(holder, job_id)
    forwarder = _WatchedForwarder(peer, lambda: activity.closed(holder))
    return cast(asyncssh.SSHTCPSession[bytes], forwarder)  # as asyncssh treats its own
