"""A real Dockyard server with the real controller on a real config repo, for tests that
exercise the server end to end (the reconcile's outcome is the engine's, not a stand-in's).

`real_server(tmp_path, files)` commits `files` to a fresh git repo, builds the server
through the composition root with the controller `dockyard server` builds (the engine's,
its reporter the PR bot) watching that repo (fetch interval 1 h: the tests trigger
reconciles), waits for the startup reconcile to finish, and on exit stops the local agent
the controller started and its jobs. Tests whose subject is the layer above the controller
keep `tests/web/fakes.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.local import stop_local_agent
from tests.engine.fixtures import ConfigRepo
from tests.web.serving import Running, running_server, wait_until


@dataclass
class RealServer:
    running: Running
    repo: ConfigRepo

    def reconciles(self) -> list[dict[str, object]]:
        """The project's reconciles as the API lists them, newest first."""
        with self.running.client(self.running.admin_token) as http:
            answer = http.post("/api/project/main/reconciles/list", json={})
        assert answer.status_code == 200, answer.text
        listed: list[dict[str, object]] = answer.json()
        return listed

    def settled(self) -> bool:
        """Whether every reconcile has an outcome (none queued or running)."""
        return all(r["status"] not in ("queued", "running") for r in self.reconciles())


@contextmanager
def real_server(
    tmp_path: Path, files: dict[str, str | None] | None = None, **overrides: object
) -> Iterator[RealServer]:
    repo = ConfigRepo(tmp_path / "config-repo")
    repo.commit(files or {"README.md": "configs\n"}, "first")
    try:
        with running_server(
            tmp_path, None, repo=str(repo.path), fetch_interval=3600, **overrides
        ) as running:
            real = RealServer(running, repo)
            wait_until(
                lambda: bool(real.reconciles()) and real.settled(), 60, "the startup reconcile"
            )
            yield real
    finally:
        stop_local_agent(tmp_path / "data")
