"""Deploying the agent to an SSH host: probe, install the bundle, start it, tunnel to it.

``deploy_agent`` is idempotent and runs over the host's pooled SSH connection (the same
one the tunnel uses afterwards):

1. probe (one remote shell round trip): Pythons on PATH, the installed bundle id, the
   agent's pid file, free disk space;
2. pick a Python ≥ 3.11 whose ABI matches the bundle (`agent.bundle`);
3. if the installed bundle is ours, its agent was started with the same `AgentOptions` (job
   isolation, default image, job user…: their digest is kept in ``agent.options``) and it
   answers with our version: done;
4. otherwise stop the old agent (jobs are detached and survive it), upload the bundle by
   SFTP, unpack it next to the old one, switch the ``current`` link, start the agent
   detached (``setsid nohup``), and wait until its healthcheck answers through the tunnel.

Every failure is a `DeployError` naming the host and one `DeployFailure`: auth refused,
unreachable, no Python, disk full, port in use, install or start failed; with what to do.

Layout on the host (``remote_dir``, default ``~/.dockyard/agent``)::

    current -> bundle-<id>/site/…    the agent code and its dependencies
    data/                            the agent's data dir (jobs, logs)
    agent.pid, agent.log             the running agent
    agent.options                    the digest of the options it was started with
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import asyncssh

from agent.bundle import Bundle
from agent.client import AgentClient, AgentError
from agent.protocol import SERVICE_NAME
from agent.remote_scripts import (
    AgentOptions,
    DeployError,
    DeployFailure,
    Probe,
    choose_python,
    classify_output,
    is_alive_test,
    parse_probe,
    probe_script,
    sandbox_script,
    start_script,
)
from agent.tunnel import AgentUnreachable, SSHTarget, TunnelPool, UnreachableKind

__all__ = [
    "AgentOptions",
    "DeployError",
    "DeployFailure",
    "DeployedAgent",
    "deploy_agent",
    "install_bundle",
    "session_port_for",
    "stop_agent",
    "write_authorized_keys",
]

DEFAULT_REMOTE_DIR = ".dockyard/agent"
DEFAULT_AGENT_PORT = 10998
SESSION_PORT_OFFSET = -1
"""A server-deployed agent's SSH server for users listens one below its agent port (10997
by default; never dstack-runner's 10999, which the attach forwards inside a job)."""
ROLLBACK_WAIT = 30.0
"""Seconds the agent started again with its previous options is given to answer."""


@dataclass(frozen=True)
class DeployedAgent:
    target: SSHTarget
    agent_port: int
    python: str
    bundle_id: str
    reused: bool
    session_port: int | None = None  # the agent's SSH server for users (via proxy jump)


def session_port_for(agent_port: int) -> int:
    """The SSH session port of an agent the server deployed with `agent_port` (a rule, so
    it needs no column: docs/fleets.md)."""
    return agent_port + SESSION_PORT_OFFSET


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(line for line in text.strip().splitlines()[-lines:] if line.strip())


async def _run(
    conn: asyncssh.SSHClientConnection, host: str, command: str, failure: DeployFailure
) -> str:
    result = await conn.run(command, check=False)
    stdout, stderr = str(result.stdout or ""), str(result.stderr or "")
    if result.exit_status != 0:
        detail = _tail(stderr or stdout) or f"exit status {result.exit_status}"
        raise DeployError(host, classify_output(stderr + stdout) or failure, detail)
    return stdout


async def _connect(pool: TunnelPool, target: SSHTarget) -> asyncssh.SSHClientConnection:
    try:
        return await pool.connection(target)
    except AgentUnreachable as exc:
        if exc.kind is UnreachableKind.auth_refused:
            detail = (
                f"the key {target.identity_file or '(default)'} was refused for user "
                f"{target.user}; add its public key to ~{target.user}/.ssh/authorized_keys"
            )
            raise DeployError(str(target), DeployFailure.auth_refused, detail) from exc
        raise DeployError(str(target), DeployFailure.unreachable, exc.detail) from exc


async def _upload(conn: asyncssh.SSHClientConnection, source: Path, dest: str) -> None:
    """Copy a file to the host by SFTP, or through ``cat`` where sshd offers no SFTP."""
    try:
        sftp = await conn.start_sftp_client()
    except (asyncssh.ChannelOpenError, asyncssh.SFTPError):
        command = f"cat > {shlex.quote(dest)}"
        result = await conn.run(command, stdin=str(source), encoding=None, check=False)
        if result.exit_status != 0:
            stderr = result.stderr or b""
            errors = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
            raise OSError(_tail(errors) or "cat failed") from None
        return
    async with sftp:
        await sftp.put(str(source), dest)


