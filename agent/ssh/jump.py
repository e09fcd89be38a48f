"""Connections through the agent's SSH server to itself, each tied to one job.

dstack 0.22.5 attaches to a "dockerized" job in two hops: ``ssh -J <user>@agent
root@localhost:<container ssh port>``, i.e. a ``direct-tcpip`` channel from the outer
connection to an SSH server, then the real connection (sessions, ``-L`` forwards, including
dstack-runner's port 10999) inside it, always as ``root``. The server points that second hop
at the agent's own SSH server (`reconciler.web.dstack_attach`), with the job's id as the outer
user name: the outer connection says which job, and `JumpLinks` carries that to the inner
one. The agent opens the inner TCP connection itself and registers its source address before
any byte of the client goes through, so the inner connection finds its job by its peer
address when it asks to authenticate (no other process can hold that address meanwhile).
Used by `agent.ssh.server`; jobs are found by `agent.ssh.service`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import asyncssh
from asyncssh.forward import SSHForwarder

from agent.ssh.runner_api import LogReader

WILDCARDS = frozenset({"", "0.0.0.0", "::"})


@dataclass(frozen=True)
class JobLink:
    """The job an inner connection is for, and its project (for users' project limits)."""

    job_id: str
    project: str | None


Projects = frozenset[str] | None  # the projects a user key is limited to (None: any)
JobFinder = Callable[[str, Projects], JobLink | None]  # outer user name -> the job it names


class JumpLinks:
    """The agent's pending connections to itself, by their source address."""

    def __init__(self, listen_host: str, listen_port: int) -> None:
        host = "127.0.0.1" if listen_host in WILDCARDS else listen_host
        self.target = (host, listen_port)
        self._pending: dict[tuple[str, int], JobLink] = {}

    def claim(self, peer: object) -> JobLink | None:
        """The job of an incoming connection from `peer` that the agent opened (once)."""
        if not isinstance(peer, tuple) or len(peer) < 2:
            return None
        return self._pending.pop((str(peer[0]), int(peer[1])), None)

    async def open(self, link: JobLink) -> asyncssh.SSHTCPSession[bytes]:
        """Connect to the agent's SSH server for `link`; the channel's session. The inner
        connection claims its link at its first auth request, which only comes through the
        channel, so after the source address is registered here."""
        loop = asyncio.get_running_loop()
        try:
            transport, peer = await loop.create_connection(
                _SocketSide, *self.target, local_addr=(self.target[0], 0)
            )
        except OSError as error:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(error)) from None
        name = transport.get_extra_info("sockname")
        self._pending[(str(name[0]), int(name[1]))] = link
        return cast(asyncssh.SSHTCPSession[bytes], _ChannelSide(peer))

    def forget(self, peer: object) -> None:
        """Drop what was registered for `peer` (its connection ended before claiming)."""
        self.claim(peer)


class _SocketSide(SSHForwarder):
    """asyncssh's forwarder, socket side, keeping what the server says before the channel
    is open (asyncssh's own drops it: its server speaks first, at once, on loopback)."""

    def __init__(self) -> None:
        super().__init__()
        self._early: list[bytes] | None = []

    def data_received(self, data: bytes, datatype: int | None = None) -> None:
        if self._early is not None:
            self._early.append(data)
        else:
            super().data_received(data, datatype)

    def flush(self) -> None:
        early, self._early = self._early or [], None
        for data in early:
            super().data_received(data)


class _ChannelSide(SSHForwarder):
    """asyncssh's forwarder, channel side: once the channel is open, what was kept goes."""

    def __init__(self, peer: _SocketSide) -> None:
        super().__init__(peer)
        self._socket_side = peer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._socket_side.flush()


@dataclass(frozen=True)
class JobAccess:
    """What dstack's attach needs from the job manager: the job an outer user name names
    among the jobs of the key's projects (any status: a finished job's log is still read;
    a job of another project is never looked at, nor its log kept), and a reader of a
    job's log and its end time."""

    find: JobFinder
    log: Callable[[str], LogReader]
    ended_at: Callable[[str], float | None]  # a job's end, unix seconds (None: runs, unknown)
