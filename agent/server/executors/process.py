"""The process executor: each job is a detached process group in its own working directory.

For hosts without a Docker engine, and the embedded default on a laptop. A job runs as::

    [sandbox and switch] /bin/sh -c WRAPPER dockyard-job <shell> "<cmd1> && ..." \\
        DIR ENV_FD [FILES_FD]   0>exit_code

started with ``setsid`` (``start_new_session``), so it leads a new session and process
group that outlives the agent. A root agent first enters the job's sandbox and identity
(``agent.server.sandbox``: bubblewrap, then setpriv to the job's own uid), or, without a
sandbox (``--unsandboxed-process-jobs``), only switches to the job account; every step up to
the wrapper runs with a fixed, clean environment (``clean_environment``), so nothing the
spec names (``LD_PRELOAD``, ``PATH``, ...) reaches a privileged process. The wrapper runs
the job's shell in the background (stdin /dev/null) from a subshell which, as the job's
user, makes the spec's ``working_dir`` outside a sandbox (``DIR``), extracts the job's
``files:`` from ``FILES_FD`` (a tar root built from the staged archives, so they land
through the job's own view and rights), then sources the job's environment from ``ENV_FD`` (a
memfd of ``export K='v'`` lines: no secret in any argv) and execs the job's shell; the
wrapper's own shell keeps the clean environment. It waits for the job (ignoring SIGTERM
itself, which the job's processes still receive), and writes the exit status to its own
stdin, the ``exit_code`` file the agent opened for writing; so the status is known even
when the agent was down when the job ended, and the job's user needs no access to the data
dir. The job's output (stdout and stderr) goes straight to the append-only ``output.log``.
``pid.json`` records the pid and start time of the session's leader (the wrapper, or the
sandbox's outer process), which a restarted agent uses to find the job again (a pid alone
could have been reused).

Stop: SIGTERM to the group and to every process carrying the job's marker (see
``proctable``), then SIGKILL to all of them after the grace period. When the job's main
shell ends, processes it left behind are killed, as a container's would be.

A job is never reported ended while a process of it lives: ``wait`` returns only once no
process carries the job's marker (SIGKILL is repeated, and logged, while one survives),
also when ``pid.json`` cannot be read (then the wrapper is found by the marker), and a
failure to read ``/proc`` raises instead of reading as "nothing left". A sandboxed job
this agent started, whose bubblewrap exited 0, needs no such read: its wrapper was PID 1
of the job's own PID namespace, and bubblewrap exits only after it did, when the kernel
had killed and reaped every other process of the namespace (``sandbox``). ``sweep`` kills the
processes of this agent's jobs (``DOCKYARD_JOB_AGENT``) that the agent does not know.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from agent.protocol import ExecutorKind, JobReason, JobSpec, PortMapping
from agent.server.archives import write_files_tar
from agent.server.executors import proctable
from agent.server.executors.base import ExecutorError, Launched, ProgressCallback, Usage
from agent.server.executors.processstart import (
    FILES_TAR,
    WRAPPER,
    export_lines,
    gpu_environment,
    job_environment,
    join_commands,
    spawn,
)
from agent.server.executors.procscans import SharedScans
from agent.server.jobaccount import JobAccount
from agent.server.processrules import process_job_problem
from agent.server.sandbox import volume_target_problem
from agent.server.store import JobFiles, write_atomically
from agent.server.uidleases import IdentityError

__all__ = [
    "WRAPPER",
    "ProcessExecutor",
    "export_lines",
    "gpu_environment",
    "job_environment",
    "job_leader",
    "join_commands",
    "wait_job_leader",
]

log = logging.getLogger(__name__)

KILL_RETRY_SECONDS = (0.05, 0.2, 1.0, 5.0)  # SIGKILL again while a process survives it
Killer = Callable[[int, int], None]  # os.kill


class ProcessExecutor:
    """Runs jobs as process groups on this host."""

    kind = ExecutorKind.PROCESS

    def __init__(
        self,
        account: JobAccount | None = None,
        *,
        agent_tag: str = "",
        kill: Killer = os.kill,
        volume_roots: Sequence[Path] = (),
        protected: Sequence[Path] = (),
        volume_dirs: Sequence[Path] = (),
    ) -> None:
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self.account = account or JobAccount()  # who jobs without a `user` run as
        # a sandboxed job's instance volumes: only below these roots (or in `volume_dirs`),
        # never in `protected` (the agent's data, the Docker socket): the Docker rule
        self._volume_roots = tuple(volume_roots)
        self._protected = tuple(protected)
        self._volume_dirs = tuple(volume_dirs)
        self.agent_tag = agent_tag  # DOCKYARD_JOB_AGENT of our jobs ("": none, no sweep)
        self._kill = kill
        self.scans = SharedScans()  # kills and sweeps of all jobs share each /proc read

    async def is_available(self) -> bool:
        return True

    def check(self, spec: JobSpec) -> str | None:
        if not spec.commands:
            return "a process job needs commands"
        moved = [port for port in spec.ports if port.host_port not in (None, port.container_port)]
        if moved:
            return "a process job listens on the host: host_port must equal container_port"
        # what only a container gives (`privileged`; volumes unless a sandbox mounts them)
        return self._volume_problem(spec) or self.account.refusal(spec)

    def _volume_problem(self, spec: JobSpec) -> str | None:
        sandboxed = self.account.sandbox is not None
        problem = process_job_problem(
            spec, self._volume_roots, self._protected, self._volume_dirs, mounts_volumes=sandboxed
        )
        if problem is not None or not sandboxed:
            return problem
        for volume in spec.volumes:
            if not os.path.exists(volume.host_path):  # bubblewrap makes no missing source
                return f"volumes: {volume.host_path} does not exist on this host: create it"
            problem = volume_target_problem(volume.container_path, os.path.lexists)
            if problem is not None:
                return problem
        return None

    async def prepare(self, spec: JobSpec, files: JobFiles, progress: ProgressCallback) -> None:
        if not spec.archives:
            return
        try:  # staged at submit (``archives.py``): one tar, extracted by the job itself
            work_dir = self.account.view_work_dir(spec, files.work_dir)
            await asyncio.to_thread(
                write_files_tar, spec, files.root, work_dir, files.root / FILES_TAR
            )
        except OSError as error:
            message = f"cannot place the job's files: {error}"
            raise ExecutorError(JobReason.EXECUTOR_ERROR, message) from error

    async def launch(self, spec: JobSpec, files: JobFiles) -> Launched:
        # again now: a link below an allowed root may have been re-pointed since the submit
        problem = self._volume_problem(spec) if spec.volumes else None
        if problem is not None:
            raise ExecutorError(JobReason.EXECUTOR_ERROR, problem)
        try:
            child = spawn(spec, files, self.account, self.agent_tag)
        except KeyError as error:
            user = spec.user or self.account.user
            raise ExecutorError(JobReason.EXECUTOR_ERROR, f"no user {user} here") from error
        except (OSError, ValueError, IdentityError) as error:
            message = f"cannot start the job: {error}"
            raise ExecutorError(JobReason.EXECUTOR_ERROR, message) from error
        self._children[spec.id] = child
        stat = proctable.read_stat(child.pid)
        _write_identity(files, child.pid, stat.start_ticks if stat else -1)
        return Launched(pid=child.pid, ports=_host_ports(spec))

    async def adopt(self, spec: JobSpec, files: JobFiles) -> Launched | None:
        if not files.pid.exists():
            # an agent that died between starting the wrapper and writing pid.json: the
            # wrapper leads its session and carries the job's marker
            leader = await asyncio.to_thread(_find_wrapper, spec.id)
            if leader is not None:
                _write_identity(files, leader.pid, leader.start_ticks)
            elif not _has_exit_status(files):
                return None  # never launched
        identity = _read_identity(files)  # None after a reboot: only exit_code may tell
        return Launched(pid=identity[0] if identity else None, ports=_host_ports(spec))

    async def wait(self, spec: JobSpec, files: JobFiles) -> int | None:
        identity = _read_identity(files)
        emptied = False
        if identity is not None:
            await _wait_exit(*identity, self._children.get(spec.id))
            child = self._children.pop(spec.id, None)
            if child is not None:
                status = child.wait()
                # bubblewrap's outer process exits 0 only after the job's wrapper, PID 1 of
                # the job's namespace, exited 0: the kernel had then killed and reaped every
                # other process of it (`sandbox`), so no table read is needed to know it
                emptied = status == 0 and self.account.sandbox is not None
        else:  # no pid.json (or another boot's): the marker finds the wrapper, if any
            leader = await asyncio.to_thread(_find_wrapper, spec.id)
            if leader is not None:
                await _wait_exit(leader.pid, leader.start_ticks, None)
        if not emptied:  # killed, adopted, or no sandbox: read the table
            await self.kill_all(spec.id, identity)  # what the job's shell left behind
        await asyncio.to_thread(self._retire_identity, spec, files)
        try:
            return int(files.exit_code.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _retire_identity(self, spec: JobSpec, files: JobFiles) -> None:
        """No process of the job is left: its own directory becomes root's (0700), so
        the next job given its uid cannot read it, and the uid goes back."""
        identities = self.account.identities
        if identities is None or spec.user is not None:
            return
        with contextlib.suppress(FileNotFoundError):
            work = os.open(self.account.sandbox_work_dir(spec), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fchown(work, 0, 0)
                os.fchmod(work, 0o700)
            finally:
                os.close(work)
        identities.release(files.root)

    async def signal(self, spec: JobSpec, files: JobFiles, *, kill: bool) -> None:
        """SIGTERM, or SIGKILL until none is left, to every process of the job."""
        identity = _read_identity(files)
        if identity is not None and proctable.is_running(*identity):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(identity[0], signal.SIGKILL if kill else signal.SIGTERM)
        if kill:
            await self.kill_all(spec.id, identity)
        else:
            await self._send(spec.id, identity, signal.SIGTERM)

    async def kill_all(self, job_id: str, identity: tuple[int, int] | None) -> None:
        """SIGKILL every process of the job; return once none is left.

        A process that survives (no permission, stuck in the kernel) is logged and killed
        again, with growing pauses: the job stays unfinished while it lives. A failure to
        read /proc raises (the caller retries), never reads as "none left"."""
        for attempt in itertools.count():
            survivors = await self._send(job_id, identity, signal.SIGKILL)
            if not survivors:
                return
            if attempt in (0, 10) or attempt % 100 == 0:
                log.warning(
                    "job %s: %d process(es) still alive after SIGKILL (pids %s); retrying",
                    job_id,
                    len(survivors),
                    ", ".join(str(pid) for pid in survivors[:10]),
                )
            await asyncio.sleep(KILL_RETRY_SECONDS[min(attempt, len(KILL_RETRY_SECONDS) - 1)])

    async def sweep(
        self, known: Callable[[], Collection[str]], only: str | None = None
    ) -> dict[str, int]:
        """Kill the processes of this agent's jobs that are not in ``known()`` (asked after
        the scan, so that a job submitted meanwhile is known); {job id: processes}."""
        if not self.agent_tag:
            return {}
        found = (await self.scans.fresh()).marked(self.agent_tag)
        if only is not None:
            found = {only: found[only]} if only in found else {}
        active = known()
        strays = {job_id: len(stats) for job_id, stats in found.items() if job_id not in active}
        for job_id in strays:
            await self.kill_all(job_id, None)
        return strays

    async def _send(self, job_id: str, identity: tuple[int, int] | None, number: int) -> list[int]:
        """Send ``number`` to every process of the job; for SIGKILL, the pids still alive
        after a few passes (the caller tries again). Each pass reads a table read after
        the previous pass's signals (shared with other jobs' kills)."""
        session, start_ticks = identity or (-1, 0)
        processes: list[proctable.ProcStat] = []
        for _ in range(5):
            processes = (await self.scans.fresh()).job_processes(session, job_id, start_ticks)
            for process in processes:
                try:
                    self._kill(process.pid, number)
                except ProcessLookupError:
                    pass
                except PermissionError:
                    log.warning("job %s: no permission to signal pid %d", job_id, process.pid)
            if not processes or number != signal.SIGKILL:
                return []
        return [process.pid for process in processes]

    async def sample(self, spec: JobSpec, files: JobFiles) -> Usage:
        identity = _read_identity(files)
        if identity is None:
            return Usage(cpu_seconds=0.0, memory_bytes=0)
        try:
            processes = await asyncio.to_thread(
                proctable.job_processes, identity[0], spec.id, identity[1]
            )
        except OSError as error:
            raise ExecutorError(JobReason.EXECUTOR_ERROR, f"cannot read /proc: {error}") from error
        ticks = sum(process.cpu_ticks for process in processes)
        memory = sum(proctable.memory_bytes(process.pid) for process in processes)
        return Usage(cpu_seconds=ticks / proctable.ticks_per_second(), memory_bytes=memory)

    async def remove(self, spec: JobSpec, files: JobFiles) -> None:
        self._children.pop(spec.id, None)
        work_dir = self.account.work_dir(spec, files.work_dir)
        own = self.account.sandbox is not None or not spec.working_dir
        if work_dir != files.work_dir and own:  # the job's own dir, outside the data dir
            await asyncio.to_thread(shutil.rmtree, work_dir, True)  # never follows links
        if self.account.identities is not None and spec.user is None:
            await asyncio.to_thread(self.account.identities.release, files.root)

    async def close(self) -> None:
        self._children.clear()  # the wrappers live on; a later agent adopts them


def job_leader(files: JobFiles) -> int | None:
    """A process inside the job's sandbox (the first child of its session's leader, the
    sandbox's PID 1), whose namespaces an SSH session enters; None when gone or while
    bubblewrap is still building the sandbox: until its inner process has exec'd the job's
    wrapper (its executable is no longer bubblewrap's) the mount namespace is half made,
    and a session entering it would see neither the job's root nor its working dir."""
    identity = _read_identity(files)
    if identity is None or not proctable.is_running(*identity):
        return None
    pid = identity[0]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            found = children.read().split()
        if not found:
            return None
        inner = int(found[0])
        if os.readlink(f"/proc/{inner}/exe") == os.readlink(f"/proc/{pid}/exe"):
            return None  # not yet exec'd: still bubblewrap setting up
    except (OSError, ValueError):
        return None
    return inner


async def wait_job_leader(files: JobFiles, *, within: float = 10.0) -> int | None:
    """`job_leader`, waited for while the job's wrapper still runs: a session opened the
    moment a job is reported running must not meet a sandbox bubblewrap is still making."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        leader = job_leader(files)
        if leader is not None or loop.time() >= deadline:
            return leader
        identity = _read_identity(files)
        if identity is None or not proctable.is_running(*identity):
            return None
        await asyncio.sleep(0.02)


def _host_ports(spec: JobSpec) -> list[PortMapping]:
    return [
        PortMapping(container_port=port.container_port, host_port=port.container_port)
        for port in spec.ports
    ]


def _write_identity(files: JobFiles, pid: int, start_ticks: int) -> None:
    identity = {"pid": pid, "start_ticks": start_ticks, "boot_id": proctable.boot_id()}
    write_atomically(files.pid, json.dumps(identity).encode())


def _find_wrapper(job_id: str) -> proctable.ProcStat | None:
    leaders = [p for p in proctable.job_processes(-1, job_id) if p.session == p.pid]
    return min(leaders, key=lambda leader: leader.start_ticks) if leaders else None


def _has_exit_status(files: JobFiles) -> bool:
    try:
        return bool(files.exit_code.read_text().strip())
    except OSError:
        return False


def _read_identity(files: JobFiles) -> tuple[int, int] | None:
    """(pid, start ticks) of the job's wrapper, if it was started in this boot; None when
    ``pid.json`` is missing or unreadable (other read errors, e.g. EMFILE, raise)."""
    try:
        data = json.loads(files.pid.read_text())
        if data.get("boot_id") != proctable.boot_id() or not data.get("boot_id"):
            return None
        return int(data["pid"]), int(data["start_ticks"])
    except (FileNotFoundError, IsADirectoryError, ValueError, KeyError, TypeError, AttributeError):
        return None


async def _wait_exit(pid: int, start_ticks: int, child: subprocess.Popen[bytes] | None) -> None:
    """Return once the wrapper ``pid`` has exited (a pidfd tells, child of ours or not)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if child is None and not proctable.is_running(pid, start_ticks):
            return  # the pid now belongs to another process, or is a zombie
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[None] = loop.create_future()

        def on_exit() -> None:
            if not exited.done():
                exited.set_result(None)

        loop.add_reader(pidfd, on_exit)
        try:
            await exited
        finally:
            loop.remove_reader(pidfd)
    finally:
        os.close(pidfd)
