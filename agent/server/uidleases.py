"""The per-job uids of sandboxed process jobs: leased host-wide, and reclaimed when stale.

Each running sandboxed job of a host (of any agent, any project) has a uid no other running
job has: `base + slot`, leased by the file `<lease_dir>/<uid>` (root's, 0700 dir), which
holds the job's id and working dir, and recorded in the job's `sandbox.json` so that a
restarted agent keeps it. The agent that leased it holds an exclusive `flock` on the
lease file for as long as it runs the job (the lock dies with the agent, never with the
job's own processes, which never see the file).

A lease left behind (its agent was killed, or the job ended while no agent watched it) is
**stale** only when all of these hold, checked while holding the lease's lock:

- no agent holds its lock;
- no process of the host runs with its uid (real, effective, saved or filesystem);
- no process carries the job's marker `DOCKYARD_JOB_ID=<job>`: a job's start runs as
  root until the switch (`sandbox`), so the uid alone would miss a job being started by
  an agent killed mid-start.

A stale lease's working dir is given back to root (0700) before the lease file goes, so
the next job given the uid cannot read what the last one left. `reclaim_stale` runs at
the agent's start (`agent.__main__`) and when no free uid is found; "cannot tell" (an
unreadable `/proc`) never reads as stale: the error is raised.

A lease is made in one step that another agent's reclaim cannot split: the file is
written and locked under a temporary name, then linked to `<uid>` (which fails when the
uid is taken), so a lease file is never seen unlocked while its agent is still leasing.

Used by `JobAccount.owner` (lease) and the process executor (release).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agent.server.executors.proctable import MARKER_ENV

UID_BASE = 2_000_000_000  # far above any account a host's tools create
UID_SLOTS = 1 << 20
LEASE_DIR = Path("/var/lib/dockyard-jobs/uids")
RECORD = "sandbox.json"  # in the job's directory: its uid
_TRIES = 64
_PARTIAL = ".new-"  # a lease being made (locked while its agent lives)


class IdentityError(Exception):
    """No uid could be leased for a job."""


@dataclass(frozen=True)
class Lease:
    """What a lease file says: the job holding the uid, and its working dir on the host."""

    job: str
    work_dir: str | None


def read_lease(fd: int) -> Lease | None:
    """The lease of an open lease file (None: not one of ours, e.g. empty)."""
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 65536)
    try:
        data = json.loads(raw)
    except ValueError:  # a lease of an older agent: the job id alone
        text = raw.decode(errors="replace").strip()
        return Lease(text, None) if text else None
    if not isinstance(data, dict) or not isinstance(data.get("job"), str):
        return None
    work = data.get("work_dir")
    return Lease(data["job"], work if isinstance(work, str) else None)


def holders(uid: int, job: str, proc: Path = Path("/proc")) -> list[int]:
    """Pids of the host's processes that run as `uid` or carry `job`'s marker. OSError
    when `/proc` cannot be listed (a process gone while read is skipped)."""
    marker, wanted = f"\0{MARKER_ENV}={job}\0".encode(), str(uid).encode()
    found = []
    for name in os.listdir(proc):
        if not name.isdigit() or name == "1":  # init is never a job's (nor readable in gVisor)
            continue
        try:
            status = (proc / name / "status").read_bytes()
            environ = (proc / name / "environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone while read
        except PermissionError:  # cannot tell: count it as the job's
            found.append(int(name))
            continue
        uids = next((line.split()[1:] for line in status.splitlines() if line[:4] == b"Uid:"), [])
        if wanted in uids or marker in b"\0" + environ + b"\0":
            found.append(int(name))
    return found


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int | None]:
    """The open file `path`, exclusively locked, while it is still the file at `path`;
    None when it is gone or another process holds its lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # gone, or a link
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        yield fd if same else None
    finally:
        os.close(fd)


