"""SSH tunnels to agents: one pooled asyncssh connection per host, channels multiplexed.

The server reaches every agent only through SSH: the host's sshd for SSH fleets and cloud
VMs, the agent's own embedded SSH server for the local fleet. `TunnelPool` keeps one
connection per `SSHTarget` and opens a ``direct-tcpip`` channel on it for every HTTP
connection to the agent (see `agent.ssh.transport`), so many concurrent requests share one
SSH handshake.

A lost connection is noticed by asyncssh keepalives or by a failing channel; the next caller
reconnects. Failed connects are spaced by `BackoffPolicy` measured on the injected clock:
while a host is backing off, callers get `AgentUnreachable` at once instead of waiting, so a
worker polling many hosts is never stuck on one. `AgentUnreachable` is a transport state
(with `unreachable_since`), never a job failure by itself: the caller owns the grace window.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import asyncssh

from agent.channels import ChannelStream


class UnreachableKind(enum.StrEnum):
    """Why a host cannot be reached right now."""

    auth_refused = "auth_refused"
    connect_failed = "connect_failed"
    backing_off = "backing_off"
    channel_refused = "channel_refused"
    connection_lost = "connection_lost"
    timeout = "timeout"
    closed = "closed"


class AgentUnreachable(Exception):  # noqa: N818 - the name is the contract
    """The agent could not be reached: a transport state, never a job failure by itself."""

    def __init__(
        self,
        target: str,
        kind: UnreachableKind,
        detail: str,
        *,
        unreachable_since: float | None = None,
        retry_in: float | None = None,
    ) -> None:
        super().__init__(f"{target}: {kind.value}: {detail}")
        self.target = target
        self.kind = kind
        self.detail = detail
        self.unreachable_since = unreachable_since
        self.retry_in = retry_in


@dataclass(frozen=True)
class SSHTarget:
    """How to reach one host's SSH endpoint; hashable, so it keys the pool."""

    hostname: str
    port: int = 22
    user: str = "root"
    identity_file: str | None = None
    proxy_jump: SSHTarget | None = None
    known_hosts: str | None = None  # path of a known_hosts file; None: host key not checked

    def __str__(self) -> str:
        via = f" via {self.proxy_jump}" if self.proxy_jump else ""
        return f"{self.user}@{self.hostname}:{self.port}{via}"


@dataclass(frozen=True)
class BackoffPolicy:
    """Delay before reconnect attempt n+1 after n consecutive failures."""

    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return float(min(self.maximum, self.initial * self.factor ** (failures - 1)))


@dataclass(frozen=True)
class HostState:
    """What the pool knows about one host (for status pages and the unreachable grace)."""

    connected: bool
    failures: int
    unreachable_since: float | None
    last_error: str | None
    next_attempt_at: float | None


Connector = Callable[
    [SSHTarget, "asyncssh.SSHClientConnection | None"], Awaitable[asyncssh.SSHClientConnection]
]


@dataclass(frozen=True)
class SSHOptions:
    """Timing of SSH connections: connect timeout and keepalives (dstack: connect 3 s)."""

    connect_timeout: float = 3.0
    keepalive_interval: float = 15.0  # a keepalive request after this much silence
    keepalive_count_max: int = 3  # unanswered keepalives before the connection is dropped


_WINDOW = 8 * 1024 * 1024  # a channel's receive window: a large response is not throttled
_PACKET = 65536

# AES-GCM first: one AEAD call per packet through OpenSSL (AES-NI) against asyncssh's
# default chacha20-poly1305, which costs several; a tunnel carries ~1.7x the requests/s.
# The rest of asyncssh's defaults follow, so any server still finds a common cipher.
_ENCRYPTION_ALGS = [
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
]


async def connect_ssh(
    target: SSHTarget,
    tunnel: asyncssh.SSHClientConnection | None,
    options: SSHOptions | None = None,
) -> asyncssh.SSHClientConnection:
    """Open one asyncssh client connection with keepalives; `~/.ssh/config` is not read."""
    options = options or SSHOptions()
    keys = [target.identity_file] if target.identity_file else None
    conn: asyncssh.SSHClientConnection = await asyncssh.connect(
        target.hostname,
        target.port,
        username=target.user,
        client_keys=keys,
        known_hosts=target.known_hosts,
        tunnel=tunnel or (),
        config=None,
        agent_path=None,
        connect_timeout=options.connect_timeout,
        encryption_algs=_ENCRYPTION_ALGS,
        keepalive_interval=options.keepalive_interval,
        keepalive_count_max=options.keepalive_count_max,
    )
    return conn


def ssh_connector(options: SSHOptions) -> Connector:
    """A `Connector` using `options` (the pool's default uses `SSHOptions()`)."""

    async def connect(
        target: SSHTarget, tunnel: asyncssh.SSHClientConnection | None
    ) -> asyncssh.SSHClientConnection:
        return await connect_ssh(target, tunnel, options)

    return connect


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    conn: asyncssh.SSHClientConnection | None = None
    failures: int = 0
    unreachable_since: float | None = None
    next_attempt_at: float | None = None
    last_error: str | None = None
    eager_until: float = 0.0  # no back-off before then (an agent is starting there)


def _is_alive(conn: asyncssh.SSHClientConnection | None) -> bool:
    return conn is not None and not conn.is_closed()


def classify_connect_error(exc: BaseException) -> UnreachableKind:
    """Map an exception from `asyncssh.connect` to why the host is unreachable."""
    if isinstance(exc, asyncssh.PermissionDenied):
        return UnreachableKind.auth_refused
    return UnreachableKind.connect_failed


