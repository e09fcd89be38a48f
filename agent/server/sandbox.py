"""The sandbox of a process job run by a root agent: bubblewrap, and a uid of its own.

A root agent must never run, or write through, what a spec names while it is still root
(docs/security.md, "Jobs and the host"). So a process job starts as::

    sh -c 'trap "" HUP INT TERM; exec "$@"'  bwrap <namespaces, mounts>  --
        env --default-signal=HUP,INT,TERM  setpriv --reuid=U --regid=G ... --no-new-privs --
        /bin/sh -c WRAPPER ...

every step of it with a fixed, clean environment (`clean_environment`: a fixed `PATH` and
the job's two markers); the job's own environment reaches only the job's shell, after the
switch (`agent.server.executors.process`).

- bubblewrap gives the job its own mount, PID, IPC and UTS namespaces: the host's
  filesystem read-only (`/` bound read-only as a whole, or, when the job's `working_dir`
  or a volume needs a mount point the host lacks, each entry of `/` bound read-only on
  bubblewrap's own root, where one can be made: `Sandbox.binds_whole_root`), `/dev` with
  only the job's GPUs' device nodes bound in, its own `/proc`, a private `/tmp`, and only
  the job's working directory writable, with the job's instance volumes bound in
  (read-write, or read-only when asked) once `processrules` has checked them against the
  operator's roots; the agent's data dirs are covered by an empty tmpfs.
- bubblewrap's outer process ignores HUP, INT and TERM (set before it is exec'd, reset to
  the default for the job by `env --default-signal`): the agent's SIGTERM to the job's
  process group reaches the job, not the process whose exit tells the agent the job ended
  (killing it would lose nothing, since the job's status goes to `exit_code`, but the
  agent would take the job for ended before its grace period). SIGKILL still ends it, and
  with it the PID namespace: nothing the job left behind outlives it.
- `uidleases.Identities` gives each running job a uid no other running job of this host
  has (of any agent, any project), leased host-wide and reclaimed only once stale. No
  `/etc/passwd` entry is needed.

`ProcessExecutor` builds the command with `Sandbox.argv`; `agent.__main__` makes the
`Sandbox` when the agent is root and `bwrap` exists (else process jobs are refused unless
the operator passed `--unsandboxed-process-jobs`).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.protocol import GpuVendor, JobSpec
from agent.server.mounts import resolved_volume

PACKAGE = "bubblewrap"  # the Debian package of `bwrap`
UNSANDBOXED_FLAG = "--unsandboxed-process-jobs"
UNSANDBOXED_ENV = "DOCKYARD_AGENT_UNSANDBOXED_PROCESS_JOBS"
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IGNORE_STOP_SIGNALS = 'trap "" HUP INT TERM; exec "$@"'
DEFAULT_SIGNALS = "--default-signal=HUP,INT,TERM"
NVIDIA_SHARED = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
HIDDEN_ROOT_ENTRIES = ("proc", "dev", "tmp")  # made anew inside the sandbox


def refusal_without_sandbox() -> str:
    """Why a root agent without bubblewrap runs no process job (the job's error)."""
    return (
        "this host's agent runs as root and has no sandbox for process jobs: install the "
        f"`{PACKAGE}` package (`bwrap`) and restart the agent, run the job in a container "
        f"(`image:`), or start the agent with {UNSANDBOXED_FLAG} ({UNSANDBOXED_ENV}=1) to run "
        "process jobs without one (they then share the host's filesystem, processes and "
        "/tmp, and all run as one account)"
    )


def clean_environment(job_id: str, agent_tag: str) -> dict[str, str]:
    """The whole environment of every privileged step of a job's start: a fixed `PATH`
    and the markers the agent finds the job's processes by (`proctable`). The id is the
    spec's checked `JOB_ID_PATTERN`; the tag is the agent's."""
    env = {"PATH": CLEAN_PATH, "DOCKYARD_JOB_ID": job_id}
    if agent_tag:
        env["DOCKYARD_JOB_AGENT"] = agent_tag
    return env


def gpu_devices(spec: JobSpec, exists: Callable[[str], bool]) -> list[str]:
    """The device nodes of the job's GPUs that exist on this host (pure but for `exists`)."""
    if not spec.gpus:
        return []
    if spec.gpu_vendor == GpuVendor.AMD:
        # ROCm opens every render node to enumerate; HIP_VISIBLE_DEVICES picks the job's
        candidates = ["/dev/kfd", *[f"/dev/dri/renderD{128 + n}" for n in range(64)]]
    else:
        own = [f"/dev/nvidia{index}" for index in spec.gpus]
        candidates = [*own, *(f"/dev/{name}" for name in NVIDIA_SHARED)]
    return [path for path in candidates if exists(path)]


def view_work_dir(spec: JobSpec, host_work_dir: Path) -> str:
    """The job's working dir as the job sees it: its spec's `working_dir` (its own
    directory is mounted there), else the host path of its own directory."""
    return posixpath.normpath(spec.working_dir) if spec.working_dir else str(host_work_dir)


def file_target_problem(index: int, path: str, target: str, work_dir: str) -> str | None:
    """Why archive `index` (spec path `path`, resolved to `target` in the job's view) may
    not be placed: inside the sandbox only the working dir and /tmp are writable."""
    for root in (work_dir, "/tmp"):
        if target == root or target.startswith(root.rstrip("/") + "/"):
            return None
    return (
        f"files: archives[{index}] ({path!r}) lands at {target}, outside the job's working "
        f"dir {work_dir} and /tmp: a process job's sandbox can write only there (the "
        "host's filesystem is read-only to it); use a path relative to the working dir"
    )


def working_dir_problem(spec: JobSpec, exists: Callable[[str], bool]) -> str | None:
    """Why the sandbox cannot mount the job's directory at its `working_dir`: on the
    read-only host view, a mount point can be made only where its parent is new."""
    if not spec.working_dir:
        return None
    path = posixpath.normpath(spec.working_dir)
    if not path.startswith("/"):
        return (
            f"working_dir {spec.working_dir!r}: a sandboxed process job's working_dir is an "
            "absolute path (its home is its own working dir): give one, or none"
        )
    if path == "/":
        return "working_dir /: a process job's working dir cannot be the root of its view"
    parts = path.strip("/").split("/")
    if parts[0] in HIDDEN_ROOT_ENTRIES[:2]:
        return f"working_dir {path}: not inside /{parts[0]}"
    if parts[0] == "tmp" or exists(path) or not exists("/" + parts[0]):
        return None
    return (
        f"working_dir {path}: a process job's sandbox can mount its working dir at a new "
        "top-level directory (e.g. /workflow), under /tmp, or over an existing directory; "
        f"{posixpath.dirname(path)} is the host's, read-only"
    )


def volume_target_problem(path: str, exists: Callable[[str], bool]) -> str | None:
    """Why the sandbox cannot mount an instance volume at `path` (its container path): as
    for the working dir, a mount point on the read-only host view can be made only at a
    new top-level directory, under /tmp, or over an existing directory."""
    target = posixpath.normpath(path)
    if not path.startswith("/") or target == "/":
        return f"volumes: {path!r}: the path a volume is mounted at is absolute, not /"
    top = target.strip("/").split("/")[0]
    if top in HIDDEN_ROOT_ENTRIES[:2]:
        return f"volumes: {target}: a volume cannot be mounted inside /{top}"
    if top == "tmp" or exists(target) or not exists("/" + top):
        return None
    return (
        f"volumes: {target}: a process job's sandbox can mount a volume at a new top-level "
        "directory (e.g. /data), under /tmp, or over an existing directory; "
        f"{posixpath.dirname(target)} is the host's, read-only"
    )


@dataclass(frozen=True)
class Sandbox:
    """How this agent sandboxes process jobs (made only for a root agent with bwrap)."""

    bwrap: str
    setpriv: str
    hidden: tuple[Path, ...] = ()  # covered by an empty tmpfs (the data dirs)
    nsenter: str = "nsenter"  # util-linux's: SSH sessions enter a running job's sandbox
    root_entries: Callable[[], list[tuple[str, str | None]]] = field(
        default=lambda: list_root(Path("/")), compare=False
    )
    exists: Callable[[str], bool] = field(default=os.path.lexists, compare=False)

    def argv(
        self,
        spec: JobSpec,
        *,
        owner: tuple[int, int],
        groups: Sequence[int],
        host_work_dir: Path,
        devices: Iterable[str],
    ) -> list[str]:
        """The command prefix that runs the rest of the argv in the job's sandbox as
        `owner` (its argv[0] is a shell that makes bwrap ignore the stop signals)."""
        work = str(host_work_dir)
        view = view_work_dir(spec, host_work_dir)
        argv = ["/bin/sh", "-c", IGNORE_STOP_SIGNALS, "dockyard-sandbox", self.bwrap]
        # the job's wrapper is the namespace's PID 1 (no reaper of bubblewrap's): when it
        # exits the kernel kills what is left, and bubblewrap's outer process exits only once
        # it is gone, so that exit means no process of the job lives (`LEADS_PID_NAMESPACE`)
        argv += ["--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts"]
        whole_root = self.binds_whole_root([view, *(v.container_path for v in spec.volumes)])
        if whole_root:
            argv += ["--ro-bind", "/", "/"]
        for name, link in [] if whole_root else self.root_entries():
            if name in HIDDEN_ROOT_ENTRIES:
                continue
            path = f"/{name}"
            argv += ["--symlink", link, path] if link is not None else ["--ro-bind", path, path]
        argv += ["--dev", "/dev", "--perms", "1777"]
        if spec.shm_size_mib:  # as a container's `shm_size`; else the tmpfs default (half RAM)
            argv += ["--size", str(spec.shm_size_mib * 2**20)]
        argv += ["--tmpfs", "/dev/shm"]  # shared memory (e.g. PyTorch's data loaders)
        for device in devices:
            argv += ["--dev-bind", device, device]
        argv += ["--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"]
        for hidden in self.hidden:
            if hidden.is_dir():
                argv += ["--tmpfs", str(hidden)]
        argv += ["--bind", work, work]
        if view != work:
            argv += ["--bind", work, view]
        for volume in spec.volumes:  # checked (`processrules`): below the allowed roots
            bind = "--ro-bind" if volume.read_only else "--bind"
            argv += [bind, resolved_volume(volume.host_path), volume.container_path]
        if not whole_root:
            argv += ["--remount-ro", "/"]  # bubblewrap's own root, where the entries are
        argv += ["--chdir", view, "--"]
        argv += ["env", DEFAULT_SIGNALS]
        return argv + switch_argv(self.setpriv, owner, groups, no_new_privs=True)

    def binds_whole_root(self, targets: Iterable[str]) -> bool:
        """Whether the host's `/` can be bound read-only as a whole: every mount point the
        job needs (its working dir, its volumes) already exists on the host or lies in the
        sandbox's own /tmp. Else each entry of `/` is bound on bubblewrap's own root, where
        a new top-level mount point can be made. Both give the same read-only view; the
        whole root costs bubblewrap one read of the whole mount table instead of one per
        entry (a third of its CPU went there: docs/reconcile.md, issue 25's figures)."""
        for target in targets:
            path = posixpath.normpath(target)
            if not (path == "/tmp" or path.startswith("/tmp/") or self.exists(path)):
                return False
        return True

    def enter_argv(self, leader: int, owner: tuple[int, int]) -> list[str]:
        """The command prefix that runs the rest of the argv inside the running job's
        namespaces (`leader`: a process in them) as `owner` (the session's shell then
        changes to the working dir: nsenter's `--wd` would open it in the host's view)."""
        argv = [self.nsenter, f"--target={leader}", "--mount", "--pid", "--ipc", "--uts", "--"]
        return argv + switch_argv(self.setpriv, owner, (), no_new_privs=True)


def switch_argv(
    setpriv: str, owner: tuple[int, int], groups: Sequence[int], *, no_new_privs: bool = False
) -> list[str]:
    """setpriv's argv prefix: become `owner` with only `groups` besides its own group."""
    uid, gid = owner
    listed = f"--groups={','.join(str(g) for g in groups)}" if groups else "--clear-groups"
    argv = [setpriv, f"--reuid={uid}", f"--regid={gid}", listed]
    return argv + (["--no-new-privs", "--"] if no_new_privs else ["--"])


def list_root(root: Path) -> list[tuple[str, str | None]]:
    """The entries of `/`: (name, the link's target, or None for a directory or file)."""
    found: list[tuple[str, str | None]] = []
    with os.scandir(root) as entries:
        for entry in entries:
            link = os.readlink(entry.path) if entry.is_symlink() else None
            found.append((entry.name, link))
    return sorted(found)
