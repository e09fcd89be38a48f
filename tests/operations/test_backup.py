"""Backups: `dockyard db backup` of a live server while it writes, `dockyard db restore` into a
new data dir, and the restored server reconciles to the same state without running a finished
task again. The real runtime (local agent, git repo, SQLite) and the real CLI."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reconciler.adapters.db import Store
from reconciler.ports import Controller
from reconciler.settings import Settings
from tests.engine.fixtures import ConfigRepo, task_yaml
from tests.web.serving import Running, running_server, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
FINISHED = ("succeeded", "failed", "aborted")


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
    from agent.local import stop_local_agent

    try:
        with running_server(root, _real, repo=str(repo.path), fetch_interval=3600) as server:
            yield server
    finally:
        stop_local_agent(root / "data")


def _finished_reconciles(store: Store) -> int:
    project = store.get_or_create_project("main")
    return sum(r.status in FINISHED for r in store.list_reconciles(project.id, limit=500))


def _runs(store: Store, name: str) -> list[tuple[str, str, int]]:
    project = store.get_or_create_project("main")
    return [
        (run.id, run.status, len(store.list_jobs(run.id)))
        for run in store.list_runs(project.id)
        if run.run_name == name
    ]


def test_backup_of_a_live_server_restores_to_the_same_state(tmp_path: Path) -> None:
    repo = ConfigRepo(tmp_path / "config-repo")
    repo.commit({"once.dstack.yml": task_yaml("once", "echo ran-once")})
    backup_dir = tmp_path / "backup"
    backup_dir.mkdir(mode=0o755)  # an empty folder made beforehand, readable by all
    with _server(tmp_path / "a", repo) as first:
        store = first.server.store
        wait_until(lambda: [s for _, s, _ in _runs(store, "once")] == ["done"], timeout=120,
                   what="the task to finish")  # fmt: skip
        before = _runs(store, "once")
        project = store.get_or_create_project("main")
        stop = threading.Event()
        written: list[int] = []

        def load() -> None:  # the server's database keeps being written during the backup
            while not stop.is_set():
                store.append_event(project_id=project.id, target_type="run",
                                   target_name="load", message="write")  # fmt: skip
                written.append(1)

        writer = threading.Thread(target=load)
        writer.start()
        try:
            wait_until(lambda: len(written) > 50, what="writes under way")
            result = _dockyard(
                "db", "backup", str(backup_dir), "--data-dir", str(first.settings.data_dir)
            )
        finally:
            stop.set()
            writer.join(timeout=30)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "secrets.key" in result.stdout and "admin-token" in result.stdout
        token = first.admin_token
    assert stat.S_IMODE(backup_dir.stat().st_mode) == 0o700  # it holds secrets (operations.md)
    copy = sqlite3.connect(backup_dir / "dockyard.db")
    assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    events = copy.execute("SELECT count(*) FROM events WHERE target_name = 'load'").fetchone()[0]
    copy.close()
    assert 0 < events <= len(written)

    restored_dir = tmp_path / "b" / "data"
    result = _dockyard("db", "restore", str(backup_dir), "--data-dir", str(restored_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    again = _dockyard("db", "restore", str(backup_dir), "--data-dir", str(restored_dir))
    assert again.returncode != 0 and "--force" in again.stdout + again.stderr
    assert (restored_dir / "admin-token").read_text().strip() == token

    restored = Store.from_url(f"sqlite:///{restored_dir / 'dockyard.db'}")
    reconciles_at_restore = _finished_reconciles(restored)
    restored.close()
    with _server(tmp_path / "b", repo) as second:
        store = second.server.store
        wait_until(lambda: _finished_reconciles(store) > reconciles_at_restore, timeout=120,
                   what="the restored server's startup reconcile")  # fmt: skip
        project = store.get_or_create_project("main")
        [latest, *_] = store.list_reconciles(project.id)
        assert latest.status == "succeeded", latest.error
        assert latest.plan["summary"]["noop"] >= 1
        assert _runs(store, "once") == before  # the same run, its one job: nothing ran twice
        assert second.client(token).get("/metrics").status_code == 200  # the restored admin