async def _install(
    conn: asyncssh.SSHClientConnection, host: str, bundle: Bundle, remote_dir: str, probe: Probe
) -> None:
    packed = bundle.path.stat().st_size
    need_kib = (packed + bundle.unpacked_bytes) // 1024 + 10 * 1024
    if probe.free_kib is not None and probe.free_kib < need_kib:
        free_mib, need_mib = probe.free_kib // 1024, need_kib // 1024
        detail = f"{free_mib} MiB free in {remote_dir}, the agent needs {need_mib} MiB"
        raise DeployError(host, DeployFailure.disk_full, detail)
    name = f"bundle-{bundle.bundle_id}"
    upload = f"{remote_dir}/{name}.tar.gz"
    try:
        await _upload(conn, bundle.path, upload)
    except (OSError, asyncssh.Error) as exc:
        await _run(conn, host, f"rm -f {shlex.quote(upload)}", DeployFailure.install_failed)
        failure = DeployFailure.install_failed
        if probe.free_kib is not None and probe.free_kib * 1024 < packed * 2:
            failure = DeployFailure.disk_full
        raise DeployError(host, failure, f"uploading the agent bundle: {exc}") from exc
    d, n = shlex.quote(remote_dir), shlex.quote(name)
    script = (
        f"cd {d} && rm -rf {n}.tmp && mkdir {n}.tmp && "
        f"{{ tar -xzf {n}.tar.gz -C {n}.tmp || {{ rm -rf {n}.tmp {n}.tar.gz; exit 1; }}; }} && "
        f"rm -f {n}.tar.gz && rm -rf {n} && mv {n}.tmp {n} && ln -sfn {n} current && "
        f'for b in bundle-*; do [ "$b" = {n} ] || rm -rf "$b"; done'
    )
    await _run(conn, host, script, DeployFailure.install_failed)


async def _stop(
    conn: asyncssh.SSHClientConnection, host: str, remote_dir: str, pid: int | None
) -> None:
    if pid is None:
        return
    script = (
        f"kill {pid} 2>/dev/null; for i in $(seq 100); do {is_alive_test(str(pid))} || break; "
        f"sleep 0.1; done; {is_alive_test(str(pid))} && kill -9 {pid}; "
        f"rm -f {shlex.quote(remote_dir)}/agent.pid; true"
    )
    await _run(conn, host, script, DeployFailure.start_failed)


async def _check_port_free(client: AgentClient, host: str, port: int) -> None:
    try:
        health = await client.healthcheck()
    except AgentUnreachable as exc:
        if exc.kind is UnreachableKind.channel_refused:
            return  # nothing listens: free
        detail = f"something on 127.0.0.1:{port} accepts connections but is not an agent"
        raise DeployError(host, DeployFailure.port_in_use, detail) from exc
    except AgentError as exc:
        detail = f"127.0.0.1:{port} answers HTTP but is not an agent ({exc.status_code})"
        raise DeployError(host, DeployFailure.port_in_use, detail) from exc
    what = "another dockyard agent" if health.service == SERVICE_NAME else health.service
    detail = f"127.0.0.1:{port} is taken by {what}; choose another agent port for this fleet"
    raise DeployError(host, DeployFailure.port_in_use, detail)


async def _is_current(client: AgentClient, version: str) -> bool:
    try:
        health = await client.healthcheck()
    except (AgentUnreachable, AgentError):
        return False
    return health.service == SERVICE_NAME and health.version == version


async def _start_and_wait(
    conn: asyncssh.SSHClientConnection,
    client: AgentClient,
    host: str,
    *,
    remote_dir: str,
    python: str,
    port: int,
    session_port: int | None,
    options: AgentOptions,
    version: str,
    wait_for: float,
) -> None:
    script = start_script(remote_dir, python, port, session_port, options)
    output = await _run(conn, host, script, DeployFailure.start_failed)
    pid = int(output.split()[-1])
    deadline = time.monotonic() + wait_for
    while time.monotonic() < deadline:
        if await _is_current(client, version):
            return
        alive = await conn.run(is_alive_test(str(pid)), check=False)
        if alive.exit_status != 0:
            log = await conn.run(f"tail -n 20 {shlex.quote(remote_dir)}/agent.log", check=False)
            text = str(log.stdout or "")
            failure = classify_output(text) or DeployFailure.start_failed
            raise DeployError(host, failure, f"the agent exited: {_tail(text) or 'no output'}")
        await asyncio.sleep(0.2)
    raise DeployError(
        host, DeployFailure.start_failed, f"no healthcheck answer in {wait_for:.0f} s"
    )


