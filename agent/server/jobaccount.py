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

A root agent with bubblewrap sandboxes every process job (`sandbox`): each job without a
`user` gets a uid of its own (`identities`, no account needed), its working dir is always
`work_root/<job id>` (mounted at the spec's `working_dir` inside the sandbox), and a
`user` must be one the operator listed (`--allow-job-user`; root only with
`--allow-root-jobs`). A root agent without bubblewrap refuses process jobs
(`unsandboxed_refusal`) unless its operator passed `--unsandboxed-process-jobs`.

Used by the process executor (`executors.process`) and the SSH sessions of process jobs
(`agent.ssh.service`); `agent.__main__` resolves the account at start.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.protocol import JobSpec
from agent.server.archives import resolve_target
from agent.server.sandbox import (
    Sandbox,
    file_target_problem,
    switch_argv,
    view_work_dir,
    working_dir_problem,
)
from agent.server.uidleases import Identities

DEFAULT_JOB_USER = "dockyard-job"
WORK_ROOT = Path("/var/lib/dockyard-jobs")
_HOST_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
_AGENT_ENV_PREFIX = "DOCKYARD_"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
    sandbox: Sandbox | None = None  # bubblewrap for every process job (a root agent)
    identities: Identities | None = None  # jobs without `user`: a uid of their own
    unsandboxed_refusal: str | None = None  # set: refuse process jobs, saying this
    allowed_users: frozenset[str] = frozenset()  # `--allow-job-user`: what `user` may name

    def switch_argv(self, owner: tuple[int, int], groups: Sequence[int]) -> list[str] | None:
        """The argv prefix that runs a job as `owner` with only `groups` besides its own
        group, or None without `setpriv`. Python's own switch (`Popen(user=…)`) rules out
        `vfork`: each job then forks the whole agent (~4.7 ms of its CPU at 70 MB, against
        ~0.3 ms). `setpriv` sets real, effective and saved ids, then execs: the job keeps
        its pid (the wrapper's identity) and gets the same account as before."""
        if self.switcher is None:
            return None
        return switch_argv(self.switcher, owner, groups)

    def refusal(self, spec: JobSpec) -> str | None:
        """Why this host does not run `spec` (None: it does; pure but for account
        look-ups): no sandbox where one is needed, a `user` the operator did not list (root
        needs `--allow-root-jobs`), an env name no shell takes, or what the sandbox cannot
        give (a `working_dir` or `files:` outside what the job may write; volumes and
        `privileged` are `processrules`')."""
        if self.unsandboxed_refusal is not None:
            return self.unsandboxed_refusal
        bad = [name for name in spec.env if not _ENV_NAME.fullmatch(name)]
        if bad:
            return (
                f"env {bad[0][:80]!r}: not a variable name a shell takes (letters, digits "
                "and '_', not first a digit): rename it"
            )
        problem = self._user_problem(spec)
        if problem is not None or self.sandbox is None:
            return problem
        problem = working_dir_problem(spec, os.path.lexists)
        if problem is not None:
            return problem
        view = view_work_dir(spec, self.sandbox_work_dir(spec))
        for index, archive in enumerate(spec.archives):
            target = resolve_target(archive.path, view)
            problem = file_target_problem(index, archive.path, target, view)
            if problem is not None:
                return problem
        return None

    def _user_problem(self, spec: JobSpec) -> str | None:
        if self.user is None or spec.user is None:
            return None  # jobs run as the agent's own user: `user` cannot change that
        try:
            uid = user_ids(spec.user)[0]
        except KeyError:
            return f"user {spec.user}: no such account on this host"
        if uid == 0:
            if self.allow_root:
                return None
            return (
                f"user {spec.user}: this host runs no job as root (its agent was started "
                "without --allow-root-jobs); remove `user` to run as the host's job account"
            )
        names = {spec.user, pwd.getpwuid(uid).pw_name} if _has_uid(uid) else {spec.user}
        if names & self.allowed_users:
            return None
        listed = ", ".join(sorted(self.allowed_users)) or "none"
        return (
            f"user {spec.user}: a process job may run only as an account this host's operator "
            f"listed (--allow-job-user; listed: {listed}); remove `user` to run as the job's "
            "own identity"
        )

    def owner(self, spec: JobSpec, job_root: Path | None = None) -> tuple[int, int] | None:
        """(uid, gid) the job runs as; None: the agent's own. KeyError: unknown user.
        A sandboxed job without `user` gets its own uid, leased for the job whose
        directory is `job_root` (recorded there; without `job_root`: the recorded one)."""
        if spec.user is None and self.identities is not None:
            if job_root is None:
                raise KeyError(spec.user)
            uid = self.identities.lease(spec.id, job_root, self.sandbox_work_dir(spec))
            return uid, uid
        name = spec.user if spec.user is not None else self.user
        return user_ids(name) if name is not None else None

    def is_foreign(self, spec: JobSpec) -> bool:
        if self.sandbox is not None or (spec.user is None and self.identities is not None):
            return True
        owner = self.owner(spec)
        return owner is not None and owner[0] != os.getuid()

    def sandbox_work_dir(self, spec: JobSpec) -> Path:
        assert self.work_root is not None, "a sandboxing account has a work root"
        return self.work_root / spec.id

    def work_dir(self, spec: JobSpec, own_dir: Path) -> Path:
        """The job's working dir on the host: a sandboxed job's own directory (mounted at
        its spec's `working_dir` inside), else its spec's, else outside the data dir for a
        foreign account (`work_root/<job id>`), else `own_dir` (the job's `work/`)."""
        if self.sandbox is not None:
            return self.sandbox_work_dir(spec)
        if spec.working_dir:
            return Path(spec.working_dir)
        if self.work_root is not None and self.is_foreign(spec):
            return self.work_root / spec.id
        return own_dir

    def view_work_dir(self, spec: JobSpec, own_dir: Path) -> str:
        """The job's working dir as the job sees it."""
        if self.sandbox is not None:
            return view_work_dir(spec, self.sandbox_work_dir(spec))
        return str(self.work_dir(spec, own_dir))

    def prepare_work_dir(
        self, spec: JobSpec, own_dir: Path, owner: tuple[int, int] | None
    ) -> Path | None:
        """Create the job's own working dir (root creates it in a directory of root's,
        then gives it to the job's `owner`) and return it; None for a spec's
        `working_dir` outside a sandbox: the job's wrapper makes it as the job's user."""
        if spec.working_dir and self.sandbox is None:
            return None
        work_dir = self.work_dir(spec, own_dir)
        if work_dir != own_dir:
            assert self.work_root is not None
            self.work_root.mkdir(mode=0o711, parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                work_dir.mkdir(mode=0o700)
        else:
            work_dir.mkdir(parents=True, exist_ok=True)
        if owner is not None:
            fd = os.open(work_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                os.fchown(fd, *owner)
            finally:
                os.close(fd)
        return work_dir

    def base_environment(
        self, spec: JobSpec, environ: Mapping[str, str], work_dir: str, owner: int | None
    ) -> dict[str, str]:
        """What the job inherits from the host, before its own env (see the docstring);
        `owner`: the uid it runs as (None: the agent's)."""
        if not self.is_foreign(spec) or owner is None:
            return {k: v for k, v in environ.items() if not k.startswith(_AGENT_ENV_PREFIX)}
        # only the few neutral ones (none is Dockyard's), picked without a pass over all
        env = {key: environ[key] for key in _HOST_ENV if key in environ}
        try:
            name = pwd.getpwuid(owner).pw_name
        except KeyError:  # a sandboxed job's own uid has no account
            name = f"job-{spec.id}"[:32]
        env.update(USER=name, LOGNAME=name, HOME=work_dir)
        return env


def _has_uid(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True