class TunnelPool:
    """One SSH connection per host, reconnected lazily with backoff."""

    def __init__(
        self,
        *,
        connect: Connector = connect_ssh,
        backoff: BackoffPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connect = connect
        self._backoff = backoff or BackoffPolicy()
        self._clock = clock
        self._entries: dict[SSHTarget, _Entry] = {}
        self._closed = False

    def state(self, target: SSHTarget) -> HostState:
        entry = self._entries.get(target) or _Entry()
        return HostState(
            connected=_is_alive(entry.conn),
            failures=entry.failures,
            unreachable_since=entry.unreachable_since,
            last_error=entry.last_error,
            next_attempt_at=entry.next_attempt_at,
        )

    async def connection(self, target: SSHTarget) -> asyncssh.SSHClientConnection:
        """The live connection to `target`, connecting if needed; or `AgentUnreachable`."""
        if self._closed:
            raise AgentUnreachable(str(target), UnreachableKind.closed, "the pool is closed")
        entry = self._entries.setdefault(target, _Entry())
        if entry.conn is not None and _is_alive(entry.conn):
            return entry.conn
        async with entry.lock:
            if entry.conn is not None and _is_alive(entry.conn):
                return entry.conn
            if entry.conn is not None:
                self._mark_lost(entry, "connection closed")
            return await self._reconnect(target, entry)

    async def _reconnect(self, target: SSHTarget, entry: _Entry) -> asyncssh.SSHClientConnection:
        now = self._clock()
        if entry.next_attempt_at is not None and now < entry.next_attempt_at:
            raise AgentUnreachable(
                str(target),
                UnreachableKind.backing_off,
                entry.last_error or "reconnecting",
                unreachable_since=entry.unreachable_since,
                retry_in=entry.next_attempt_at - now,
            )
        try:
            jump = await self.connection(target.proxy_jump) if target.proxy_jump else None
            conn = await self._connect(target, jump)
        except AgentUnreachable as exc:
            raise self._fail(target, entry, exc.kind, f"proxy jump: {exc.detail}") from exc
        except (TimeoutError, OSError, asyncssh.Error) as exc:
            kind = classify_connect_error(exc)
            raise self._fail(target, entry, kind, _describe(exc)) from exc
        entry.conn = conn
        entry.failures = 0
        entry.unreachable_since = None
        entry.next_attempt_at = None
        entry.last_error = None
        return conn

    def _fail(
        self, target: SSHTarget, entry: _Entry, kind: UnreachableKind, detail: str
    ) -> AgentUnreachable:
        now = self._clock()
        entry.failures += 1
        entry.last_error = detail
        if entry.unreachable_since is None:
            entry.unreachable_since = now
        delay = 0.0 if now < entry.eager_until else self._backoff.delay(entry.failures)
        entry.next_attempt_at = now + delay
        return AgentUnreachable(
            str(target), kind, detail, unreachable_since=entry.unreachable_since, retry_in=delay
        )

    def _mark_lost(self, entry: _Entry, detail: str) -> None:
        if entry.conn is not None:
            entry.conn.close()
        entry.conn = None
        entry.last_error = detail
        if entry.unreachable_since is None:
            entry.unreachable_since = self._clock()

    async def open_stream(
        self, target: SSHTarget, host: str, port: int
    ) -> tuple[asyncssh.SSHReader[bytes], asyncssh.SSHWriter[bytes]]:
        """A ``direct-tcpip`` channel to host:port as seen from the remote end."""
        conn = await self.connection(target)
        with self._opening(target, host, port):
            reader, writer = await conn.open_connection(
                host, port, encoding=None, window=_WINDOW, max_pktsize=_PACKET
            )
        return reader, writer

    async def open_channel(self, target: SSHTarget, host: str, port: int) -> ChannelStream:
        """Like `open_stream`, as one `ChannelStream` (reader and writer, the proxy's)."""
        conn = await self.connection(target)
        with self._opening(target, host, port):
            _, stream = await conn.create_connection(
                ChannelStream, host, port, encoding=None, window=_WINDOW, max_pktsize=_PACKET
            )
        assert isinstance(stream, ChannelStream)  # the factory's own instance
        return stream

    @contextlib.contextmanager
    def _opening(self, target: SSHTarget, host: str, port: int) -> Iterator[None]:
        """Channel-open failures as `AgentUnreachable`; a dead connection is dropped."""
        try:
            yield
        except asyncssh.ChannelOpenError as exc:
            raise AgentUnreachable(
                str(target), UnreachableKind.channel_refused, f"{host}:{port}: {exc.reason}"
            ) from exc
        except (OSError, asyncssh.Error) as exc:
            entry = self._entries[target]
            self._mark_lost(entry, _describe(exc))
            raise AgentUnreachable(
                str(target),
                UnreachableKind.connection_lost,
                _describe(exc),
                unreachable_since=entry.unreachable_since,
            ) from exc

    def retry_now(self, target: SSHTarget, *, for_seconds: float = 30.0) -> None:
        """Forget the back-off of `target` and hold none for `for_seconds`: an agent is
        being started there, and each caller connects as soon as it listens (its
        predecessor's failures, and its own start-up's, say nothing about when it will)."""
        entry = self._entries.setdefault(target, _Entry())
        entry.failures, entry.next_attempt_at = 0, None
        entry.eager_until = self._clock() + for_seconds

    def drop(self, target: SSHTarget) -> None:
        """Close the connection to `target` (the next caller reconnects)."""
        entry = self._entries.get(target)
        if entry is not None and entry.conn is not None:
            entry.conn.close()

    async def close(self) -> None:
        self._closed = True
        conns = [e.conn for e in self._entries.values() if e.conn is not None]
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "connect timed out"
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0] if text else type(exc).__name__
