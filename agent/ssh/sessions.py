"""User sessions on the agent's SSH server: ``ssh <run>`` lands in the job's environment.

The SSH user name selects the job (its id or its run name; the agent resolves it through a
`SessionResolver` given by the job manager, among the jobs of the key's projects). A
process-executor job gets a shell in its working directory with its environment; a Docker
job gets ``docker exec`` into its container, its processes marked ``DOCKYARD_SESSION`` so
that they end with the session's channel: a killed ``docker exec`` client leaves its
command running in the container. With a terminal (``ssh -t``, or an interactive
``ssh`` without a command) the command runs on a pseudo-terminal that follows the client's
window size; without one, stdin/stdout/stderr are plain pipes and the exit status is passed
back."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import secrets
import shlex
import shutil
import signal
import struct
import termios
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import asyncssh

from agent.server.sandbox import CLEAN_PATH

CHUNK = 65536
HOST_ENV_KEYS = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "SHELL")
SESSION_MARK = "DOCKYARD_SESSION"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
REAP_TIMEOUT = 30.0


@dataclass(frozen=True)
class JobSession:
    """Where a user session for one job runs."""

    job_id: str
    executor: Literal["process", "docker"]
    working_dir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    container_id: str | None = None
    owner: tuple[int, int] | None = None  # (uid, gid) a process job's session runs as
    project: str | None = None  # the job's `dockyard.project` label (users' keys may be limited)
    # a sandboxed process job's: the argv prefix that enters its sandbox as its identity
    # (run with a clean environment; the session's own is sourced after the switch)
    enter: tuple[str, ...] = ()


SessionResolver = Callable[[str, frozenset[str] | None], Awaitable[JobSession | None]]
"""`(user name, the key's projects or None: any)`: the job a session's user name means,
looked up among the jobs of those projects only (a run name another project also uses
must find the key's own job)."""
JobLookup = Callable[[str], Awaitable[JobSession | None]]
"""The job of a session's user name, for one connection (its key's projects bound)."""


def limited_lookup(sessions: SessionResolver, projects: frozenset[str] | None) -> JobLookup:
    """For a key limited to `projects`: a run name is looked up among their jobs, and a job
    of another project (named by id) is none."""

    async def resolve(name: str) -> JobSession | None:
        job = await sessions(name, projects)
        if job is None or projects is None or job.project in projects:
            return job
        return None

    return resolve


def linked_lookup(sessions: JobLookup, job_id: str) -> JobLookup:
    """An inner connection of dstack's attach: its sessions are its job's, whatever name."""

    async def resolve(name: str) -> JobSession | None:
        return await sessions(job_id)

    return resolve


def noting_lookup(sessions: JobLookup, used: set[str | None]) -> JobLookup:
    """Each job found adds its project to `used` (what the connection reaches:
    `agent.ssh.keywatch` closes it when its key loses one of them)."""

    async def resolve(name: str) -> JobSession | None:
        job = await sessions(name)
        if job is not None:
            used.add(job.project)
        return job

    return resolve


def _host_shell() -> str:
    return shutil.which("bash") or "/bin/sh"


def build_session_argv(
    job: JobSession, command: str | None, *, term: str | None = None, mark: str | None = None
) -> list[str]:
    """Pure: the argv that gives a session in `job` (a shell, or `command` in a shell);
    `term` is the client's terminal type when it asked for one; `mark` is set in a
    container session's environment (`reap_script`)."""
    if job.executor == "docker":
        if not job.container_id:
            raise ValueError(f"job {job.job_id} has no container yet")
        argv = ["docker", "exec", "-i"]
        if mark:
            argv += ["-e", f"{SESSION_MARK}={mark}"]
        if term:
            argv += ["-t", "-e", f"TERM={term}"]
        if job.working_dir:
            argv += ["-w", job.working_dir]
        argv += [job.container_id, "/bin/sh"]
        return [*argv, "-c", command] if command else argv
    shell = _host_shell()
    return [shell, "-c", command] if command else [shell]


def reap_script(mark: str) -> str:
    """Pure: a shell script that kills, inside a container, every process whose environment
    carries the session's mark (the NULs between variables are dropped by the command
    substitution, so the mark is matched as a substring: it is of fixed length)."""
    found = f'case "$(cat "$p/environ" 2>/dev/null)" in *{SESSION_MARK}={mark}*)'
    return f'for p in /proc/[0-9]*; do {found} kill -9 "${{p#/proc/}}";; esac; done 2>/dev/null'


def build_session_env(job: JobSession, term: str | None) -> dict[str, str]:
    """The environment of a session: a few host variables, then the job's, then TERM."""
    env = {key: os.environ[key] for key in HOST_ENV_KEYS if key in os.environ}
    if job.executor == "process":
        env.update(job.env)
    if term:
        env["TERM"] = term
    return env


async def serve_session(process: asyncssh.SSHServerProcess[bytes], resolve: JobLookup) -> None:
    """Run one SSH session request to the end and send back its exit status."""
    username = str(process.get_extra_info("username") or "")
    job = await resolve(username)
    if job is None:
        message = f"no job named {username!r} on this host; use `ssh <run name>`\n"
        process.stderr.write(message.encode())
        process.exit(1)
        return
    if process.subsystem:
        process.stderr.write(f"subsystem {process.subsystem!r} is not offered\n".encode())
        process.exit(1)
        return
    term = process.get_terminal_type()
    mark = secrets.token_hex(8) if job.executor == "docker" else None
    try:
        argv = build_session_argv(job, process.command, term=term, mark=mark)
        env = build_session_env(job, term)
        cwd = job.working_dir if job.executor == "process" else None
        owner = job.owner if job.executor == "process" else None
        reap = _container_reaper(job, mark, env)
        with _entered(job, argv, env) as (argv, env, fds):
            if fds:
                cwd = None  # the sandbox's `--wd`: the path may exist only inside it
            if term is not None:
                code = await _run_on_pty(process, argv, env, cwd, owner, reap, fds)
            else:
                code = await _run_on_pipes(process, argv, env, cwd, owner, reap, fds)
    except (OSError, ValueError) as exc:
        process.stderr.write(f"cannot start a session in job {job.job_id}: {exc}\n".encode())
        code = 127
    process.exit(code)


ENTERED = '. "/dev/fd/$1" || exit 126; cd -- "$2" || exit 126; shift 2; exec "$@"'


@contextlib.contextmanager
def _entered(
    job: JobSession, argv: list[str], env: dict[str, str]
) -> Iterator[tuple[list[str], dict[str, str], tuple[int, ...]]]:
    """For a sandboxed job: the argv that enters its sandbox, a clean environment, and the
    session's own one in a memfd (sourced after the switch: nothing the job's spec names
    reaches the root steps, no secret shows in an argv); else all as given."""
    if not job.enter:
        yield argv, env, ()
        return
    fd = os.memfd_create("dockyard-session-env", os.MFD_CLOEXEC)
    try:
        lines = [f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if _NAME.fullmatch(k)]
        os.write(fd, "".join(lines).encode())
        os.lseek(fd, 0, os.SEEK_SET)
        entered = [*job.enter, "/bin/sh", "-c", ENTERED, "dockyard-session", str(fd)]
        entered += [job.working_dir or "/", *argv]
        yield entered, {"PATH": CLEAN_PATH}, (fd,)
    finally:
        os.close(fd)


async def _pump_to_channel(source: asyncio.StreamReader, sink: asyncssh.SSHWriter[bytes]) -> None:
    while data := await source.read(CHUNK):
        sink.write(data)
        await sink.drain()


async def _pump_stdin(
    process: asyncssh.SSHServerProcess[bytes], sink: asyncio.StreamWriter
) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        while True:
            try:
                data = await process.stdin.read(CHUNK)
            except asyncssh.TerminalSizeChanged:
                continue
            if not data:
                break
            sink.write(data)
            await sink.drain()
        sink.close()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGHUP)
        os.killpg(pid, signal.SIGKILL)


