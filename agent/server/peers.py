"""Who may call the agent's HTTP API: processes of the agent's own user, root, and the
users named with `--allow-user`; the kernel says who is calling, never a header.

The API listens on 127.0.0.1 of its host, where any local account can open a connection;
without this gate a shared GPU host's other users could submit jobs as the agent's user.
The Dockyard server always arrives through SSH: through the agent's embedded SSH server
(the connection comes from the agent process itself) or through the host's sshd, from the
session of the user who started the agent (or, on cloud VMs where systemd runs the agent
as root, of the image's login user, which cloud-init passes as `--allow-user`).

`gated_protocol` wraps uvicorn's HTTP protocol class: when a connection is made it looks
up, once, the owner of the connecting socket in the kernel's TCP table (`/proc/net/tcp`):
the row whose local address is the peer's and remote address the agent's, in state
ESTABLISHED only (a TIME_WAIT row belongs to no process and shows uid 0). The process
holding that socket must also run in the agent's PID namespace: a Docker job on the
host's network runs as uid 0 but in a container. A connection of anyone else is answered
403 on every request. uvicorn runs with `proxy_headers=False`
(`serving`), so `X-Forwarded-For` never changes who the peer is. Where the table cannot be
read (not Linux), the gate says so once and lets connections through.
`established_socket` is the pure parsing part.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agent.server.procsockets import holds, socket_link

log = logging.getLogger(__name__)

TCP_TABLE = Path("/proc/net/tcp")
_ESTABLISHED = b"01"  # `st` of /proc/net/tcp (include/net/tcp_states.h)
ASGIApp = Callable[..., Any]
TableReader = Callable[[], bytes]


def _hex_address(host: str, port: int) -> bytes:
    """An IPv4 address as /proc/net/tcp prints it: little-endian hex, then the port."""
    packed = socket.inet_aton(host)
    return f"{int.from_bytes(packed, 'little'):08X}:{port:04X}".encode()


def established_socket(
    table: bytes, client: tuple[str, int], server: tuple[str, int]
) -> tuple[int, int] | None:
    """(uid, inode) of the ESTABLISHED socket `client` → `server`, from `/proc/net/tcp`.

    Each line is `sl local rem st … uid timeout inode …`; the caller's socket is the one
    whose local address is `client` and remote address `server`. Any other state (a closed
    connection's TIME_WAIT row shows uid 0) answers None.
    """
    needle = _hex_address(*client) + b" " + _hex_address(*server) + b" "
    at = table.find(needle)
    while at >= 0:
        end = table.find(b"\n", at)
        fields = table[at : end if end >= 0 else len(table)].split()
        # local, remote, st, tx:rx, tr:when, retrnsmt, uid, timeout, inode
        if len(fields) > 8 and fields[2] == _ESTABLISHED:
            return int(fields[6]), int(fields[8])
        at = table.find(needle, at + 1)
    return None


def held_in_container(inode: int, proc: Path = Path("/proc")) -> bool:
    """Whether a process in another PID namespace than ours (a container's) holds socket
    `inode`. Only those processes' descriptors are read, so the cost is one `readlink` per
    process of the host plus the descriptors of containers' processes. Processes this one
    may not inspect (another user's, for an agent that is not root) are not seen."""
    try:
        ours = os.readlink(proc / "self" / "ns" / "pid")
    except OSError:
        return False
    link = socket_link(inode)
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"{entry.path}/ns/pid") == ours:
                continue
        except OSError:  # gone, or not ours to read
            continue
        if holds(entry.path, link):
            return True
    return False


def allowed_uids(extra_users: Iterable[str] = ()) -> frozenset[int]:
    """The agent's own uid, root's, and those of `extra_users` (unknown names: an error)."""
    uids = {os.getuid(), 0}
    for name in extra_users:
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            raise ValueError(f"--allow-user {name}: no such user on this host") from None
    return frozenset(uids)


class PeerCheck:
    """Decides, once per connection, whether its socket belongs to an allowed uid."""

    def __init__(
        self,
        allowed: frozenset[int],
        read_table: TableReader | None = None,
        in_container: Callable[[int], bool] = held_in_container,
    ) -> None:
        self.allowed = allowed
        self._read = read_table or TCP_TABLE.read_bytes
        self._in_container = in_container
        self._checks = True

    def permits(self, transport: asyncio.BaseTransport) -> bool:
        if not self._checks:
            return True
        client, server = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        if not (isinstance(client, tuple) and isinstance(server, tuple)):
            return False
        try:
            table = self._read()
        except OSError as exc:
            log.warning("agent API open to every local user: cannot read %s (%s)", TCP_TABLE, exc)
            self._checks = False
            return True
        try:
            found = established_socket(table, (client[0], client[1]), (server[0], server[1]))
        except OSError:  # not an IPv4 address: the agent listens on 127.0.0.1 only
            return False
        if found is None or found[0] not in self.allowed:
            return False
        # a container on the host's network (a Docker job's) may run as root: uid 0
        return not self._in_container(found[1])


async def forbidden(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI app every request of a refused connection gets: 403 `forbidden`."""
    if scope["type"] != "http":
        return
    body = json.dumps(
        {
            "error": "forbidden",
            "message": "the agent's API serves only its own user: "
            "reach it through SSH as that user",
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 403, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def gated_protocol(base: type[asyncio.Protocol], check: PeerCheck) -> type[asyncio.Protocol]:
    """`base` (uvicorn's HTTP protocol) whose connections of other users get `forbidden`."""

    class Gated(base):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            if not check.permits(transport):
                self.app = forbidden  # uvicorn reads `self.app` for each request

    return Gated
