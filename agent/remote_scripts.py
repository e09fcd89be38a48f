"""The pure half of deploying: remote shell scripts, and reading what they print.

`agent.deploy` runs these over SSH; nothing here does I/O, so the rules (which Python can
run the bundle, what a failure is called) are tested without a host.
"""

from __future__ import annotations

import enum
import hashlib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.bundle import Bundle

MIN_PYTHON = (3, 11)
ISOLATIONS = ("auto", "container", "process")
MAX_IMAGE_CHARS = 255
_IMAGE_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"(?::[0-9]{1,5})?/)?"  # a registry host[:port]/
    rf"{_IMAGE_PART}(?:/{_IMAGE_PART})*"  # the repository path
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"  # :tag
    r"(?:@sha256:[a-f0-9]{64})?"  # @digest
)
_JOB_USER = re.compile(r"auto|self|[a-z_][a-z0-9_-]{0,31}")
_VOLUME_ROOT = re.compile(r"/[A-Za-z0-9._/-]{0,255}")  # lands in a remote shell command


def check_image_name(value: str) -> str:
    """`value` when it is a plain image reference (``[registry/]name[:tag][@sha256:…]``, at
    most 255 characters), else ValueError: it lands in a remote shell command line."""
    if len(value) > MAX_IMAGE_CHARS:
        raise ValueError(f"an image name is at most {MAX_IMAGE_CHARS} characters")
    if not _IMAGE.fullmatch(value):
        raise ValueError(
            f"{value[:80]!r} is not an image name (name, name:tag, registry/name:tag or "
            "name@sha256:digest; lowercase letters, digits, '.', '_', '-', '/')"
        )
    return value


def check_volume_roots(value: str) -> str:
    """`value` when it is ':'-separated absolute paths of plain characters, else ValueError."""
    for root in value.split(":"):
        if not _VOLUME_ROOT.fullmatch(root):
            raise ValueError(
                f"{root[:80]!r} is not a volume root: an absolute path of letters, digits, "
                "'.', '_', '-' and '/' (roots are ':'-separated)"
            )
    return value


def check_job_user(value: str) -> str:
    """`value` when it is `auto`, `self` or a POSIX account name, else ValueError."""
    if not _JOB_USER.fullmatch(value):
        raise ValueError(
            f"{value[:40]!r} is not a job user: auto, self or an account name (lowercase "
            "letters, digits, '_', '-', not first a digit or '-', at most 32 characters)"
        )
    return value


@dataclass(frozen=True)
class AgentOptions:
    """The job options a deployed agent is started with (the server's `--ssh-*` settings).

    Checked when made: every value lands in the remote shell command `start_script` writes.
    `digest` is written next to the agent when it starts and read back by the probe, so a
    deploy with other options replaces the agent (its jobs are re-adopted)."""

    job_isolation: str = "auto"
    default_image: str | None = None  # None: the agent's own default (dstack's image)
    job_user: str = "auto"
    allow_root_jobs: bool = False
    min_free_disk: int | None = None  # None: the agent's default (1 GiB)
    volume_roots: str | None = None  # ':'-separated; None: the agent's (/mnt /data /srv /scratch)
    unsandboxed_process_jobs: bool = False  # a root host without bubblewrap runs them anyway
    allow_job_users: str | None = None  # ','-separated: what a process job's `user:` may name

    def __post_init__(self) -> None:
        if self.job_isolation not in ISOLATIONS:
            raise ValueError(f"job isolation {self.job_isolation[:20]!r}: one of {ISOLATIONS}")
        if self.default_image is not None:
            check_image_name(self.default_image)
        check_job_user(self.job_user)
        if self.min_free_disk is not None and self.min_free_disk < 0:
            raise ValueError("min free disk is a number of bytes, 0 or more")
        if self.volume_roots is not None:
            check_volume_roots(self.volume_roots)
        # one spelling ("a,b"), so that options read back from a host compare equal
        object.__setattr__(self, "allow_job_users", ",".join(self.job_users()) or None)
        for name in self.job_users():
            if name in ("auto", "self"):
                raise ValueError(f"{name!r} is not a job user to allow: name an account")
            check_job_user(name)

    def job_users(self) -> list[str]:
        """The accounts of `allow_job_users` (each an `--allow-job-user`)."""
        return [n.strip() for n in (self.allow_job_users or "").split(",") if n.strip()]

    def args(self) -> tuple[str, ...]:
        """The agent's command-line flags (always explicit: the host's environment cannot
        change what the server asked for)."""
        args = ["--job-isolation", self.job_isolation, "--job-user", self.job_user]
        if self.default_image is not None:
            args += ["--default-image", self.default_image]
        if self.allow_root_jobs:
            args.append("--allow-root-jobs")
        if self.min_free_disk is not None:
            args += ["--min-free-disk", str(int(self.min_free_disk))]
        for root in self.volume_roots.split(":") if self.volume_roots else ():
            args += ["--volume-root", root]
        if self.unsandboxed_process_jobs:
            args.append("--unsandboxed-process-jobs")
        for name in self.job_users():
            args += ["--allow-job-user", name]
        return tuple(args)

    def digest(self) -> str:
        return hashlib.sha256("\0".join(self.args()).encode()).hexdigest()[:16]

    @classmethod
    def from_args(cls, args: Sequence[str]) -> AgentOptions:
        """Pure: the options whose `args()` these are (read back from a host: checked like
        any other; ValueError for anything `args()` does not write)."""
        values: dict[str, Any] = {}
        rest = list(args)
        while rest:
            flag = rest.pop(0)
            if flag == "--allow-root-jobs":
                values["allow_root_jobs"] = True
            elif flag == "--unsandboxed-process-jobs":
                values["unsandboxed_process_jobs"] = True
            elif flag == "--allow-job-user" and rest:
                names = [values["allow_job_users"]] if "allow_job_users" in values else []
                values["allow_job_users"] = ",".join([*names, rest.pop(0)])
            elif flag == "--volume-root" and rest:
                roots = [values["volume_roots"]] if "volume_roots" in values else []
                values["volume_roots"] = ":".join([*roots, rest.pop(0)])
            elif flag in _FLAG_FIELDS and rest:
                values[_FLAG_FIELDS[flag]] = rest.pop(0)
            else:
                raise ValueError(f"not an agent option: {flag[:40]!r}")
        if "min_free_disk" in values:
            values["min_free_disk"] = int(values["min_free_disk"])
        return cls(**values)


