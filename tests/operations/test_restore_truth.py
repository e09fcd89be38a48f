"""A restored server tells the truth about a service at once (issue 31).

`dockyard db backup` while a service runs, the first server and its local agent (and the
service's processes) gone, `dockyard db restore` into a new data dir, a server started
there: its new local agent never had the service's job. The job the backup recorded
`running` is compared with the agent as soon as the agent answers (`workers/agent_sync`),
not at the jobs' 600 s safety pass: it ends by dstack's rule (`executor_error`, the agent
lost it) and, the service retrying on errors, it runs again on a new replica. The real
runtime, the real CLI, SQLite (a backup is of the server's SQLite database).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Job
from reconciler.ports import Controller
from reconciler.settings import Settings
from tests.engine.fixtures import ConfigRepo, service_yaml
from tests.services.ports import reserved_port
from tests.web.serving import Running, running_server, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
DEADLINE = 90.0
"""Seconds a test waits for the restored server (far under the 600 s safety pass)."""


def _real(settings: Settings, store: Store) -> Controller:
    from reconciler.engine.controller import build_controller

    return build_controller(settings, store)


def _dockyard(*args: str) -> subprocess.CompletedProcess[str]:
    dockyard = Path(sys.executable).parent / "dockyard"
    env = {**os.environ, "COLUMNS": "300"}
    return subprocess.run(
        [str(dockyard), *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


@contextmanager
def _server(root: Path, repo: ConfigRepo) -> Iterator[Running]:
    with running_server(
        root, _real, repo=str(repo.path), fetch_interval=3600, local_job_user="self"
    ) as server:
        yield server  # its end stops its local agent and kills the agent's jobs


def _describe(store: Store) -> str:
    """The jobs, instances and events, for a failure's message."""
    from reconciler.adapters.db.models import Instance

    project = store.get_or_create_project("main")
    lines = [f"job {j.id} {j.status} {j.termination_reason} {j.status_message!r} due={j.due_at}"
             for j in _jobs(store, "web")]  # fmt: skip
    with store.reading() as session:
        for i in session.query(Instance).all():
            where = f"{i.hostname}:{i.ssh_port}/{i.agent_port} since={i.unreachable_since}"
            lines.append(f"instance {i.name} {i.status} {where} {i.status_message!r}")
    lines += [e.message for e in store.list_events(project_id=project.id)][-30:]
    return "\n".join(lines)


def _jobs(store: Store, name: str) -> list[Job]:
    project = store.get_or_create_project("main")
    return [job for run in store.list_runs(project.id) if run.run_name == name
            for job in store.list_jobs(run.id)]  # fmt: skip


@pytest.fixture
def port() -> Iterator[int]:
    with reserved_port() as claimed:
        yield claimed


def test_a_restored_server_replaces_the_service_its_new_agent_never_had(
    tmp_path: Path, port: int
) -> None:
    repo = ConfigRepo(tmp_path / "config-repo")
    # retried on `error`: dstack replaces a replica that failed so (without `retry` the
    # run ends `failed` / `job_failed`, dstack's rule too)
    spec = service_yaml("web", port) + "retry:\n  on_events: [error]\n  duration: 1h\n"
    repo.commit({"web.dstack.yml": spec})
    backup_dir = tmp_path / "backup"
    backup_dir.mkdir(mode=0o700)
    with _server(tmp_path / "a", repo) as first:
        store = first.server.store
        wait_until(lambda: [j.status for j in _jobs(store, "web")] == ["running"], timeout=120,
                   what="the service to run")  # fmt: skip
        [old] = _jobs(store, "web")
        result = _dockyard(
            "db", "backup", str(backup_dir), "--data-dir", str(first.settings.data_dir)
        )
        assert result.returncode == 0, result.stdout + result.stderr
    restored_dir = tmp_path / "b" / "data"
    result = _dockyard("db", "restore", str(backup_dir), "--data-dir", str(restored_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    with _server(tmp_path / "b", repo) as second:
        store = second.server.store

        def replaced() -> bool:
            jobs = {job.id: job for job in _jobs(store, "web")}
            ended = jobs[old.id].status != "running"
            return ended and any(j.status == "running" for i, j in jobs.items() if i != old.id)

        try:
            wait_until(replaced, timeout=DEADLINE, what="the lost replica to be replaced")
        except AssertionError:
            raise AssertionError(_describe(store)) from None
        lost = store.get(Job, old.id)
        assert lost is not None
        assert (lost.status, lost.termination_reason) == ("failed", "executor_error")
        assert "lost" in (lost.status_message or "")