Reaper = Callable[[], Awaitable[None]]
"""Ends what a session started where killing its process group does not reach."""


def _container_reaper(job: JobSession, mark: str | None, env: dict[str, str]) -> Reaper | None:
    """For a container session: kill, in the container, what carries the session's mark."""
    container_id = job.container_id
    if mark is None or not container_id:
        return None

    async def reap() -> None:
        argv = ["docker", "exec", "-u", "0", container_id, "/bin/sh", "-c", reap_script(mark)]
        null = asyncio.subprocess.DEVNULL
        sub = await asyncio.create_subprocess_exec(
            *argv, stdin=null, stdout=null, stderr=null, env=env
        )
        try:
            async with asyncio.timeout(REAP_TIMEOUT):
                await sub.wait()
        except TimeoutError:
            sub.kill()

    return reap


async def _hang_up_with_channel(
    process: asyncssh.SSHServerProcess[bytes],
    sub: asyncio.subprocess.Process,
    reap: Reaper | None,
) -> None:
    """The session's command ends when its channel closes (the client left, or the agent
    closed the connection: `agent.ssh.keywatch`), not only when it exits by itself. In a
    container the command is reaped first: its `docker exec` client then ends with it."""
    await process.channel.wait_closed()
    if sub.returncode is None and reap is not None:
        with contextlib.suppress(OSError):
            await reap()
    if sub.returncode is None:
        _kill_group(sub.pid)