_FLAG_FIELDS = {
    "--job-isolation": "job_isolation",
    "--job-user": "job_user",
    "--default-image": "default_image",
    "--min-free-disk": "min_free_disk",
}


def is_alive_test(pid: str) -> str:
    """Shell test: is `pid` a live process? (``kill -0`` alone also passes zombies, which
    hosts whose PID 1 does not reap keep around.)"""
    return f"kill -0 {pid} 2>/dev/null && ! grep -qs '^State:[[:space:]]*Z' /proc/{pid}/status"


_PYTHONS = "python3.11 python3 python3.12 python3.13 python3.14"
_PY_PROBE = (
    "import sys,platform;print('PY',sys.executable,sys.implementation.cache_tag,"
    "platform.machine(),'%d.%d.%d'%sys.version_info[:3])"
)


class DeployFailure(enum.StrEnum):
    auth_refused = "auth_refused"
    unreachable = "unreachable"
    no_python = "no_python"
    disk_full = "disk_full"
    port_in_use = "port_in_use"
    install_failed = "install_failed"
    start_failed = "start_failed"
    bad_key = "bad_key"  # the server's key file for the host is refused or unreadable


class DeployError(Exception):
    """The agent could not be deployed to one host; the message says which and why."""

    def __init__(self, host: str, failure: DeployFailure, detail: str) -> None:
        super().__init__(f"host {host}: {failure.value.replace('_', ' ')}: {detail}")
        self.host = host
        self.failure = failure
        self.detail = detail


@dataclass(frozen=True)
class PythonFound:
    executable: str
    cache_tag: str
    machine: str
    version: tuple[int, ...]


@dataclass(frozen=True)
class Probe:
    """What one remote round trip learned about a host (parsed by `parse_probe`)."""

    home: str
    pythons: tuple[PythonFound, ...]
    bundle_id: str | None
    agent_pid: int | None
    agent_alive: bool
    free_kib: int | None
    session_port: int | None = None  # the users' SSH port the running agent was given
    options: str | None = None  # the `AgentOptions.digest` the running agent was started with
    options_args: tuple[str, ...] = ()  # ... and its flags (`AgentOptions.args`)


def probe_script(remote_dir: str) -> str:
    d = shlex.quote(remote_dir)
    alive = is_alive_test('"$pid"')
    return (
        f'echo "HOME $HOME"; for p in {_PYTHONS}; do '
        f'command -v "$p" >/dev/null 2>&1 && "$p" -c {shlex.quote(_PY_PROBE)} 2>/dev/null; done; '
        f"mkdir -p {d} 2>/dev/null; "
        f'echo "BUNDLE $(readlink {d}/current 2>/dev/null)"; '
        f'echo "SESSION $(cat {d}/session.port 2>/dev/null)"; '
        f'echo "OPTIONS $(cat {d}/agent.options 2>/dev/null)"; '
        f'pid=$(cat {d}/agent.pid 2>/dev/null); echo "PID $pid"; '
        f'[ -n "$pid" ] && {alive} && echo ALIVE; '
        f"echo \"DF $(df -Pk {d} 2>/dev/null | awk 'NR==2 {{print $4}}')\""
    )


def _parse_python(fields: list[str]) -> PythonFound | None:
    if len(fields) != 4:
        return None
    try:
        version = tuple(int(part) for part in fields[3].split("."))
    except ValueError:
        return None
    return PythonFound(fields[0], fields[1], fields[2], version)


