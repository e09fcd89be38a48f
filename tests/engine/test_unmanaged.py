"""The reconcile queue (coalescing) and the CLI's unmanaged apply/stop/delete, on SQLite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.adapters.db.models import Run
from reconciler.adapters.db.store import Store
from reconciler.engine import unmanaged
from reconciler.engine.controller import release_dead_leases, server_identity
from reconciler.engine.triggers import queue_reconcile
from reconciler.errors import UsageError
from schemas import ConfigError
from tests.engine.fixtures import task_yaml


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", migrate=True)


def test_queued_reconciles_coalesce_and_move_to_the_newest_revision(store: Store) -> None:
    first = queue_reconcile(store, "main", trigger="webhook", delivery_id="d1", revision="a" * 40)
    second = queue_reconcile(store, "main", trigger="webhook", delivery_id="d2", revision="b" * 40)
    assert second == first
    row = store.get_reconcile(first)
    assert row is not None and (row.attempted_revision, row.delivery_id) == ("b" * 40, "d2")
    assert queue_reconcile(store, "main", trigger="timer") == first
    row = store.get_reconcile(first)
    assert row is not None and row.attempted_revision is None  # the head wins
    assert queue_reconcile(store, "main", trigger="timer", revision="c" * 40) == first
    assert store.get_reconcile(first).attempted_revision is None  # type: ignore[union-attr]

    store.set_reconcile_stage(first, "fetch")
    assert queue_reconcile(store, "main", trigger="api") != first  # a running one is not reused
    assert queue_reconcile(store, "other", trigger="api") != first


def _runs(store: Store) -> list[Run]:
    project = store.get_or_create_project("main")
    return sorted(store.list_runs(project.id), key=lambda r: r.submitted_at)


def test_an_unmanaged_task_is_applied_once_and_forced_again(store: Store) -> None:
    text = task_yaml("adhoc", "echo hi")
    plan, hints = unmanaged.apply_one(
        store, "main", text=text, path="x.yml", user="ann", force=False
    )
    assert plan["action"] == "create" and hints == {"runs", "jobs"}  # a task's jobs come with it
    resource = store.get_resource("main", "task", "adhoc")
    assert resource is not None and resource.origin == "cli:ann"

    again, _ = unmanaged.apply_one(store, "main", text=text, path="x.yml", user="ann", force=False)
    assert again["action"] == "noop"
    assert len(_runs(store)) == 1
    store.update(Run, _runs(store)[0].id, status="done")
    forced, _ = unmanaged.apply_one(store, "main", text=text, path="x.yml", user="ann", force=True)
    assert forced["action"] == "replace"
    assert [r.status for r in _runs(store)] == ["done", "submitted"]


def test_a_git_managed_resource_cannot_be_changed_from_the_cli(store: Store) -> None:
    store.record_resource(
        "main",
        "task",
        "train",
        origin="git:train.dstack.yml@abc",
        path="train.dstack.yml",
        commit="abc",
        spec={},
        spec_hash="h",
        status="submitted",
    )
    action = unmanaged.plan_one(store, "main", text=task_yaml("train"), path="t.yml", user="a")
    assert action.action.value == "blocked"
    assert "managed by Git (train.dstack.yml)" in action.reason
    with pytest.raises(UsageError, match="managed by Git"):
        unmanaged.apply_one(
            store, "main", text=task_yaml("train"), path="t.yml", user="a", force=False
        )
    with pytest.raises(ConfigError):
        unmanaged.plan_one(
            store, "main", text="type: task\nname: x1\nnope: 1\n", path="t.yml", user="a"
        )


def test_stop_and_delete_a_run(store: Store) -> None:
    unmanaged.apply_one(
        store, "main", text=task_yaml("adhoc"), path="x.yml", user="ann", force=False
    )
    with pytest.raises(UsageError, match="still active"):
        unmanaged.delete_resource(store, "main", "run", "adhoc")
    assert unmanaged.stop_run(store, "main", "adhoc", abort=True)
    (run,) = _runs(store)
    assert (run.status, run.termination_reason) == ("terminating", "aborted_by_user")
    store.update(Run, run.id, status="terminated")
    assert not unmanaged.stop_run(store, "main", "adhoc", abort=False)
    assert unmanaged.delete_resource(store, "main", "run", "adhoc") == "runs"
    assert store.get(Run, run.id).deleted  # type: ignore[union-attr]
    assert store.get_resource("main", "task", "adhoc") is None
    with pytest.raises(UsageError, match="no run"):
        unmanaged.stop_run(store, "main", "ghost", abort=False)


def test_a_restarted_server_takes_back_only_the_leases_of_dead_processes(
    store: Store, tmp_path: Path
) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(gone.stdout)
    unmanaged.apply_one(store, "main", text=task_yaml("one"), path="a.yml", user="a", force=False)
    unmanaged.apply_one(store, "main", text=task_yaml("two"), path="b.yml", user="a", force=False)
    me = server_identity(tmp_path)
    dead = server_identity(tmp_path, pid=dead_pid)
    live_replica = server_identity(tmp_path, pid=1)  # pid 1 is alive
    one, two = _runs(store)
    for run in (one, two):  # due now (a new task run sleeps until its jobs move)
        store.update(Run, run.id, due_at=None)
    store.leases.claim_due(Run, owner=f"{dead}/runs", limit=1, lease_seconds=600)
    store.leases.claim_due(Run, owner=f"{live_replica}/runs", limit=1, lease_seconds=600)

    assert release_dead_leases(store, me) == 1
    owners = sorted(str(store.get(Run, r.id).lock_owner) for r in (one, two))  # type: ignore[union-attr]
    assert owners == ["None", f"{live_replica}/runs"]