def _give_back_dir(work_dir: str) -> None:
    """The stale job's own dir becomes root's (0700), as when a job is retired."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        fd = os.open(work_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchown(fd, 0, 0)
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Identities:
    """The per-job uids of a host's sandboxed jobs, leased in `lease_dir` (host-wide)."""

    base: int = UID_BASE
    slots: int = UID_SLOTS
    lease_dir: Path = LEASE_DIR
    proc: Path = Path("/proc")
    # uid -> (the locked lease file, its job) of the leases this agent holds
    _held: dict[int, tuple[int, str]] = field(default_factory=dict, compare=False, repr=False)

    def recorded(self, job_root: Path) -> int | None:
        """The uid recorded for the job whose directory is `job_root` (None: none yet)."""
        try:
            uid = int(json.loads((job_root / RECORD).read_text())["uid"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None
        return uid if self.base <= uid < self.base + self.slots else None

    def lease(self, job_id: str, job_root: Path, work_dir: Path | None = None) -> int:
        """The job's uid: the recorded one while its lease still names the job (held
        again by this agent), else a free slot leased now and recorded."""
        known = self.recorded(job_root)
        if known is not None and self._hold(known, job_id):
            return known
        self.lease_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        content = json.dumps({"job": job_id, "work_dir": str(work_dir) if work_dir else None})
        for attempt in range(2):
            if attempt:  # the pool looked full: free what is stale, then look again
                self.reclaim_stale()
            uid = self._take(content.encode(), job_id)
            if uid is not None:
                (job_root / RECORD).write_text(json.dumps({"uid": uid, "job": job_id}))
                return uid
        raise IdentityError(f"no free uid in {self.lease_dir} after reclaiming stale leases")

    def _take(self, content: bytes, job_id: str) -> int | None:
        partial = self.lease_dir / f"{_PARTIAL}{secrets.token_hex(8)}"
        fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, content)
            for _ in range(_TRIES):
                uid = self.base + secrets.randbelow(self.slots)
                try:
                    os.link(partial, self.lease_dir / str(uid))
                except FileExistsError:
                    continue
                self._held[uid] = (fd, job_id)
                return uid
        except BaseException:
            os.close(fd)
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
        os.close(fd)
        return None

    def _hold(self, uid: int, job_id: str) -> bool:
        """Whether `uid`'s lease names `job_id` (then this agent holds its lock)."""
        if uid in self._held:
            return self._held[uid][1] == job_id
        try:
            fd = os.open(self.lease_dir / str(uid), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        lease = read_lease(fd)
        if lease is None or lease.job != job_id:
            os.close(fd)
            return False
        fcntl.flock(fd, fcntl.LOCK_EX)  # a reclaim holds it only while it looks
        self._held[uid] = (fd, job_id)
        return True

    def release(self, job_root: Path) -> None:
        """Give the job's uid back (its processes are gone, its files root's again); a
        lease that names another job (this one's was reclaimed) is left alone."""
        uid = self.recorded(job_root)
        if uid is None:
            return
        try:
            job = json.loads((job_root / RECORD).read_text()).get("job")
        except (FileNotFoundError, ValueError, AttributeError):
            job = None
        path = self.lease_dir / str(uid)
        held = self._held.get(uid)
        if held is not None and (job is None or held[1] == job):
            del self._held[uid]
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            os.close(held[0])
            return
        if held is not None:
            return  # the uid is another job's now
        with _locked(path) as fd:
            lease = read_lease(fd) if fd is not None else None
            if lease is not None and (job is None or lease.job == job):
                path.unlink()

    def reclaim_stale(self) -> list[int]:
        """Free every stale lease (see the module docstring); the uids freed."""
        freed = []
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.lease_dir):
                path = self.lease_dir / name
                if name.startswith(_PARTIAL):
                    with _locked(path) as fd:
                        # written only once locked: unlocked and written, its agent died
                        if fd is not None and read_lease(fd) is not None:
                            with contextlib.suppress(FileNotFoundError):
                                path.unlink()
                    continue
                if not name.isdigit() or int(name) in self._held:
                    continue
                with _locked(path) as fd:
                    lease = read_lease(fd) if fd is not None else None
                    if lease is None or holders(int(name), lease.job, self.proc):
                        continue
                    if lease.work_dir:
                        _give_back_dir(lease.work_dir)
                    path.unlink()
                    freed.append(int(name))
        return freed
