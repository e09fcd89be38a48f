"""Who a process job runs as, where its working directory is, what environment it inherits.

A job must not get the agent's rights: an agent run by root runs process jobs as an
unprivileged account it manages (`DEFAULT_JOB_USER`, created with `useradd` when missing)
unless the job's spec names its `user` (root only with `--allow-root-jobs`: a project
member must not become root by writing `user: root`); the agent's data dir stays 0700 and the job's
working directory is outside it, under `work_root` (`/var/lib/dockyard-jobs/<agent>/`),
owned by the job's account. The API refuses that account (`peers`): it is not the
agent's. An agent run by another user can only run jobs as itself (no setuid): then a job
has that user's rights, which docs/security.md ("Jobs and the host") says.

Whatever the account, a job inherits none of the agent's `DOCKYARD_*` variables (the local
agent runs in the server's environment, which may hold its tokens); a job of another
account inherits only a few neutral host variables (`PATH`, locale, `TZ`, `TERM`).

Used by the process executor (`executors.process`) and the SSH sessions of process jobs
(`agent.ssh.service`); `agent.__main__` resolves the account at start.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.protocol import JobSpec

DEFAULT_JOB_USER = "dockyard-job"
WORK_ROOT = Path("/var/lib/dockyard-jobs")
_HOST_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
_AGENT_ENV_PREFIX = "DOCKYARD_"


class JobAccountError(Exception):
    """The job account cannot be used (unknown, or cannot be created)."""


def ensure_job_user(name: str) -> None:
    """Create the unprivileged account `name` (no home, no login shell) unless it exists."""
    try:
        pwd.getpwnam(name)
        return
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise JobAccountError(f"no user {name} on this host, and only root may create one")
    argv = ["useradd", "--system", "--user-group", "--no-create-home"]
    argv += ["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as error:
        raise JobAccountError(f"cannot create the job user {name}: {error}") from error
    if done.returncode != 0 and not _exists(name):
        detail = done.stderr.strip() or f"useradd exited {done.returncode}"
        raise JobAccountError(f"cannot create the job user {name}: {detail}")


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def agent_tag(data_dir: Path) -> str:
    """A short name of the agent of this data dir (its jobs carry it: `DOCKYARD_JOB_AGENT`)."""
    return hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]


def default_work_root(data_dir: Path) -> Path:
    """Working dirs of this agent's jobs run by another account: one dir per agent."""
    return WORK_ROOT / agent_tag(data_dir)


def user_ids(user: str) -> tuple[int, int]:
    """(uid, gid) of a user name or numeric uid; KeyError when unknown."""
    entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


@dataclass(frozen=True)
class JobAccount:
    """The account process jobs run as when their spec names none (None: the agent's),
    and where their working dirs go when that account is not the agent's."""

    user: str | None = None
    work_root: Path | None = None
    allow_root: bool = False  # `--allow-root-jobs`: a job's `user: root` is honoured
    # util-linux's `setpriv`, which switches to the job's account and execs the job (None:
    # Python switches in the child, which costs a full fork of the agent: `switch_argv`)
    switcher: str | None = field(default_factory=lambda: shutil.which("setpriv"))

    def switch_argv(self, owner: tuple[int, int], groups: Sequence[int]) -> list[str] | None:
        """The argv prefix that runs a job as `owner` with only `groups` besides its own
        group, or None without `setpriv`. Python's own switch (`Popen(user=…)`) rules out
        `vfork`: each job then forks the whole agent (~4.7 ms of its CPU at 70 MB, against
        ~0.3 ms). `setpriv` sets real, effective and saved ids, then execs: the job keeps
        its pid (the wrapper's identity) and gets the same account as before."""
        if self.switcher is None:
            return None
        uid, gid = owner
        listed = f"--groups={','.join(str(g) for g in groups)}" if groups else "--clear-groups"
        return [self.switcher, f"--reuid={uid}", f"--regid={gid}", listed, "--"]

    def refusal(self, spec: JobSpec) -> str | None:
        """Why this host does not run `spec` (None: it does): while jobs run as a job
        account, a `user` that is root needs the operator's `--allow-root-jobs`."""
        if self.user is None or spec.user is None or self.allow_root:
            return None
        try:
            uid = user_ids(spec.user)[0]
        except KeyError:
            return None  # launching says "no user … here"
        if uid != 0:
            return None
        return (
            f"user {spec.user}: this host runs no job as root (its agent was started without "
            "--allow-root-jobs); remove `user` to run as the host's job account"
        )

    def owner(self, spec: JobSpec) -> tuple[int, int] | None:
        """(uid, gid) the job runs as; None: the agent's own. KeyError: unknown user."""
        name = spec.user if spec.user is not None else self.user
        return user_ids(name) if name is not None else None

    def is_foreign(self, spec: JobSpec) -> bool:
        owner = self.owner(spec)
        return owner is not None and owner[0] != os.getuid()

    def work_dir(self, spec: JobSpec, own_dir: Path) -> Path:
        """The job's working dir: its spec's, else outside the data dir for a foreign
        account (`work_root/<job id>`), else `own_dir` (the job's `work/`)."""
        if spec.working_dir:
            return Path(spec.working_dir)
        if self.work_root is not None and self.is_foreign(spec):
            return self.work_root / spec.id
        return own_dir

    def prepare_work_dir(self, spec: JobSpec, own_dir: Path) -> Path:
        """Create the job's working dir (owned by the job's account) and return it."""
        work_dir = self.work_dir(spec, own_dir)
        owner = self.owner(spec)
        if work_dir != own_dir and not spec.working_dir:
            assert self.work_root is not None
            self.work_root.mkdir(mode=0o711, parents=True, exist_ok=True)
            work_dir.mkdir(mode=0o700, exist_ok=True)
        else:
            work_dir.mkdir(parents=True, exist_ok=True)
        if owner is not None and not spec.working_dir:
            os.chown(work_dir, *owner)
        return work_dir

    def base_environment(
        self, spec: JobSpec, environ: Mapping[str, str], work_dir: Path
    ) -> dict[str, str]:
        """What the job inherits from the host, before its own env (see the docstring)."""
        env = {k: v for k, v in environ.items() if not k.startswith(_AGENT_ENV_PREFIX)}
        if not self.is_foreign(spec):
            return env
        owner = self.owner(spec)
        assert owner is not None
        name = pwd.getpwuid(owner[0]).pw_name
        env = {key: env[key] for key in _HOST_ENV if key in env}
        env.update(USER=name, LOGNAME=name, HOME=str(work_dir))
        return env
