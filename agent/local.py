"""The local fleet: an agent on the server's own host, started on first use.

The embedded default needs no SSH host at all: `ensure_local_agent` starts
``python -m agent serve --ssh-port …`` as a detached process (its own session, so it outlives the
server and its jobs keep running across server restarts), with its data dir under the
server's data dir, a generated host key, and the server's public key in its
``authorized_keys``. The server then reaches it like any other agent: SSH to the agent's
embedded server, ``direct-tcpip`` to its HTTP port.

Idempotent: a state file (pid and ports) plus a healthcheck through the tunnel tell
whether the running agent can be reused; a dead one is started again, one of another version
or another build of the code (`agent_build`: a checkout that moved without a version bump) is
stopped and replaced. A file lock serialises concurrent callers (several server workers).

The agent's job options (`ensure_local_agent`'s keywords: the server's `--local-*`
settings) are its command line; `state.json` records them, and a running agent started with
other ones is replaced (its jobs stay and are re-adopted), so a changed setting takes effect
at the server's next start.

Layout (``<server data dir>/local-agent/``): ``data/`` (the agent's), ``host_key``,
``authorized_keys``, ``known_hosts`` (the host key pinned for the server), ``state.json``,
``agent.log`` (the running agent's output; the previous agents' are kept as ``agent.log.1``
… ``agent.log.<LOG_KEEP>``, each at most its last `LOG_KEEP_BYTES`), ``lock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from agent.client import AgentClient, AgentError
from agent.protocol import agent_build, agent_version
from agent.ssh.server import ensure_host_key
from agent.tunnel import AgentUnreachable, SSHTarget, TunnelPool

LOCAL_USER = "dockyard"
LOG_KEEP = 3
"""Previous agents' logs kept (``agent.log.1`` is the last one's)."""
LOG_KEEP_BYTES = 8 * 2**20
"""The most of a previous agent's log kept: its end (where a crash is told)."""


class LocalAgentError(Exception):
    """The local agent could not be started; the message has the reason and its log."""


@dataclass(frozen=True)
class LocalAgent:
    """How the server reaches the local agent."""

    target: SSHTarget
    agent_port: int
    ssh_port: int
    pid: int
    started: bool  # False: an agent already running was reused


@dataclass(frozen=True)
class LocalPaths:
    root: Path

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def host_key(self) -> Path:
        return self.root / "host_key"

    @property
    def authorized_keys(self) -> Path:
        return self.root / "authorized_keys"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def log(self) -> Path:
        return self.root / "agent.log"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"


def ensure_client_key(path: Path) -> Path:
    """The server's SSH key at `path`, generated (ed25519, 0600) if missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        key = asyncssh.generate_private_key("ssh-ed25519", comment="dockyard-server")
        key.write_private_key(str(path))
        path.chmod(0o600)
        key.write_public_key(str(path) + ".pub")
    return path


CONTROL_FROM = "127.0.0.1"
"""The only address the server's own key is accepted from on the local agent: the server
connects from there; its listener for other machines (`--attach-host`) connects from
127.0.0.2 (`reconciler.engine.sessionforwards`), so the server's key opens nothing there."""


def authorize_key(authorized_keys: Path, private_key: Path) -> None:
    """Make the public half of `private_key` the control line of `authorized_keys`,
    accepted from `CONTROL_FROM` only (a plain line of it, as older servers wrote, is
    replaced)."""
    public = asyncssh.read_private_key(str(private_key)).export_public_key().decode().strip()
    wanted = f'from="{CONTROL_FROM}" {public}'
    lines = authorized_keys.read_text().splitlines() if authorized_keys.exists() else []
    if wanted in lines:
        return
    blob = public.split()[1]
    kept = [line for line in lines if blob not in line.split()]
    authorized_keys.parent.mkdir(parents=True, exist_ok=True)
    temporary = authorized_keys.with_name(f".{authorized_keys.name}.control.{os.getpid()}")
    temporary.write_text("".join(f"{line}\n" for line in [*kept, wanted]))
    temporary.chmod(0o600)
    os.replace(temporary, authorized_keys)


