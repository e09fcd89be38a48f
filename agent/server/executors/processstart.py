"""How a process job is started: the argv chain, its environment, its files.

The process executor (`executors.process`, whose docstring tells the whole story) calls
`spawn` to start a job; `job_environment` is also the environment of `ssh <run>` into a
process job (`agent.ssh.service`). `spawn` leases the job's identity, makes its working dir
(root, only below a directory of root's), then starts, with a fixed environment, the chain
that ends in `WRAPPER` as the job's user: the job's environment goes in a memfd, its files
in a tar the job's own shell extracts.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping
from typing import Any

from agent.protocol import GpuVendor, JobSpec
from agent.server.archives import resolve_path_env
from agent.server.executors import proctable
from agent.server.executors.base import WAIT_FOR_CHILD
from agent.server.executors.containers import amd_device_groups
from agent.server.jobaccount import JobAccount
from agent.server.sandbox import clean_environment, gpu_devices
from agent.server.store import JobFiles

WRAPPER = (
    """trap : HUP INT TERM
(
  if [ -n "$3" ]; then mkdir -p -- "$3" && cd -- "$3" || exit 126; fi
  if [ -n "$5" ] && ! tar -x -f "/dev/fd/$5" -C / --no-same-owner; then
    echo "dockyard: cannot place the job's files: tar failed (above)" >&2; exit 126
  fi
  . "/dev/fd/$4" || exit 126
  exec "$1" -c "$2"
) </dev/null &
"""
    + WAIT_FOR_CHILD
    + """printf '%s\\n' "$status" >&0
"""
)

# How the wrapper waits is `base.WAIT_FOR_CHILD`'s docstring. The subshell makes the job's
# dir and files as the job's user, and only it sources the job's environment: the wrapper
# itself runs on with the clean one. The two fds are read
# by path (/dev/fd/N: dash takes no fd number above 9 in a redirection, and the agent's
# fds are higher), so they stay open in the job: they hold only the job's own data.

FILES_TAR = "files.tar"  # in the job's directory, from prepare until the job starts
EXIT_CODE_ROOM = b" " * 16  # the exit code file's bytes, written at launch (`launch_process`)

_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PASSED_OVER_ENV = ("DOCKYARD_AGENT_", proctable.MARKER_ENV, proctable.AGENT_MARKER_ENV)


def export_lines(env: Mapping[str, str]) -> bytes:
    """The environment as shell lines the wrapper sources (`export K='v'`); names no
    shell takes (the host's; a spec's are refused at submit) are left out."""
    lines = [
        f"export {name}={shlex.quote(value)}\n"
        for name, value in env.items()
        if _SHELL_NAME.fullmatch(name) and "\0" not in value
    ]
    return "".join(lines).encode()


def join_commands(commands: list[str]) -> str:
    """The job's commands as one shell line, joined with ``&&`` as dstack does."""
    return " && ".join(commands)


def gpu_environment(spec: JobSpec) -> dict[str, str]:
    """Which GPUs the job may use, as its vendor's runtime reads it (empty: none)."""
    visible = ",".join(str(index) for index in spec.gpus)
    if spec.gpu_vendor == GpuVendor.AMD:
        return {"HIP_VISIBLE_DEVICES": visible, "ROCR_VISIBLE_DEVICES": visible}
    # NVIDIA_VISIBLE_DEVICES too: a job that starts containers itself passes its GPUs on
    # ("none": no GPU, but the driver's tools, as the NVIDIA container runtime reads it).
    return {"CUDA_VISIBLE_DEVICES": visible, "NVIDIA_VISIBLE_DEVICES": visible or "none"}


def job_environment(spec: JobSpec, base: dict[str, str], agent_tag: str = "") -> dict[str, str]:
    """The environment of a process job: the agent's, the job's, then Dockyard's markers."""
    env = {key: value for key, value in base.items() if not key.startswith(_PASSED_OVER_ENV)}
    env.update(spec.env)
    env.update(gpu_environment(spec))
    env["DOCKYARD_RUN_NAME"] = spec.run_name
    env[proctable.MARKER_ENV] = spec.id
    if agent_tag:
        env[proctable.AGENT_MARKER_ENV] = agent_tag
    return env


def spawn(
    spec: JobSpec, files: JobFiles, account: JobAccount, agent_tag: str
) -> subprocess.Popen[bytes]:
    """Start the job in a new session, output appended to the job's log.

    Whatever runs before the job's own shell runs with `clean_environment`; the job's
    environment goes in a memfd, its files in a tar, each an inherited fd whose number
    the wrapper gets as an argument (see `executors.process`).
    The wrapper's stdin is ``exit_code``, opened here for writing (the job's own stdin is
    /dev/null): it writes the exit status there and needs no access to the data dir,
    whichever user the job runs as.
    """
    owner = account.owner(spec, files.root)
    work_dir = account.prepare_work_dir(spec, files.work_dir, owner)
    view = account.view_work_dir(spec, files.work_dir)
    base = account.base_environment(spec, os.environ, view, owner[0] if owner else None)
    env = job_environment(spec, base, agent_tag) | resolve_path_env(spec.path_env, view)
    tar = files.root / FILES_TAR
    has_files = bool(spec.archives) and tar.exists()
    make_dir = view if work_dir is None else ""  # a spec's dir outside a sandbox: the job's
    argv = ["/bin/sh", "-c", WRAPPER, "dockyard-job", spec.shell, join_commands(spec.commands)]
    ids: dict[str, Any] = {}
    if account.sandbox is not None:
        assert owner is not None and work_dir is not None
        devices = gpu_devices(spec, os.path.exists)
        prefix = account.sandbox.argv(
            spec,
            owner=owner,
            groups=amd_device_groups(spec),
            host_work_dir=work_dir,
            devices=devices,
        )
        argv = prefix + argv
    elif owner:
        # another account: no groups of ours, only those of its AMD GPUs' devices
        groups = amd_device_groups(spec)
        switch = account.switch_argv(owner, groups)
        if switch is not None:
            argv = switch + argv
        else:
            ids = {"user": owner[0], "group": owner[1], "extra_groups": groups}
    env_fd = os.memfd_create("dockyard-job-env", os.MFD_CLOEXEC)
    opened = [env_fd]
    try:
        os.write(env_fd, export_lines(env))
        os.lseek(env_fd, 0, os.SEEK_SET)
        files_fd = os.open(tar, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW) if has_files else -1
        if has_files:
            opened.append(files_fd)
        argv += [make_dir, str(env_fd), str(files_fd) if has_files else ""]
        exit_fd = os.open(files.exit_code, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        opened.append(exit_fd)
        # its space taken now: the wrapper's status overwrites these blanks, so a disk that
        # fills while the job runs cannot lose how it ended (read back stripped)
        os.write(exit_fd, EXIT_CODE_ROOM)
        os.lseek(exit_fd, 0, os.SEEK_SET)
        with open(files.log, "ab") as log:
            child = subprocess.Popen(
                argv,
                cwd=work_dir or "/",
                env=clean_environment(spec.id, agent_tag),
                stdin=opened[-1],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=tuple(opened[:-1]),
                **ids,
            )
    finally:
        for fd in opened:
            os.close(fd)
    if has_files:
        tar.unlink(missing_ok=True)  # the job holds it open until it has extracted it
    return child
