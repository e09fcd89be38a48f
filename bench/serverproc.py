"""`dockyard server` as a process for the operator benches (bench/restart_progress.py,
bench/full_disk.py): a config repo of N tasks on the local fleet, the server started and
stopped as an operator does (SIGTERM: a graceful stop), its SQLite store read beside it.

Not a test fixture: the benches time what an operator sees, on the real server process.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FINAL = ("done", "failed", "terminated", "aborted")
TASK = """type: task
name: {name}
commands:
  - '{command}'
resources:
  cpu: {cpu}..
  memory: {memory}..
  disk: {disk}..
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def config_repo(
    path: Path, tasks: dict[str, str], *, cpu: str = "1", memory: str = "0.1GB", disk: str = "0.1GB"
) -> Path:
    """A git repo holding the local fleet and one task file per `name: command` (each
    asking for `cpu`, `memory` and `disk` at least: the local fleet runs as many at once as
    their minimums fit, docs/fleets.md)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "fleet.dstack.yml").write_text("type: fleet\nname: local\nnodes: 1\n")
    for name, command in tasks.items():
        (path / f"{name}.dstack.yml").write_text(
            TASK.format(name=name, command=command, cpu=cpu, memory=memory, disk=disk)
        )
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "tasks"]):
        subprocess.run(
            ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=path, check=True
        )
    return path


@dataclass
class Server:
    """One `dockyard server` on `data_dir`, its repo `repo`; `start`/`stop` as an operator."""

    data_dir: Path
    repo: Path | None
    """The `--repo` config repo; None: the server follows its sources file only."""
    work: Path
    """Where its HOME and its output (`server.log`) go: outside the data dir."""
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def start(self, *, within: float = 120.0) -> float:
        """Start it; the monotonic time it first answered its healthcheck."""
        home = self.work / "home"
        env = {
            **os.environ,
            "HOME": str(home),
            "DOCKYARD_CONFIG": str(home / "config.yml"),
            "DOCKYARD_PORT": str(self.port),
            "DOCKYARD_LOCAL_JOB_ISOLATION": "process",
            **({"DOCKYARD_REPO": str(self.repo)} if self.repo is not None else {}),
            **self.env,
        }
        self.log = self.work / "server.log"
        code = "from reconciler.cli.main import run; run()"
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, "server", "--data-dir", str(self.data_dir)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited; see {self.log}")
            if self._answers():
                return time.monotonic()
            time.sleep(0.02)
        raise TimeoutError(f"the server did not answer within {within:.0f} s; see {self.log}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"GET /healthcheck HTTP/1.0\r\nHost: x\r\n\r\n")
                return sock.recv(16).startswith(b"HTTP/1.1 200") or False
        except OSError:
            return False

    def stop(self, *, within: float = 60.0) -> int:
        """SIGTERM, as an operator's graceful stop; the exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=within)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def job_rows(db: Path) -> list[tuple[str, str, int]]:
    """(run name, job status, log offset) of every job, read beside the server."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        query = (
            "SELECT r.run_name, j.status, j.log_offset FROM jobs j JOIN runs r ON r.id = j.run_id"
        )
        return [(str(n), str(s), int(o or 0)) for n, s, o in conn.execute(query)]


def wait_for(condition: object, *, within: float, every: float = 0.02) -> float:
    """Poll `condition()` until true; the monotonic time it was."""
    deadline = time.monotonic() + within
    while True:
        if callable(condition) and condition():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(every)


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    if not ordered:
        return {}
    return {
        "p50": round(ordered[len(ordered) // 2], 3),
        "max": round(ordered[-1], 3),
        "min": round(ordered[0], 3),
    }


def end_jobs(data_dir: Path) -> int:
    """SIGKILL every process whose command line names `data_dir` (the jobs its local
    agent started keep running after the agent stops, by design): a bench leaves none
    behind to load the next. How many were ended."""
    ended = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if str(data_dir).encode() in cmdline:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                ended += 1
            except OSError:
                continue
    return ended
