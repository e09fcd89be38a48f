"""The pure half of deploying: remote shell scripts, and reading what they print.

`agent.deploy` runs these over SSH; nothing here does I/O, so the rules (which Python can
run the bundle, what a failure is called) are tested without a host.
"""

from __future__ import annotations

import enum
import shlex
from dataclasses import dataclass

from agent.bundle import Bundle

MIN_PYTHON = (3, 11)


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


def probe_script(remote_dir: str) -> str:
    d = shlex.quote(remote_dir)
    alive = is_alive_test('"$pid"')
    return (
        f'echo "HOME $HOME"; for p in {_PYTHONS}; do '
        f'command -v "$p" >/dev/null 2>&1 && "$p" -c {shlex.quote(_PY_PROBE)} 2>/dev/null; done; '
        f"mkdir -p {d} 2>/dev/null; "
        f'echo "BUNDLE $(readlink {d}/current 2>/dev/null)"; '
        f'echo "SESSION $(cat {d}/session.port 2>/dev/null)"; '
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
        elif tag == "ALIVE":
            alive = True
        elif tag == "DF" and rest.strip().isdigit():
            free = int(rest.strip())
    return Probe(home, tuple(pythons), bundle_id, pid, alive, free, session)


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


def start_script(
    remote_dir: str, python: str, agent_port: int, session_port: int | None = None
) -> str:
    """Start the agent detached; with `session_port`, also its SSH server for users."""
    d = shlex.quote(remote_dir)
    sessions = (
        f'--ssh-port {session_port} --authorized-keys "$PWD/authorized_keys" '
        f'--host-key "$PWD/host_key" '
        if session_port
        else ""
    )
    return (
        f"cd {d} && mkdir -p data || exit 1; S=$(command -v setsid); "
        f"echo {session_port or ''} > session.port; "
        f'PYTHONPATH="$PWD/current/site" PYTHONNOUSERSITE=1 $S nohup {shlex.quote(python)} -s '
        f'-m agent serve --data-dir "$PWD/data" --http-port {agent_port} {sessions}'
        f"> agent.log 2>&1 < /dev/null & echo $! > agent.pid; echo $!"
    )
