"""Who may call the agent's HTTP API: processes of the agent's own user, root, and the
users named with `--allow-user`.

The API listens on 127.0.0.1 of its host, where any local account can open a connection;
without this gate a shared GPU host's other users could submit jobs as the agent's user.
The Dockyard server always arrives through SSH: through the agent's embedded SSH server
(the connection comes from the agent process itself) or through the host's sshd, from the
session of the user who started the agent (or, on cloud VMs where systemd runs the agent
as root, of the image's login user, which cloud-init passes as `--allow-user`).

`PeerGate` is the ASGI middleware `agent.server.app.create_app` puts in front of every
route: it finds the owner of the connecting socket in the kernel's TCP table
(`/proc/net/tcp`, by the client's port and the agent's port) and answers 403 to anyone
else. Where the table cannot be read (not Linux), the gate says so once and lets
requests through, as before it existed. `socket_owner` is the pure parsing part.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TCP_TABLE = Path("/proc/net/tcp")
_LOOPBACK = "0100007F"  # 127.0.0.1 as the kernel prints it (little-endian hex)
ASGIApp = Callable[..., Any]


def socket_owner(table: bytes, client_port: int, server_port: int) -> int | None:
    """The uid owning the loopback socket client_port → server_port, from `/proc/net/tcp`.

    Each line is `sl local rem st … uid timeout inode …`; the client's socket is the one
    whose local address is 127.0.0.1:client_port and remote 127.0.0.1:server_port.
    """
    needle = f"{_LOOPBACK}:{client_port:04X} {_LOOPBACK}:{server_port:04X}".encode()
    at = table.find(needle)
    if at < 0:
        return None
    end = table.find(b"\n", at)
    fields = table[at : end if end >= 0 else len(table)].split()
    # local, remote, st, tx:rx, tr:when, retrnsmt, uid
    return int(fields[6]) if len(fields) > 6 else None


def allowed_uids(extra_users: Iterable[str] = ()) -> frozenset[int]:
    """The agent's own uid, root's, and those of `extra_users` (unknown names: an error)."""
    uids = {os.getuid(), 0}
    for name in extra_users:
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            raise ValueError(f"--allow-user {name}: no such user on this host") from None
    return frozenset(uids)


class PeerGate:
    """ASGI middleware; see the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed: frozenset[int],
        read_table: Callable[[], bytes] | None = None,
    ) -> None:
        self.app = app
        self.allowed = allowed
        self._read = read_table or TCP_TABLE.read_bytes
        self._checks = True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self._checks and not self._permitted(scope):
            body = json.dumps(
                {
                    "error": "forbidden",
                    "message": "the agent's API serves only its own user: "
                    "reach it through SSH as that user",
                }
            ).encode()
            headers = [(b"content-type", b"application/json")]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": 403, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _permitted(self, scope: dict[str, Any]) -> bool:
        client, server = scope.get("client"), scope.get("server")
        if not client or not server:
            return False
        try:
            table = self._read()
        except OSError as exc:
            log.warning("agent API open to every local user: cannot read %s (%s)", TCP_TABLE, exc)
            self._checks = False
            return True
        uid = socket_owner(table, int(client[1]), int(server[1]))
        return uid is not None and uid in self.allowed
