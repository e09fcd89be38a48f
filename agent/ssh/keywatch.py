"""The agent SSH server's key file, and closing what it no longer allows.

`KeyFile` is ``authorized_keys`` as the server's connections share it: read at every use
(a login, each channel a user key opens) and parsed again only when its bytes changed.

`OpenConnections` holds the server's open connections; `watch_key_file` reads the file
again every `interval` seconds while the server listens, and when its bytes changed closes
each connection whose key may no longer reach what the connection uses: the key is gone
(a removed member, a deleted project or user), its role changed, or it is now limited to
projects that leave out a project whose job one of its channels reached (a session, a
forward, dstack's hop or log stream). Closing a connection closes all its channels; a
session's command is ended with it (`agent.ssh.sessions`). A key whose projects only grew
keeps its connections. A file that cannot be parsed (a writer appending, caught mid-line)
closes nothing until a clean read; the server replaces the file whole (`mv`), appending
only the control line at deploy. Called by `agent.ssh.server.start_ssh_server`.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Protocol

import asyncssh

log = logging.getLogger(__name__)

KEY_CHECK_INTERVAL = 1.0
"""Seconds between two reads of the key file by `watch_key_file` (a stat-sized read)."""


class KeyFile:
    """``authorized_keys``, read at every use and parsed again only when its bytes changed
    (parsing costs about 57 µs a line; the server's connections share one). `generation`
    counts the parses: it changes whenever what the file says may have changed. A file that
    cannot be read or parsed lets nobody in; `garbled` says so when the cause may be a
    writer caught mid-write (anything but a missing file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._raw: bytes | None = None
        self._parsed = asyncssh.SSHAuthorizedKeys()
        self.generation = 0
        self.garbled = False

    def current(self) -> asyncssh.SSHAuthorizedKeys:
        try:
            raw = self.path.read_bytes()
            if raw != self._raw:
                self._parsed = asyncssh.SSHAuthorizedKeys(raw.decode())
                self._raw = raw
                self.generation += 1
            self.garbled = False
        except (OSError, ValueError, asyncssh.KeyImportError) as exc:
            log.warning("cannot read authorized keys %s: %s", self.path, exc)
            if self._raw is not None or self.generation == 0:
                self.generation += 1
            self._raw, self._parsed = None, asyncssh.SSHAuthorizedKeys()
            self.garbled = not isinstance(exc, FileNotFoundError)
        return self._parsed


class Revocable(Protocol):
    """An open connection of the server (`agent.ssh.server._AgentSSHServer`)."""

    def revoked(self, keys: asyncssh.SSHAuthorizedKeys) -> bool:
        """Whether `keys` no longer let this connection's key reach what it uses."""
        ...

    def close(self) -> None:
        """Close the connection and all its channels."""
        ...


class OpenConnections:
    """See the module docstring."""

    def __init__(self, keys: KeyFile) -> None:
        self.keys = keys
        self._open: set[Revocable] = set()
        self._swept = -1  # the key file's generation the last sweep saw
        self.watcher: asyncio.Task[None] | None = None  # `watch_key_file`, held here

    def add(self, connection: Revocable) -> None:
        self._open.add(connection)

    def discard(self, connection: Revocable) -> None:
        self._open.discard(connection)

    def __len__(self) -> int:
        return len(self._open)

    def sweep(self) -> int:
        """Read the key file; if it changed since the last sweep, close the connections it
        no longer allows. How many were closed."""
        current = self.keys.current()
        if self.keys.generation == self._swept or self.keys.garbled:
            return 0  # unchanged, or perhaps caught mid-write: judged on a clean read
        self._swept = self.keys.generation
        closing = [c for c in list(self._open) if c.revoked(current)]
        for connection in closing:
            self._open.discard(connection)
            connection.close()
        if closing:
            log.info("closed %d SSH connection(s) whose key no longer allows them", len(closing))
        return len(closing)


async def watch_key_file(
    connections: OpenConnections,
    serving: asyncssh.SSHAcceptor,
    interval: float = KEY_CHECK_INTERVAL,
) -> None:
    """Sweep `connections` every `interval` seconds while `serving` listens."""
    connections.sweep()  # what the file says now is what later changes are compared with
    while serving.is_serving():
        await asyncio.sleep(interval)
        try:
            connections.sweep()
        except Exception:  # one bad pass must not end the watch
            log.exception("checking open SSH connections against the key file failed")
