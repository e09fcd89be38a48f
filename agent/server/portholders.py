"""Whether a job's port is held by the job: the proxy and forwards reach only their own job.

A run declares its ports; nothing stops another local account (or another job) from
listening on the same number first, on loopback only, trusting that nobody else can reach
it. Without a check, a service declaring that port would expose it through the server's
proxy and `runs/forward` to anyone. So before a connection to a job's port is opened on
the server's behalf, `PortHolders.problem` asks the kernel who holds the listening socket:

1. the LISTEN sockets on the port whose address accepts a connection to 127.0.0.1
   (0.0.0.0, 127.0.0.1, ::, ::ffff:127.0.0.1), with their inode and owner uid
   (`agent.server.listeners`: sock_diag netlink, else /proc/net/tcp and tcp6);
2. `/proc/<pid>/fd`: a process holding `socket:[inode]` (processes of the socket's uid
   are looked at first, and the scan stops at the first holder);
3. `/proc/<pid>/environ`: that process carries the job's marker `DOCKYARD_JOB_ID=<id>`
   (`executors.proctable`; a Docker job's container processes carry it too), or, for a
   Docker job, `/proc/<pid>/cgroup` names the job's container (a container on the host's
   network whose init cleared its environment is still recognised).

Every listening socket that would take the connection must be the job's, else the answer
says which port of which job is held by another process. The verdict of a socket is kept
for `ttl` seconds by (port, inode): an inode names one socket while it is open, so a
cached verdict can only be about the socket that still listens; the listeners are asked
on every call. Cost (bench/port_check.py): a cached call is one netlink dump, tens of
microseconds; a lookup scans /proc, at most once per socket per `ttl`. Where the
listeners cannot be read (not Linux) or a holder's descriptors are not ours
to read (another user's, for an agent that is not root), the socket is not the job's:
the check fails closed. Callers: the agent's SSH server (`agent.ssh.service`) for every
forward to a job's port; the agent's `GET /ports/{port}/holder` (`agent.server.portroutes`),
which the server asks before it opens a channel through a host's own sshd (SSH fleets);
and the server's proxy when it dials the local agent's jobs on loopback
(`reconciler.web.proxy`). A Docker job on a bridge network is reached through the port
the engine published for it, which the engine holds: not checked (`port_job`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from agent.protocol import ExecutorKind, JobSpec, JobState, JobStatus, NetworkMode
from agent.server.executors.proctable import MARKER_ENV
from agent.server.listeners import Listener, listeners
from agent.server.procsockets import holds, socket_link

NOT_THE_JOBS = "held by another process, not the job"  # the refusal says this (callers match)
DEFAULT_TTL = 2.0


def port_job(
    states: Iterable[JobState], spec_of: Callable[[str], JobSpec], port: int
) -> tuple[str, bool, str | None] | None:
    """Pure: the running job with host port `port`, whether its holder is to be checked
    (not for a container on a bridge network: the engine publishes and holds its port) and
    its container's id (None: a process job); None when no running job has it (the
    agent's own port, or nobody's)."""
    for state in states:
        if state.status != JobStatus.RUNNING or not any(
            mapping.host_port == port for mapping in state.ports
        ):
            continue
        spec = spec_of(state.id)
        in_container = (state.executor or spec.executor) == ExecutorKind.DOCKER
        checked = not (in_container and spec.network_mode == NetworkMode.BRIDGE)
        return state.id, checked, state.container_id if in_container else None
    return None


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def socket_holder(inode: int, uid: int, proc: Path = Path("/proc")) -> int | None:
    """The pid of a process holding socket `inode` (owned by `uid`), or None. Processes
    of `uid` are looked at first; the scan stops at the first holder."""
    link = socket_link(inode)
    mine: list[str] = []
    others: list[str] = []
    for entry in os.scandir(proc):
        if entry.name.isdigit():
            try:
                (mine if entry.stat().st_uid == uid else others).append(entry.path)
            except OSError:
                continue  # gone
    for path in (*mine, *others):
        if holds(path, link):
            return int(os.path.basename(path))
    return None


def job_marker(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The job id in the process's `DOCKYARD_JOB_ID`, or None (none, gone, not ours)."""
    try:
        environ = _read(f"{proc}/{pid}/environ")
    except OSError:
        return None

    key = MARKER_ENV.encode() + b"="
    for variable in environ.split(b"\0"):
        if variable.startswith(key):
            return variable[len(key) :].decode(errors="replace")
    return None


@dataclass(frozen=True)
class Holder:
    """The process holding a listening socket: its job marker and its cgroups' text."""

    job: str | None
    cgroup: str = ""

    def is_job(self, job_id: str, container_id: str | None) -> bool:
        """A process of the job: it carries the marker, or it is in the job's container
        (its cgroup path names the container: `docker-<id>.scope` or `/docker/<id>`)."""
        in_container = container_id is not None and len(container_id) >= 12
        return self.job == job_id or (in_container and str(container_id) in self.cgroup)


def socket_holder_of(inode: int, uid: int, proc: Path) -> Holder | None:
    """The `Holder` of socket `inode`, or None when no process we can see holds it."""
    pid = socket_holder(inode, uid, proc)
    if pid is None:
        return None
    try:
        cgroup = _read(f"{proc}/{pid}/cgroup").decode(errors="replace")
    except OSError:
        cgroup = ""
    return Holder(job_marker(pid, proc), cgroup)


@dataclass
class PortHolders:
    """`problem(port, job_id)` with its verdicts cached by (port, inode) for `ttl` s."""

    ttl: float = DEFAULT_TTL
    listening: Callable[[int], list[Listener]] = listeners
    proc: Path = Path("/proc")
    clock: Callable[[], float] = time.monotonic
    holder_of: Callable[[int, int, Path], Holder | None] = socket_holder_of
    scans: int = 0  # sockets looked up in /proc (cache misses), for the docs' cost figures
    _cache: dict[tuple[int, int], tuple[float, Holder | None]] = field(default_factory=dict)

    def problem(self, port: int, job_id: str, container_id: str | None = None) -> str | None:
        """Why a connection to `port` would not reach job `job_id` (or its container
        `container_id`), or None when it would."""
        try:
            sockets = self.listening(port)
        except OSError as error:
            return f"port {port} of job {job_id}: cannot tell who holds it ({error})"
        if not sockets:
            return f"port {port} of job {job_id}: nothing listens on it"
        now = self.clock()
        self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        for uid, inode in sockets:
            cached = self._cache.get((port, inode))
            if cached is None:
                self.scans += 1
                cached = (now + self.ttl, self.holder_of(inode, uid, self.proc))
                self._cache[(port, inode)] = cached
            holder = cached[1]
            if holder is None or not holder.is_job(job_id, container_id):
                return (
                    f"port {port} of job {job_id} is {NOT_THE_JOBS} "
                    f"(a socket of uid {uid}): the proxy and forwards reach only the job's own"
                )
        return None

    def job_port_problem(
        self, states: Iterable[JobState], spec_of: Callable[[str], JobSpec], port: int
    ) -> str | None:
        """`problem` for the running job with host port `port` (`port_job`); None when
        no running job has it or its engine holds it."""
        found = port_job(states, spec_of, port)
        if found is None or not found[1]:
            return None
        return self.problem(port, found[0], found[2])