def _has_exited(pid: int) -> bool:
    """Whether the agent we just spawned has ended. Not `_is_our_agent`: right after
    Popen, before exec, /proc shows the parent's command line and would read as "exited"."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (another server process started it)
        return not Path(f"/proc/{pid}").exists()
    return done == pid


def _is_our_agent(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"serve" in cmdline and bool({b"agent"} & set(cmdline))


PORT_ATTEMPTS = 3
PORT_TAKEN = "Address already in use"  # what the agent's log says when its port was taken


def _free_port(preferred: int | None) -> int:
    for candidate in (preferred or 0, 0):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise LocalAgentError("no free port on 127.0.0.1")  # pragma: no cover


LOCK_POLL = 0.05  # seconds between tries of a taken start lock


@contextlib.asynccontextmanager
async def _locked(path: Path) -> AsyncIterator[None]:
    # Waited for by polling, never by a thread blocked in flock: callers wait together
    # (one per project's local fleet: 50 sources are 50 of them), and blocked threads
    # would fill the loop's default executor while the holder needs one of its threads to
    # start the agent (to_thread below): every start stood still, the web app too.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a+b") as handle:
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(LOCK_POLL)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def local_paths(server_data_dir: Path) -> LocalPaths:
    """Where the local agent of the server with this data dir keeps its files."""
    return LocalPaths(server_data_dir / "local-agent")


def local_agent_ssh_port(server_data_dir: Path) -> int | None:
    """The SSH port of this server's local agent as last started, or None."""
    return _read_state(local_paths(server_data_dir)).get("ssh_port")


def _read_state(paths: LocalPaths) -> dict[str, int]:
    raw = _state_json(paths)
    keys = ("pid", "http_port", "ssh_port")
    return {k: int(v) for k, v in raw.items() if k in keys and isinstance(v, int | str)}


