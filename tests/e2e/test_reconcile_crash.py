"""Crash safety: SIGKILL the server at several points of an apply; it converges on restart.

A real `dockyard server` process reconciles a config repo of several tasks on the local
fleet. The test kills it with SIGKILL as soon as it observes each point — the reconcile
entering `apply`, the first run row written, the first job running, the first run done —
and starts it again. After the last start every task has run exactly once: one run per
task, one job per run, all `done`, and each task's output in its log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.local import stop_local_agent
from reconciler.adapters.db.models import Fleet, Instance, Job, Reconcile, Run
from reconciler.adapters.db.store import Store
from tests.engine.fixtures import ConfigRepo, task_yaml

TASKS = [f"task-{i}" for i in range(5)]
DOCKYARD = Path(sys.executable).parent / "dockyard"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    def __init__(self, tmp_path: Path, repo: Path) -> None:
        self.data_dir = tmp_path / "data"
        self.log = tmp_path / "server.log"
        self.env = {
            **os.environ,
            "DOCKYARD_CONFIG": str(tmp_path / "cli.yml"),
            "DOCKYARD_DATA_DIR": str(self.data_dir),
        }
        self.args = [str(DOCKYARD), "server", "--repo", str(repo), "--branch", "main"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.args, "--port", str(_free_port())],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _wait(
    condition: Callable[[], bool], server: ServerProcess, *, within: float, what: str
) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if not server.alive():
            raise AssertionError(f"server exited: {server.log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {within}s:\n{_describe(server)}")
        time.sleep(0.02)


def _describe(server: ServerProcess) -> str:
    store = Store.from_url(f"sqlite:///{server.data_dir / 'dockyard.db'}")
    lines = []
    fields = ("name", "run_name", "status", "stage", "status_message", "error", "lock_owner")
    try:
        with store.reading() as session:
            for model in (Reconcile, Fleet, Instance, Run, Job):
                for row in session.query(model).all():
                    values = [f"{f}={getattr(row, f)!r}" for f in fields if hasattr(row, f)]
                    lines.append(f"{model.__name__} " + " ".join(values))
    finally:
        store.close()
    agent_log = server.data_dir / "local-agent" / "agent.log"
    agent = "\n".join(
        line
        for line in (agent_log.read_text() if agent_log.exists() else "").splitlines()
        if '" 200' not in line
    )
    return "\n".join(lines) + "\nagent log:\n" + agent[-3000:]


KILL_POINTS = ("reconcile applying", "first run written", "first job running")


def test_sigkill_at_any_point_of_an_apply_converges(tmp_path: Path) -> None:
    _crash_and_converge(tmp_path, KILL_POINTS)


def test_sigkill_while_jobs_finish_converges(tmp_path: Path) -> None:
    _crash_and_converge(tmp_path, ("first run done",))


def _crash_and_converge(tmp_path: Path, kill_at: tuple[str, ...]) -> None:
    repo = ConfigRepo(tmp_path / "config-repo")
    repo.commit(
        {f"{name}.dstack.yml": task_yaml(name, f"sleep 2; echo output-of-{name}") for name in TASKS}
    )
    server = ServerProcess(tmp_path, repo.path)
    server.start()
    store: Store | None = None
    try:
        _wait(lambda: (server.data_dir / "dockyard.db").exists(), server, within=30, what="db")
        _wait(lambda: _reconciles(server.data_dir), server, within=30, what="reconcile")
        store = Store.from_url(f"sqlite:///{server.data_dir / 'dockyard.db'}")
        project_id = store.get_or_create_project("main").id

        def runs() -> list[tuple[str, str]]:
            return [(r.run_name, r.status) for r in store.list_runs(project_id)]

        def jobs(status: str) -> bool:
            return any(
                j.status == status
                for r in store.list_runs(project_id)
                for j in store.list_jobs(r.id)
            )

        points: list[tuple[str, Callable[[], bool]]] = [
            ("reconcile applying", lambda: _stage(store, project_id) in ("apply", "record")),
            ("first run written", lambda: bool(runs())),
            ("first job running", lambda: jobs("running") or jobs("done")),
            ("first run done", lambda: any(s == "done" for _, s in runs())),
        ]
        points = [(what, point) for what, point in points if what in kill_at]
        for what, point in points:
            _wait(point, server, within=60, what=what)
            server.kill()
            server.start()

        def converged() -> bool:
            current = runs()
            return len(current) >= len(TASKS) and all(s == "done" for _, s in current)

        _wait(converged, server, within=90, what="all tasks done")
        assert sorted(name for name, _ in runs()) == TASKS  # one run per task, none lost
        for run in store.list_runs(project_id):
            run_jobs = store.list_jobs(run.id)
            assert [j.status for j in run_jobs] == ["done"], (run.run_name, run_jobs)
            log = (
                server.data_dir
                / "projects"
                / "main"
                / "logs"
                / run.run_name
                / f"{run_jobs[0].id}.log"
            )
            assert log.read_text().count(f"output-of-{run.run_name}") == 1
        assert server.starts == 1 + len(points)
    finally:
        server.stop()
        if store is not None:
            store.close()
        stop_local_agent(server.data_dir)


def _reconciles(data_dir: Path) -> bool:
    try:
        store = Store.from_url(f"sqlite:///{data_dir / 'dockyard.db'}")
    except Exception:
        return False
    try:
        project = store.get_project("main")
        return project is not None and bool(store.list_reconciles(project.id))
    except Exception:
        return False
    finally:
        store.close()


def _stage(store: Store | None, project_id: str) -> str | None:
    assert store is not None
    latest = store.list_reconciles(project_id, limit=1)
    return latest[0].stage if latest else None
