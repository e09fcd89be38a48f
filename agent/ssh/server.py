"""The agent's embedded SSH server (asyncssh), used where there is no sshd to lean on.

For the local fleet the control plane reaches the agent through this server exactly as it
reaches SSH fleets through sshd: public-key auth (the server's key is in
``authorized_keys``), then ``direct-tcpip`` channels to the agent's 127.0.0.1 HTTP port.
Users get the same endpoint for ``ssh <run>`` (a shell in the job's environment, see
`agent.ssh.sessions`) and port forwarding to job ports (``dockyard attach``).

Rules:
- Only public-key auth; ``authorized_keys`` is re-read on every connection so the control
  plane can add user keys without a restart, and on every channel a user key opens (a
  session, a forward) so a key removed or narrowed since its connection logged in opens
  nothing new on that connection (`_AgentSSHServer.still_authorized`). When the file
  changes, open connections whose key may no longer reach what they use are closed, with
  their sessions and forwards (`agent.ssh.keywatch`, `_AgentSSHServer.revoked`).
- ``direct-tcpip`` only to loopback destinations whose port `ForwardPolicy` allows (the
  agent's port and the ports of running jobs); everything else is refused with a reason.
  A job's port opens only while a process of that job holds its listening socket
  (`port_check`: `agent.server.portholders`), so a run declaring another account's
  loopback port reaches nothing.
- Two kinds of keys in one standard ``authorized_keys`` file: the control plane's keys
  (plain lines) may reach the agent's API; users' keys, written by `user_key_line` with
  ``environment="DOCKYARD_ROLE=user"``, get sessions and job ports but never the agent's
  API. Standard options (``permitopen``, ``no-port-forwarding``, …) are honoured too.
- No remote (``-R``) forwarding, no agent forwarding, no X11.
- dstack's attach (`agent.ssh.jump`): a user key may open a channel to this server itself,
  with a job's id as its user name; the inner connection is then tied to that job (its
  sessions are that job's, whatever the user name) and a forward of dstack-runner's port
  10999 there gets the job's log stream (`agent.ssh.runner_api`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from agent.server.activity import ConnectionActivity
from agent.ssh.jump import JobAccess, JobLink, JumpLinks
from agent.ssh.keywatch import KEY_CHECK_INTERVAL, OpenConnections, watch_key_file
from agent.ssh.keywatch import KeyFile as KeyFile
from agent.ssh.runner_api import RUNNER_HTTP_PORT, serve_logs_ws
from agent.ssh.sessions import (
    JobSession,
    SessionResolver,
    limited_lookup,
    linked_lookup,
    noting_lookup,
    serve_session,
)
from agent.ssh.watchedforward import PortCheck, checked_forward

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})

ForwardPolicy = Callable[[int, bool], bool]  # (port, key is a user's) -> allowed
ROLE_VARIABLE = "DOCKYARD_ROLE"
USER_ROLE = "user"
PROJECTS_VARIABLE = "DOCKYARD_PROJECTS"
PROJECT_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
REVOKED_MESSAGE = "this connection's key is no longer authorized as it was (connect again)"
PortProject = Callable[[int], str | None]  # a running job's port -> its project label
StreamHandler = Callable[[asyncssh.SSHReader[bytes], asyncssh.SSHWriter[bytes]], Awaitable[None]]


@dataclass(frozen=True)
class ActivityWatch:
    """What the server reports users' activity to: sessions, and forwards to the ports of
    jobs that `watched_owner` names (forwarded by asyncssh's forwarder, watched to its end)."""

    activity: ConnectionActivity
    watched_owner: Callable[[int], str | None]  # port -> the id of a watched job


@dataclass(frozen=True)
class SSHServerOptions:
    """How the agent's SSH server listens and whom it lets in."""

    port: int
    host_key: Path
    authorized_keys: Path
    host: str = "127.0.0.1"


def ensure_host_key(path: Path) -> None:
    """Generate an ed25519 host key at `path` unless one exists (mode 0600)."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    path.chmod(0o600)


def user_key_line(public_key: str, projects: Iterable[str] | None = None) -> str:
    """An ``authorized_keys`` line for a user: sessions and job ports, not the agent API;
    with `projects`, only jobs labelled with one of them (``dockyard.project``)."""
    options = f'environment="{ROLE_VARIABLE}={USER_ROLE}"'
    if projects is not None:
        names = ",".join(sorted(p for p in projects if PROJECT_NAME.fullmatch(p)))
        options += f',environment="{PROJECTS_VARIABLE}={names}"'
    return f"{options} {public_key.strip()}"


def key_projects(environment: object) -> frozenset[str] | None:
    """Pure: the projects a user key is limited to (None: not limited)."""
    if not isinstance(environment, dict) or environment.get(ROLE_VARIABLE) != USER_ROLE:
        return None
    raw = environment.get(PROJECTS_VARIABLE)
    return None if raw is None else frozenset(p for p in str(raw).split(",") if p)


class _LoginKeys(asyncssh.SSHAuthorizedKeys):
    """The key file as read when a connection authenticates, remembering the key it let in
    (the last one validated: a successful signature check ends the authentication). Plain
    OpenSSH keys only (what Dockyard writes): X.509 entries are not honoured."""

    def __init__(self, keys: asyncssh.SSHAuthorizedKeys | None = None) -> None:
        super().__init__()
        self._keys = keys or asyncssh.SSHAuthorizedKeys()
        self.matched: asyncssh.SSHKey | None = None

    def validate(
        self,
        key: asyncssh.SSHKey,
        client_host: str,
        client_addr: str,
        cert_principals: Sequence[str] | None = None,
        ca: bool = False,
    ) -> Mapping[str, object] | None:
        options = self._keys.validate(key, client_host, client_addr, cert_principals, ca)
        if options is not None and not ca:
            self.matched = key
        return options


def is_forward_allowed(
    dest_host: str, dest_port: int, policy: ForwardPolicy, *, by_user: bool
) -> bool:
    """Pure: may a ``direct-tcpip`` channel go to dest_host:dest_port?"""
    in_range = 0 < dest_port < 65536
    return dest_host in LOOPBACK_NAMES and in_range and policy(dest_port, by_user)


class _AgentSSHServer(asyncssh.SSHServer):
    def __init__(
        self,
        authorized_keys: KeyFile,
        policy: ForwardPolicy,
        watch: ActivityWatch | None = None,
        port_project: PortProject | None = None,
        jobs: tuple[JobAccess, JumpLinks] | None = None,
        connections: OpenConnections | None = None,
        port_check: PortCheck | None = None,
    ) -> None:
        self._authorized_keys = authorized_keys
        self._port_check = port_check
        self._connections = connections
        self.used: set[str | None] = set()  # projects of the jobs its channels reached
        self._policy = policy
        self._watch = watch
        self._port_project = port_project
        self._jobs = jobs
        self._conn: asyncssh.SSHServerConnection | None = None
        self._keys = _LoginKeys()
        self.link: JobLink | None = None  # an inner connection of dstack's attach: its job

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        if self._connections is not None:
            self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connections is not None:
            self._connections.discard(self)
        if self._jobs is not None and self._conn is not None and self.link is None:
            self._jobs[1].forget(self._conn.get_extra_info("peername"))

    def begin_auth(self, username: str) -> bool:
        assert self._conn is not None
        if self._jobs is not None and self.link is None:
            self.link = self._jobs[1].claim(self._conn.get_extra_info("peername"))
            if self.link is not None:  # an inner connection reaches its job only
                self.used.add(self.link.project)
        self._keys = _LoginKeys(self._authorized_keys.current())
        self._conn.set_authorized_keys(self._keys)
        return True

    def by_user(self) -> bool:
        """Whether the connection logged in with a user key (not the control plane's)."""
        assert self._conn is not None
        environment = self._conn.get_key_option("environment")
        return isinstance(environment, dict) and environment.get(ROLE_VARIABLE) == USER_ROLE

    def still_authorized(self) -> bool:
        """Whether the key this connection logged in with is still in the key file, with
        the same environment (role, projects): read again now."""
        assert self._conn is not None
        if self._keys.matched is None:
            return False
        peer = self._conn.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        current = self._authorized_keys.current()
        options = current.validate(self._keys.matched, address, address)
        return options is not None and options.get("environment") == self._conn.get_key_option(
            "environment"
        )

    def revoked(self, keys: asyncssh.SSHAuthorizedKeys) -> bool:
        """Whether `keys` (the key file now) no longer let this connection's user key reach
        what it uses: the key is gone, its role changed, or its projects leave out one of
        `used`. Control-plane keys and connections not logged in yet: never."""
        if self._conn is None or self._keys.matched is None or not self.by_user():
            return False
        peer = self._conn.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        options = keys.validate(self._keys.matched, address, address)
        environment = None if options is None else options.get("environment")
        if not isinstance(environment, dict) or environment.get(ROLE_VARIABLE) != USER_ROLE:
            return True
        projects = key_projects(environment)
        return projects is not None and any(p not in projects for p in self.used)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> bool | Awaitable[asyncssh.SSHTCPSession[bytes]] | StreamHandler:
        assert self._conn is not None
        environment = self._conn.get_key_option("environment")
        by_user = self.by_user()
        if by_user and not self.still_authorized():
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, REVOKED_MESSAGE
            )
        projects = key_projects(environment)
        if by_user and self._jobs is not None and dest_host in LOOPBACK_NAMES:
            special = self._job_channel(dest_port, projects, *self._jobs)
            if special is not None:
                return special
        in_projects = projects is None or (
            self._port_project is not None and self._port_project(dest_port) in projects
        )
        allowed = is_forward_allowed(dest_host, dest_port, self._policy, by_user=by_user)
        if allowed and in_projects:
            if by_user:
                self.used.add(self._port_project(dest_port) if self._port_project else None)
            owner = self._watch.watched_owner(dest_port) if self._watch else None
            watched = (owner, self._watch.activity) if self._watch and owner else None
            if self._port_check is None and watched is None:
                return True
            # a job's port: only while the job itself holds it (`agent.server.portholders`)
            return checked_forward(dest_host, dest_port, self._port_check, watched)
        raise asyncssh.ChannelOpenError(
            asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
            f"forwarding to {dest_host}:{dest_port} is not allowed "
            "(only 127.0.0.1 ports of the agent and of running jobs)",
        )

    def _job_channel(
        self, port: int, projects: frozenset[str] | None, access: JobAccess, links: JumpLinks
    ) -> Awaitable[asyncssh.SSHTCPSession[bytes]] | StreamHandler | None:
        """dstack's attach: the hop to this server for a job, or the job's log stream."""
        assert self._conn is not None
        if port == links.target[1]:
            name = str(self._conn.get_extra_info("username") or "")
            link = access.find(name, projects)
            if link is None or (projects is not None and link.project not in projects):
                raise asyncssh.ChannelOpenError(
                    asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, f"no job named {name!r} here"
                )
            self.used.add(link.project)
            return links.open(link)
        link = self.link
        if port != RUNNER_HTTP_PORT or link is None:
            return None
        if projects is not None and link.project not in projects:
            return None  # refused below, as any port of a job outside the key's projects
        self.used.add(link.project)
        read, job_id = access.log(link.job_id), link.job_id
        return lambda reader, writer: serve_logs_ws(
            reader, writer, read, ended_at=lambda: access.ended_at(job_id)
        )

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return False


def _session_handler(
    sessions: SessionResolver, watch: ActivityWatch | None
) -> Callable[[asyncssh.SSHServerProcess[bytes]], Awaitable[None]]:
    """The server's session handler: the job a session's user name means, among the key's
    projects (an inner connection of dstack's attach: its job), counted as activity."""

    async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
        conn = process.get_extra_info("connection")
        environment = conn.get_key_option("environment") if conn is not None else None
        limited = limited_lookup(sessions, key_projects(environment))
        owner = conn.get_owner() if conn is not None else None
        if isinstance(owner, _AgentSSHServer) and owner.by_user() and not owner.still_authorized():
            process.stderr.write(f"{REVOKED_MESSAGE}\n".encode())
            process.exit(1)
            return
        if isinstance(owner, _AgentSSHServer):
            if owner.link is not None:
                limited = linked_lookup(limited, owner.link.job_id)
            limited = noting_lookup(limited, owner.used)
        if watch is None:
            await serve_session(process, limited)
            return

        async def resolve(name: str) -> JobSession | None:
            job = await limited(name)
            if job is not None:
                watch.activity.opened(process, job.job_id)
            return job

        try:
            await serve_session(process, resolve)
        finally:
            watch.activity.closed(process)

    return handle


async def start_ssh_server(
    options: SSHServerOptions,
    *,
    policy: ForwardPolicy,
    sessions: SessionResolver,
    watch: ActivityWatch | None = None,
    port_project: PortProject | None = None,
    access: JobAccess | None = None,
    key_check_interval: float = KEY_CHECK_INTERVAL,
    port_check: PortCheck | None = None,
) -> asyncssh.SSHAcceptor:
    """Listen for SSH on options.host:options.port; close the returned acceptor to stop.
    With `access`, users can reach jobs as dstack's attach does (`agent.ssh.jump`). While
    it listens, the key file is read every `key_check_interval` seconds and, when it
    changed, connections whose key it no longer allows are closed (`agent.ssh.keywatch`).
    With `port_check`, a forward to a job's port opens only while the job holds it."""
    jobs = None if access is None else (access, JumpLinks(options.host, options.port))
    ensure_host_key(options.host_key)
    keys = KeyFile(options.authorized_keys)
    connections = OpenConnections(keys)
    if not options.authorized_keys.exists():
        options.authorized_keys.parent.mkdir(parents=True, exist_ok=True)
        options.authorized_keys.touch(mode=0o600)

    acceptor: asyncssh.SSHAcceptor = await asyncssh.listen(
        options.host,
        options.port,
        server_factory=lambda: _AgentSSHServer(
            keys, policy, watch, port_project, jobs, connections, port_check
        ),
        server_host_keys=[str(options.host_key)],
        process_factory=_session_handler(sessions, watch),
        encoding=None,
        allow_scp=False,
        agent_forwarding=False,
        x11_forwarding=False,
        keepalive_interval=15.0,
        keepalive_count_max=3,
        config=None,
    )
    if jobs is not None:  # the port the hop to this server goes to (options.port may be 0)
        jobs[1].target = (jobs[1].target[0], acceptor.get_port())
    connections.watcher = asyncio.create_task(
        watch_key_file(connections, acceptor, key_check_interval), name="ssh-key-watch"
    )
    return acceptor


async def serve_forever(acceptor: asyncssh.SSHAcceptor) -> None:
    """Wait until the acceptor is closed (for composition with the HTTP server)."""
    try:
        await acceptor.wait_closed()
    except asyncio.CancelledError:
        acceptor.close()
        raise