async def _run_on_pipes(
    process: asyncssh.SSHServerProcess[bytes],
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    owner: tuple[int, int] | None,
    reap: Reaper | None = None,
    fds: tuple[int, ...] = (),
) -> int:
    sub = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        pass_fds=fds,
        **_as_owner(None if fds else owner),
    )
    assert sub.stdin is not None and sub.stdout is not None and sub.stderr is not None
    feeder = asyncio.create_task(_pump_stdin(process, sub.stdin))
    hang_up = asyncio.create_task(_hang_up_with_channel(process, sub, reap))
    try:
        await asyncio.gather(
            _pump_to_channel(sub.stdout, process.stdout),
            _pump_to_channel(sub.stderr, process.stderr),
        )
        return await sub.wait()
    finally:
        feeder.cancel()
        hang_up.cancel()
        if sub.returncode is None:
            _kill_group(sub.pid)


def _as_owner(owner: tuple[int, int] | None, *, tty: bool = False) -> dict[str, Any]:
    """Popen's `preexec_fn` that takes the terminal (`tty`) and runs a session as the job's
    account (none: the agent's). Not Popen's user/group: uvloop's loop refuses them."""
    if owner is None and not tty:
        return {}

    def setup() -> None:  # runs in the child, after setsid
        if tty:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        if owner is not None:
            os.setgroups([])
            os.setgid(owner[1])
            os.setuid(owner[0])

    return {"preexec_fn": setup}


def _set_winsize(fd: int, size: tuple[int, int, int, int]) -> None:
    width, height, pixwidth, pixheight = size
    if width and height:
        packed = struct.pack("HHHH", height, width, pixwidth, pixheight)
        fcntl.ioctl(fd, termios.TIOCSWINSZ, packed)


async def _run_on_pty(
    process: asyncssh.SSHServerProcess[bytes],
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    owner: tuple[int, int] | None,
    reap: Reaper | None = None,
    fds: tuple[int, ...] = (),
) -> int:
    master, slave = os.openpty()
    if owner is not None:  # the job's account must be able to use its terminal
        os.fchown(slave, owner[0], -1)
    _set_winsize(master, process.term_size)
    try:
        sub = await asyncio.create_subprocess_exec(
            *argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
            pass_fds=fds,
            **_as_owner(None if fds else owner, tty=True),
        )
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    feeder = asyncio.create_task(_feed_pty(process, master))
    hang_up = asyncio.create_task(_hang_up_with_channel(process, sub, reap))
    try:
        await _drain_pty(master, process.stdout)
        return await sub.wait()
    finally:
        feeder.cancel()
        hang_up.cancel()
        os.close(master)
        if sub.returncode is None:
            _kill_group(sub.pid)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _drain_pty(master: int, sink: asyncssh.SSHWriter[bytes]) -> None:
    """Copy the pty's output to the channel until the terminal closes (EIO)."""
    loop = asyncio.get_running_loop()
    while True:
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(master, _resolve, ready)
        try:
            await ready
        finally:
            loop.remove_reader(master)
        try:
            data = os.read(master, CHUNK)
        except BlockingIOError:
            continue
        except OSError:  # EIO: every process holding the terminal has exited
            return
        if not data:
            return
        sink.write(data)
        await sink.drain()


async def _write_fd(fd: int, data: bytes) -> None:
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(fd, _resolve, ready)
            try:
                await ready
            finally:
                loop.remove_writer(fd)
            continue
        view = view[written:]


async def _feed_pty(process: asyncssh.SSHServerProcess[bytes], master: int) -> None:
    with contextlib.suppress(OSError):
        while True:
            try:
                data = await process.stdin.read(CHUNK)
            except asyncssh.TerminalSizeChanged as change:
                _set_winsize(
                    master, (change.width, change.height, change.pixwidth, change.pixheight)
                )
                continue
            if not data:
                await _write_fd(master, b"\x04")  # EOF from the client: ^D to the shell
                return
            await _write_fd(master, data)
