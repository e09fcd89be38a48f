"""Reading the process table from ``/proc``: identity, membership and usage of processes.

A job's processes are found two ways, so that a child that left the job's session
(``setsid``, a double-forking daemon) is still found: by session id, and by the marker
``DOCKYARD_JOB_ID=<id>`` in their environment, which every job process inherits. A second
marker, ``DOCKYARD_JOB_AGENT=<tag>``, says which agent (data dir) started the job, so an
agent can find the processes of jobs it does not know (``marked_processes``) without
touching another agent's.

A process that is gone reads as absent; any other failure to read ``/proc`` (too many open
files, ...) raises ``OSError``: "I could not look" must never read as "nothing is left".
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

PROC = Path("/proc")
MARKER_ENV = "DOCKYARD_JOB_ID"
AGENT_MARKER_ENV = "DOCKYARD_JOB_AGENT"
_GONE = (FileNotFoundError, ProcessLookupError)  # the process exited while we read


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    session: int
    cpu_ticks: int  # utime + stime
    start_ticks: int  # since boot: tells a pid from a later process with the same pid


def _read_file(path: str) -> bytes:
    """A /proc file's bytes, read with plain system calls: the whole table is read per
    ending job, and `Path.read_text`'s objects and text layer cost more than the read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_stat(pid: int) -> ProcStat | None:
    """The process's stat line; None when it is gone (other read errors raise)."""
    try:
        text = _read_file(f"/proc/{pid}/stat").decode(errors="replace")
    except _GONE:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ")"
    fields = text[text.rindex(")") + 2 :].split()
    return ProcStat(
        pid=pid,
        state=fields[0],
        session=int(fields[3]),
        cpu_ticks=int(fields[11]) + int(fields[12]),
        start_ticks=int(fields[19]),
    )


def is_running(pid: int, start_ticks: int) -> bool:
    """True while the process ``pid`` that started at ``start_ticks`` has not exited."""
    stat = read_stat(pid)
    return stat is not None and stat.start_ticks == start_ticks and stat.state not in "ZX"


def _pids() -> Iterator[int]:
    for name in os.listdir(PROC):
        if name.isdigit():
            yield int(name)


def _environ(pid: int) -> bytes:
    """The process's environment; empty when it is gone or not ours to read (a process of
    another user, for an agent that is not root: not a job of ours either)."""
    try:
        return _read_file(f"/proc/{pid}/environ")
    except (*_GONE, PermissionError):
        return b""


def _has_marker(pid: int, marker: bytes) -> bool:
    environ = _environ(pid)
    return environ.startswith(marker) or b"\0" + marker in environ


def _variable(environ: bytes, name: bytes) -> str | None:
    key = name + b"="
    if environ.startswith(key):
        start = len(key)
    else:
        found = environ.find(b"\0" + key)
        if found < 0:
            return None
        start = found + 1 + len(key)
    end = environ.find(b"\0", start)
    return environ[start : end if end >= 0 else None].decode(errors="replace")


@dataclass(frozen=True)
class Marked:
    """A live process and the job markers in its environment (None: not a job's)."""

    stat: ProcStat
    job_id: str | None
    agent: str | None


@dataclass(frozen=True)
class ProcTable:
    """One read of the whole process table, markers included: what ``job_processes``
    answers for one job, answered for any job from memory (``procscans`` shares it)."""

    processes: tuple[Marked, ...]

    @cached_property
    def _by_pid(self) -> dict[int, ProcStat]:
        return {m.stat.pid: m.stat for m in self.processes}

    @cached_property
    def _by_session(self) -> dict[int, list[ProcStat]]:
        found: dict[int, list[ProcStat]] = {}
        for m in self.processes:
            found.setdefault(m.stat.session, []).append(m.stat)
        return found

    @cached_property
    def _by_job(self) -> dict[str, list[ProcStat]]:
        found: dict[str, list[ProcStat]] = {}
        for m in self.processes:
            if m.job_id:
                found.setdefault(m.job_id, []).append(m.stat)
        return found

    def job_processes(self, session: int, job_id: str, since_ticks: int = 0) -> list[ProcStat]:
        """As ``job_processes`` below, from this table (indexed: a thousand jobs' kills
        answered from one read cost the event loop little)."""
        leader = self._by_pid.get(session) if session > 0 else None
        ours = session > 0 and (leader is None or leader.start_ticks == since_ticks)
        found = {stat.pid: stat for stat in self._by_job.get(job_id, ())}
        if ours:
            found.update((stat.pid, stat) for stat in self._by_session.get(session, ()))
        return [stat for stat in found.values() if stat.start_ticks >= since_ticks]

    def marked(self, agent_tag: str) -> dict[str, list[ProcStat]]:
        """Processes carrying ``DOCKYARD_JOB_AGENT=<agent_tag>``, by their job id."""
        found: dict[str, list[ProcStat]] = {}
        for m in self.processes:
            if m.job_id and m.agent == agent_tag:
                found.setdefault(m.job_id, []).append(m.stat)
        return found


def snapshot() -> ProcTable:
    """Every live process of the host (but this one) with its job markers."""
    me, job_key, agent_key = os.getpid(), MARKER_ENV.encode(), AGENT_MARKER_ENV.encode()
    found = []
    for pid in _pids():
        stat = read_stat(pid) if pid != me else None
        if stat is None or stat.state in "ZX":
            continue
        environ = _environ(pid)
        job_id = _variable(environ, job_key) if job_key in environ else None
        agent = _variable(environ, agent_key) if job_id and agent_key in environ else None
        found.append(Marked(stat, job_id, agent))
    return ProcTable(tuple(found))


def marked_processes(agent_tag: str) -> dict[str, list[ProcStat]]:
    """Live processes carrying ``DOCKYARD_JOB_AGENT=<agent_tag>``, by their job id."""
    return snapshot().marked(agent_tag)


def job_processes(session: int, job_id: str, since_ticks: int = 0) -> list[ProcStat]:
    """The live processes of a job: in its session, or carrying its marker.

    Only processes started at or after ``since_ticks`` (the job's start) can be the job's,
    which spares reading the environment of every older process on the host.
    """
    marker = f"{MARKER_ENV}={job_id}\0".encode()
    # a session id outlives its leader; if the number now leads another session, the
    # processes in that session are not the job's (Linux reuses no pid still used as a sid)
    leader = read_stat(session) if session > 0 else None
    # session 0 is the kernel's threads', never a job's
    session_is_ours = session > 0 and (leader is None or leader.start_ticks == since_ticks)
    found = []
    for pid in _pids():
        stat = read_stat(pid)
        if stat is None or stat.state in "ZX" or pid == os.getpid():
            continue
        if stat.start_ticks < since_ticks:
            continue
        if (session_is_ours and stat.session == session) or _has_marker(pid, marker):
            found.append(stat)
    return found


def boot_id() -> str:
    """This boot of the host: pids and start times from another boot mean nothing.

    Empty where the kernel does not say; other read errors raise."""
    try:
        return (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except FileNotFoundError:
        return ""


def memory_bytes(pid: int) -> int:
    try:
        resident_pages = int((PROC / str(pid) / "statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def ticks_per_second() -> int:
    return os.sysconf("SC_CLK_TCK")