def parse_probe(output: str) -> Probe:
    """Pure: the probe script's output as a `Probe`."""
    home, bundle_id, pid, alive, free, session = "", None, None, False, None, None
    options: str | None = None
    options_args: tuple[str, ...] = ()
    pythons: list[PythonFound] = []
    for line in output.splitlines():
        tag, _, rest = line.strip().partition(" ")
        if tag == "HOME":
            home = rest.strip()
        elif tag == "PY" and (found := _parse_python(rest.split())):
            if found.executable not in {p.executable for p in pythons}:
                pythons.append(found)
        elif tag == "BUNDLE" and rest.strip():
            bundle_id = rest.strip().rstrip("/").removeprefix("bundle-")
        elif tag == "PID" and rest.strip().isdigit():
            pid = int(rest.strip())
        elif tag == "SESSION" and rest.strip().isdigit():
            session = int(rest.strip())
        elif tag == "OPTIONS" and rest.strip():
            options, options_args = _parse_options(rest)
        elif tag == "ALIVE":
            alive = True
        elif tag == "DF" and rest.strip().isdigit():
            free = int(rest.strip())
    return Probe(home, tuple(pythons), bundle_id, pid, alive, free, session, options, options_args)


def _parse_options(text: str) -> tuple[str | None, tuple[str, ...]]:
    """The digest and flags of an ``agent.options`` line (nothing when it is not one)."""
    try:
        digest, *args = shlex.split(text)
    except ValueError:
        return None, ()
    return (digest, tuple(args)) if digest.isalnum() else (None, ())


def choose_python(host: str, probe: Probe, bundle: Bundle) -> PythonFound:
    """Pure: the first Python ≥ 3.11 able to run `bundle`, or the `DeployError` saying why."""
    recent = [p for p in probe.pythons if p.version[:2] >= MIN_PYTHON]
    for python in recent:
        if python.cache_tag == bundle.cache_tag and python.machine == bundle.machine:
            return python
    found = ", ".join(f"{p.executable} {'.'.join(map(str, p.version))}" for p in probe.pythons)
    if not recent:
        raise DeployError(
            host,
            DeployFailure.no_python,
            f"no Python ≥ 3.11 on PATH (found: {found or 'none'}); install python3.11 or newer",
        )
    raise DeployError(
        host,
        DeployFailure.no_python,
        f"the agent bundle needs {bundle.cache_tag} on {bundle.machine}, found: {found}; "
        f"install {bundle.cache_tag.replace('cpython-3', 'python3.')} on the host",
    )


def classify_output(text: str) -> DeployFailure | None:
    """Pure: a failure kind recognisable in a remote command's output, if any."""
    lowered = text.lower()
    if "no space left on device" in lowered or "disk quota exceeded" in lowered:
        return DeployFailure.disk_full
    if "address already in use" in lowered:
        return DeployFailure.port_in_use
    return None


def sandbox_script() -> str:
    """Install bubblewrap (the agent's sandbox for process jobs) when the login user is
    root, `bwrap` is missing and the host has apt-get; never fails the deploy: an agent
    without it refuses process jobs, naming the package (`agent.server.sandbox`)."""
    install = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null 2>&1"
    return (
        '[ "$(id -u)" = 0 ] && ! command -v bwrap >/dev/null 2>&1 && '
        "command -v apt-get >/dev/null 2>&1 && "
        f"{{ {install} || {{ apt-get update -q >/dev/null 2>&1 && {install}; }}; }}; true"
    )


def start_script(
    remote_dir: str,
    python: str,
    agent_port: int,
    session_port: int | None = None,
    options: AgentOptions | None = None,
) -> str:
    """Start the agent detached; with `session_port`, also its SSH server for users; with
    `options`, its job flags (each shell-quoted; their digest and themselves written to
    agent.options, read back by `probe_script`)."""
    d = shlex.quote(remote_dir)
    options = options or AgentOptions()
    flags = "".join(f"{shlex.quote(arg)} " for arg in options.args())
    sessions = (
        f'--ssh-port {session_port} --authorized-keys "$PWD/authorized_keys" '
        f'--host-key "$PWD/host_key" '
        if session_port
        else ""
    )
    return (
        f"cd {d} && mkdir -p data || exit 1; S=$(command -v setsid); "
        f"echo {session_port or ''} > session.port; "
        f"echo {options.digest()} {shlex.quote(shlex.join(options.args()))} > agent.options; "
        f'PYTHONPATH="$PWD/current/site" PYTHONNOUSERSITE=1 $S nohup {shlex.quote(python)} -s '
        f'-m agent serve --data-dir "$PWD/data" --http-port {agent_port} {sessions}{flags}'
        f"> agent.log 2>&1 < /dev/null & echo $! > agent.pid; echo $!"
    )