def _previous_options(probe: Probe) -> AgentOptions | None:
    """The options the host's running agent was started with (None: unknown, or not ours)."""
    if not probe.agent_alive or not probe.options_args:
        return None
    try:
        options = AgentOptions.from_args(probe.options_args)
    except ValueError:
        return None
    return options if options.digest() == probe.options else None


async def _start_or_roll_back(
    conn: asyncssh.SSHClientConnection,
    host: str,
    remote_dir: str,
    start: Callable[..., Awaitable[None]],
    options: AgentOptions,
    previous: AgentOptions | None,
    start_timeout: float,
) -> None:
    """Start the agent with `options`; if it does not start and it ran with `previous`
    options before, start it again with those, so the host keeps an agent, and raise the
    failure saying so."""
    try:
        await start(options=options, wait_for=start_timeout)
    except DeployError as failed:
        if previous is None or previous == options:
            raise
        wait_for = max(start_timeout, ROLLBACK_WAIT)
        again = functools.partial(start, options=previous, wait_for=wait_for)
        await _roll_back(conn, host, remote_dir, failed, again)


async def _roll_back(
    conn: asyncssh.SSHClientConnection,
    host: str,
    remote_dir: str,
    failed: DeployError,
    start_previous: Callable[[], Awaitable[None]],
) -> NoReturn:
    """The agent did not start with the new options: start it again with those it ran with;
    raise `failed`, saying what became of the host."""
    probe = parse_probe(
        await _run(conn, host, probe_script(remote_dir), DeployFailure.start_failed)
    )
    if probe.agent_alive:  # started, but did not answer in time
        await _stop(conn, host, remote_dir, probe.agent_pid)
    try:
        await start_previous()
    except DeployError as again:
        detail = f"{failed.detail}; starting it again with its previous options failed too: "
        raise DeployError(host, failed.failure, detail + again.detail) from failed
    detail = f"{failed.detail}; the agent runs again with its previous options"
    raise DeployError(host, failed.failure, detail) from failed


async def _write_authorized_keys(
    conn: asyncssh.SSHClientConnection, host: str, remote_dir: str, text: str
) -> None:
    d = shlex.quote(remote_dir)
    command = (
        f"mkdir -p {d} && cd {d} && umask 077 && cat > keys.tmp && mv keys.tmp authorized_keys"
    )
    await _run_with_input(conn, host, command, text)


async def _keep_key_line(
    conn: asyncssh.SSHClientConnection, host: str, remote_dir: str, line: str
) -> None:
    """`line` is in the key file (created if missing); its other lines stay."""
    if not line.strip():
        return
    d, blob = shlex.quote(remote_dir), shlex.quote(line.split()[1])
    command = (
        f"mkdir -p {d} && cd {d} && umask 077 && touch authorized_keys && "
        f"{{ grep -qF {blob} authorized_keys || cat >> authorized_keys; }}"
    )
    await _run_with_input(conn, host, command, line)


async def _run_with_input(
    conn: asyncssh.SSHClientConnection, host: str, command: str, text: str
) -> None:
    result = await conn.run(command, input=text, check=False)
    if result.exit_status != 0:
        detail = _tail(str(result.stderr or "")) or "cannot write authorized_keys"
        raise DeployError(host, classify_output(detail) or DeployFailure.install_failed, detail)


async def write_authorized_keys(
    pool: TunnelPool, target: SSHTarget, text: str, remote_dir: str = DEFAULT_REMOTE_DIR
) -> None:
    """Replace the key file of the agent SSH server on `target` by `text` (the agent reads
    it on every connection: no restart). Used to follow who may reach the host's jobs."""
    remote_dir = remote_dir.removeprefix("~/")
    conn = await _connect(pool, target)
    await _write_authorized_keys(conn, str(target), remote_dir, text)


def _server_key_line(target: SSHTarget) -> str:
    if not target.identity_file:
        return ""
    key = asyncssh.read_private_key(target.identity_file)
    return key.export_public_key().decode().strip() + "\n"