def _state_json(paths: LocalPaths) -> dict[str, object]:
    try:
        raw = json.loads(paths.state.read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _started_with(paths: LocalPaths) -> list[str] | None:
    """The job options the recorded agent was started with (None: not recorded)."""
    args = _state_json(paths).get("args")
    return [str(a) for a in args] if isinstance(args, list) else None


def rotate_log(log: Path, *, keep: int = LOG_KEEP, keep_bytes: int = LOG_KEEP_BYTES) -> None:
    """Before an agent starts: `log` becomes `log.1` (`log.1` becomes `log.2` …, the
    oldest beyond `keep` dropped), cut to its last `keep_bytes` bytes."""
    if not log.exists() or log.stat().st_size == 0:
        return
    for n in range(keep - 1, 0, -1):
        older = log.with_name(f"{log.name}.{n}")
        if older.exists():
            os.replace(older, log.with_name(f"{log.name}.{n + 1}"))
    previous = log.with_name(f"{log.name}.1")
    with open(log, "rb") as source:
        size = source.seek(0, os.SEEK_END)
        source.seek(max(0, size - keep_bytes))
        tail = source.read()
    temporary = log.with_name(f".{log.name}.rotating")
    temporary.write_bytes(tail)
    os.replace(temporary, previous)
    log.unlink()


def _target(paths: LocalPaths, ssh_port: int, client_key: Path) -> SSHTarget:
    """The agent's SSH endpoint, its host key pinned (the server generated that key)."""
    ensure_host_key(paths.host_key)
    public = asyncssh.read_private_key(str(paths.host_key)).export_public_key().decode()
    paths.known_hosts.write_text(f"[127.0.0.1]:{ssh_port} {public.strip()}\n")
    return SSHTarget(
        "127.0.0.1",
        ssh_port,
        user=LOCAL_USER,
        identity_file=str(client_key),
        known_hosts=str(paths.known_hosts),
    )


async def _healthy(
    pool: TunnelPool, target: SSHTarget, http_port: int, *, build: str | None = None
) -> bool:
    """The agent answers with our version (and, given, our `build` of the code)."""
    async with AgentClient.over_tunnel(pool, target, http_port, timeout=5.0) as client:
        try:
            health = await client.healthcheck()
        except (AgentUnreachable, AgentError):
            return False
    return health.version == agent_version() and build in (None, health.build)


def local_agent_alive(server_data_dir: Path) -> bool:
    """Whether the local agent last started for this server data dir still runs (it may
    be slow to answer: that alone is no reason to replace it)."""
    pid = _read_state(local_paths(server_data_dir)).get("pid")
    return pid is not None and _is_our_agent(pid)


def stop_local_agent(server_data_dir: Path, *, wait_for: float = 10.0) -> bool:
    """Stop the local agent if one runs (jobs are detached and keep running): SIGTERM
    (and SIGCONT, should it be stopped), SIGKILL after `wait_for` seconds."""
    pid = _read_state(local_paths(server_data_dir)).get("pid")
    if pid is None or not _is_our_agent(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + wait_for
    while time.monotonic() < deadline and _is_our_agent(pid):
        time.sleep(0.05)
    if _is_our_agent(pid):
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 5.0)
    return True


def _wait_gone(pid: int, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and _is_our_agent(pid):
        time.sleep(0.05)


def _data_dir_held(paths: LocalPaths) -> bool:
    """Whether an agent holds the data dir's lock (the agent's own `agent.lock`)."""
    paths.data_dir.mkdir(parents=True, exist_ok=True)
    with open(paths.data_dir / "agent.lock", "a+b") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return False


def _free_data_dir(paths: LocalPaths, within: float = 10.0) -> None:
    """Before starting an agent: wait for a stopping one to let go of the data dir, and
    stop an orphan (e.g. started by a server killed before it recorded the pid)."""
    deadline = time.monotonic() + within
    while _data_dir_held(paths) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not _data_dir_held(paths):
        return
    try:
        pid = int(json.loads((paths.data_dir / "agent.json").read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    if _is_our_agent(pid):
        os.kill(pid, signal.SIGTERM)
        _wait_gone(pid, within)
        if _is_our_agent(pid):
            os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 5.0)


def _spawn(
    paths: LocalPaths, python: str, http_port: int, ssh_port: int, job_args: list[str]
) -> int:
    argv = [
        python,
        "-m",
        "agent",
        "serve",
        "--data-dir",
        str(paths.data_dir),
        "--http-port",
        str(http_port),
        "--ssh-port",
        str(ssh_port),
        "--authorized-keys",
        str(paths.authorized_keys),
        "--host-key",
        str(paths.host_key),
        *job_args,  # who and where jobs run as (`_job_args`)
        # no job mounts the server's data dir; its local volumes live in volumes/
        "--protect",
        str(paths.root.parent),
        "--volume-dir",
        str(paths.root.parent / "volumes"),
    ]
    rotate_log(paths.log)  # a crashed agent's log is kept (`agent.log.1`)
    with open(paths.log, "ab") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=paths.root,
            start_new_session=True,
        )
    return process.pid


async def _wait_started(
    pool: TunnelPool,
    target: SSHTarget,
    http_port: int,
    pid: int,
    paths: LocalPaths,
    wait_for: float,
) -> None:
    deadline = time.monotonic() + wait_for
    while time.monotonic() < deadline:
        if await _healthy(pool, target, http_port):
            return
        if _has_exited(pid):
            tail = paths.log.read_text(errors="replace").strip().splitlines()[-5:]
            raise LocalAgentError(f"the local agent exited: {' | '.join(tail) or 'no output'}")
        await asyncio.sleep(0.1)
    raise LocalAgentError(
        f"the local agent did not answer within {wait_for:.0f} s (see {paths.log})"
    )


async def ensure_local_agent(
    server_data_dir: Path,
    client_key: Path,
    pool: TunnelPool,
    *,
    python: str = sys.executable,
    start_timeout: float = 30.0,
    job_user: str = "auto",
    job_isolation: str = "auto",
    default_image: str | None = None,
    volume_roots: str | None = None,
    unsandboxed: bool = False,
    allow_job_users: str | None = None,
    min_free_disk: int | None = None,
    work_root: str | None = None,
    pick_port: Callable[[int | None], int] = _free_port,
) -> LocalAgent:
    """The running local agent, started first if needed (idempotent, process-safe).

    `job_user` is the agent's `--job-user`: `auto` runs process jobs as `dockyard-job`
    when the server is root; `self` (tests whose jobs write to the test's files) as the
    agent's own user. `job_isolation` and `default_image` are its `--job-isolation` and
    `--default-image` (None: the agent's default, dstack's image); `volume_roots` (':'-
    separated) its `--volume-root`s (None: the agent's default, `mounts.DEFAULT_VOLUME_ROOTS`;
    its `--volume-dir`, the server's local volumes, is allowed either way); `unsandboxed`
    its `--unsandboxed-process-jobs` (a root server without bubblewrap); `allow_job_users`
    (comma-separated) its `--allow-job-user`s, what a process job's `user:` may name;
    `min_free_disk` (bytes) its `--min-free-disk` and `work_root` its `--work-root` (None:
    the agent's defaults, 1 GiB and /var/lib/dockyard-jobs/<agent>). A running agent started
    with other options is replaced. `pick_port(preferred)` answers a port free now (the
    preferred one when it is); an agent whose port was taken before it bound it is started
    again on other ports, up to `PORT_ATTEMPTS` times."""
    job_args = ["--job-user", job_user, "--job-isolation", job_isolation]
    if default_image:
        job_args += ["--default-image", default_image]
    for root in (volume_roots or "").split(":"):
        job_args += ["--volume-root", root] if root.strip() else []
    if unsandboxed:
        job_args.append("--unsandboxed-process-jobs")
    for name in (allow_job_users or "").split(","):
        job_args += ["--allow-job-user", name.strip()] if name.strip() else []
    if min_free_disk is not None:
        job_args += ["--min-free-disk", str(min_free_disk)]
    if work_root:
        job_args += ["--work-root", work_root]
    paths = local_paths(server_data_dir)
    paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    async with _locked(paths.root / "lock"):
        authorize_key(paths.authorized_keys, client_key)
        state = _read_state(paths)
        pid, http_port, ssh_port = state.get("pid"), state.get("http_port"), state.get("ssh_port")
        if pid and http_port and ssh_port and _is_our_agent(pid):
            target = _target(paths, ssh_port, client_key)
            same = _started_with(paths) == job_args
            if same and await _healthy(pool, target, http_port, build=agent_build()):
                return LocalAgent(target, http_port, ssh_port, pid, started=False)
            # its jobs stay: the next agent re-adopts them; a busy agent gets time to leave
            await asyncio.to_thread(stop_local_agent, server_data_dir, wait_for=30.0)
            pool.drop(target)
        await asyncio.to_thread(_free_data_dir, paths)
        for attempt in range(PORT_ATTEMPTS):
            # a port found free may be taken by another process before the agent binds it:
            # then the agent exits saying so, and it is started again on other ports
            http_port, ssh_port = pick_port(http_port), pick_port(ssh_port)
            if http_port == ssh_port:
                ssh_port = pick_port(None)
            pid = _spawn(paths, python, http_port, ssh_port, job_args)
            started = {"pid": pid, "http_port": http_port, "ssh_port": ssh_port}
            paths.state.write_text(json.dumps(started | {"args": job_args}))
            target = _target(paths, ssh_port, client_key)
            try:
                await _wait_started(pool, target, http_port, pid, paths, start_timeout)
            except LocalAgentError as error:
                if PORT_TAKEN not in str(error) or attempt + 1 == PORT_ATTEMPTS:
                    raise
                http_port = ssh_port = None
                continue
            return LocalAgent(target, http_port, ssh_port, pid, started=True)
        raise AssertionError("unreachable")  # pragma: no cover