async def deploy_agent(
    pool: TunnelPool,
    target: SSHTarget,
    bundle: Bundle,
    *,
    agent_port: int = DEFAULT_AGENT_PORT,
    remote_dir: str = DEFAULT_REMOTE_DIR,
    session_port: int | None = None,
    authorized_keys: str | None = None,
    options: AgentOptions | None = None,
    start_timeout: float = 30.0,
) -> DeployedAgent:
    """Make `target` run the agent of `bundle` on 127.0.0.1:agent_port (idempotent).

    `remote_dir` is relative to the login user's home unless absolute (``~/`` allowed).
    With `session_port`, the agent also runs its SSH server on 127.0.0.1:session_port of the
    host, for ``ssh <run>`` through the host's sshd as a jump host; `authorized_keys` is
    its whole key file, rewritten (default: the file is kept, with the server's key added if
    missing; `write_authorized_keys` replaces it later). `options`
    are the agent's job flags (default: the agent's defaults, passed explicitly); an agent
    started with others is replaced; if the new one does not start, the agent is started
    again with the options it ran with (only the options changed) and the `DeployError`
    says so.
    """
    options = options or AgentOptions()
    remote_dir = remote_dir.removeprefix("~/")
    host = str(target)
    conn = await _connect(pool, target)
    probe = parse_probe(await _run(conn, host, probe_script(remote_dir), DeployFailure.unreachable))
    python = choose_python(host, probe, bundle)
    if session_port and authorized_keys is not None:
        await _write_authorized_keys(conn, host, remote_dir, authorized_keys)
    elif session_port:
        await _keep_key_line(conn, host, remote_dir, _server_key_line(target))
    deployed = DeployedAgent(
        target, agent_port, python.executable, bundle.bundle_id, False, session_port
    )
    client = AgentClient.over_tunnel(pool, target, agent_port, timeout=5.0)
    try:
        current = probe.bundle_id == bundle.bundle_id
        unchanged = (
            current
            and probe.session_port == session_port
            and probe.options == options.digest()
            and probe.agent_alive
        )
        if unchanged and await _is_current(client, bundle.version):
            return dataclasses.replace(deployed, reused=True)
        if probe.agent_alive:
            await _stop(conn, host, remote_dir, probe.agent_pid)
        await _check_port_free(client, host, agent_port)
        if not current:
            await _install(conn, host, bundle, remote_dir, probe)
        await _run(conn, host, sandbox_script(), DeployFailure.install_failed)
        start = functools.partial(
            _start_and_wait,
            conn,
            client,
            host,
            remote_dir=remote_dir,
            python=python.executable,
            port=agent_port,
            session_port=session_port,
            version=bundle.version,
        )
        previous = _previous_options(probe) if current else None
        await _start_or_roll_back(conn, host, remote_dir, start, options, previous, start_timeout)
    finally:
        await client.aclose()
    return deployed


async def install_bundle(
    pool: TunnelPool, target: SSHTarget, bundle: Bundle, remote_dir: str = DEFAULT_REMOTE_DIR
) -> str:
    """Put `bundle` under `remote_dir` on `target` (unless it is there already) without
    starting an agent; the Python able to run it. For hosts where something else starts
    the agent: a Slurm cluster's login node, whose compute nodes share its home directory
    and start the agent inside each allocation (`reconciler.engine.slurmengine`)."""
    remote_dir = remote_dir.removeprefix("~/")
    host = str(target)
    conn = await _connect(pool, target)
    probe = parse_probe(await _run(conn, host, probe_script(remote_dir), DeployFailure.unreachable))
    python = choose_python(host, probe, bundle)
    if probe.bundle_id != bundle.bundle_id:
        await _install(conn, host, bundle, remote_dir, probe)
    return python.executable


async def stop_agent(
    pool: TunnelPool, target: SSHTarget, remote_dir: str = DEFAULT_REMOTE_DIR
) -> None:
    """Stop the agent on `target` (its jobs are detached and keep running)."""
    remote_dir = remote_dir.removeprefix("~/")
    conn = await _connect(pool, target)
    probe = parse_probe(
        await _run(conn, str(target), probe_script(remote_dir), DeployFailure.unreachable)
    )
    if probe.agent_alive:
        await _stop(conn, str(target), remote_dir, probe.agent_pid)
