"""Leases: due rows are claimed once, renewed, fenced and released, on both databases."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from reconciler.adapters.db import Store, StoreLeasing
from reconciler.adapters.db.models import Job, Project, Reconcile, Run
from reconciler.ports import WorkKind
from tests.store.conftest import FakeClock

ROOT = Path(__file__).resolve().parents[2]


def _runs(store: Store, count: int, *, status: str = "submitted") -> list[Run]:
    project = store.get_or_create_project("main")
    return store.add_all(
        [
            Run(
                project_id=project.id,
                run_name=f"run-{i:03d}",
                run_type="task",
                spec={"i": i},
                spec_hash=f"h{i}",
                status=status,
                submitted_at=store.now(),
            )
            for i in range(count)
        ]
    )


def test_claim_takes_due_rows_once_oldest_processed_first(store: Store, clock: FakeClock) -> None:
    runs = _runs(store, 3)
    leases = store.leases
    store.update(Run, runs[0].id, last_processed_at=store.now())
    clock.advance(1)
    store.update(Run, runs[1].id, last_processed_at=store.now())
    first = leases.claim_due(Run, owner="a", limit=2, lease_seconds=30)
    # never processed (NULL) first, then the oldest processed
    assert [row_id for row_id, _ in first] == [runs[2].id, runs[0].id]
    second = leases.claim_due(Run, owner="b", limit=5, lease_seconds=30)
    assert [row_id for row_id, _ in second] == [runs[1].id]
    assert leases.claim_due(Run, owner="c", limit=5, lease_seconds=30) == []
    row = store.get(Run, runs[2].id)
    assert row is not None and row.lock_owner == "a" and row.lock_token == first[0][1]
    assert row.lock_expires_at == store.now() + timedelta(seconds=30)


def test_expired_lease_is_taken_over_and_the_old_fence_fails(
    store: Store, clock: FakeClock
) -> None:
    (run,) = _runs(store, 1)
    leases = store.leases
    [(_, old_token)] = leases.claim_due(Run, owner="a", limit=1, lease_seconds=30)
    clock.advance(29)
    assert leases.claim_due(Run, owner="b", limit=1, lease_seconds=30) == []
    clock.advance(2)
    [(_, new_token)] = leases.claim_due(Run, owner="b", limit=1, lease_seconds=30)
    assert new_token != old_token
    assert not leases.fenced_update(Run, run.id, old_token, {"status": "running"})
    assert leases.renew(Run, [(run.id, old_token)], lease_seconds=30) == set()
    assert not leases.release(Run, run.id, old_token)
    assert not leases.fenced_update(
        Run, run.id, new_token, {"status": "running"}, where=Run.status == "terminating"
    )
    assert leases.fenced_update(
        Run, run.id, new_token, {"status": "running"}, where=Run.status == "submitted"
    )
    loaded = leases.load(Run, run.id, new_token)
    assert loaded is not None and loaded.status == "running"
    assert leases.load(Run, run.id, old_token) is None


def test_renew_keeps_the_row_from_other_claimers(store: Store, clock: FakeClock) -> None:
    (run,) = _runs(store, 1)
    leases = store.leases
    [(_, token)] = leases.claim_due(Run, owner="a", limit=1, lease_seconds=30)
    clock.advance(20)
    assert leases.renew(Run, [(run.id, token)], lease_seconds=30) == {token}
    clock.advance(20)  # 40 s after the claim, 20 s after the renewal
    assert leases.claim_due(Run, owner="b", limit=1, lease_seconds=30) == []


def test_release_writes_values_and_sets_when_due_again(store: Store, clock: FakeClock) -> None:
    (run,) = _runs(store, 1)
    leases = store.leases
    [(_, token)] = leases.claim_due(Run, owner="a", limit=1, lease_seconds=30)
    assert leases.release(Run, run.id, token, due_in=10, values={"status": "provisioning"})
    row = store.get(Run, run.id)
    assert row is not None
    assert (row.status, row.lock_token, row.lock_owner) == ("provisioning", None, None)
    assert row.last_processed_at == store.now()
    clock.advance(9)
    assert leases.claim_due(Run, owner="a", limit=1, lease_seconds=30) == []
    assert leases.make_due(Run, run.id)
    assert len(leases.claim_due(Run, owner="a", limit=1, lease_seconds=30)) == 1


def test_fenced_update_refuses_lease_columns(store: Store) -> None:
    (run,) = _runs(store, 1)
    try:
        store.leases.fenced_update(Run, run.id, "t", {"lock_token": None})
    except ValueError as exc:
        assert "release()" in str(exc)
    else:
        raise AssertionError("lease columns accepted")


def test_leasing_refuses_tables_without_lease_columns(store: Store) -> None:
    try:
        store.leases.claim_due(Project, owner="a", limit=1, lease_seconds=1)
    except TypeError as exc:
        assert "no lease columns" in str(exc)
    else:
        raise AssertionError("projects claimed")


def test_threads_claim_each_row_exactly_once(store: Store) -> None:
    runs = _runs(store, 60)
    claimed: list[list[str]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def claim(slot: int) -> None:
        barrier.wait()
        while batch := store.leases.claim_due(Run, owner=f"t{slot}", limit=3, lease_seconds=600):
            claimed[slot].extend(row_id for row_id, _ in batch)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    everything = [row_id for ids in claimed for row_id in ids]
    assert sorted(everything) == sorted(run.id for run in runs)
    assert len(set(everything)) == len(everything)


def test_two_processes_claim_each_row_exactly_once(store: Store, db_url: str) -> None:
    runs = _runs(store, 200)
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.store.claimer", db_url, f"p{i}"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for process in processes:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    results = [json.loads(process.communicate(timeout=60)[0]) for process in processes]
    assert all(process.returncode == 0 for process in processes)
    everything = results[0] + results[1]
    print("claimed per process:", [len(r) for r in results])
    assert sorted(everything) == sorted(run.id for run in runs)
    assert len(set(everything)) == len(everything) == 200


@dataclass(frozen=True)
class _Lease:
    kind: WorkKind
    row_id: str
    token: str


async def test_store_leasing_per_kind_skips_finished_rows(store: Store, clock: FakeClock) -> None:
    active, finished = _runs(store, 2)
    store.update(Run, finished.id, status="done")
    deleted = _runs(store, 1)[0]
    store.update(Run, deleted.id, deleted=True)
    job = store.add(
        Job(run_id=active.id, status="submitted", job_spec={}, submitted_at=store.now())
    )
    done_job = store.add(
        Job(run_id=active.id, status="failed", job_spec={}, submitted_at=store.now())
    )
    project = store.get_or_create_project("main")
    queued = store.create_reconcile(project.id, trigger="webhook")
    store.add(
        Reconcile(project_id=project.id, trigger="cli", status="succeeded", created_at=store.now())
    )
    leasing = StoreLeasing(store.leases, make_lease=_Lease)

    [run_lease] = await leasing.claim_due("runs", owner="w", limit=10, lease_seconds=30)
    assert run_lease == _Lease("runs", active.id, run_lease.token)
    [job_lease] = await leasing.claim_due("jobs", owner="w", limit=10, lease_seconds=30)
    assert job_lease.row_id == job.id != done_job.id
    [rec_lease] = await leasing.claim_due("reconciles", owner="w", limit=10, lease_seconds=30)
    assert rec_lease.row_id == queued.id

    clock.advance(25)
    stale = _Lease("runs", active.id, "not-the-token")
    kept = await leasing.renew([run_lease, job_lease, stale], lease_seconds=30)
    assert kept == {run_lease.token, job_lease.token}
    await leasing.release(run_lease, due_in=5)
    clock.advance(4)
    assert await leasing.claim_due("runs", owner="w", limit=10, lease_seconds=30) == []
    clock.advance(1)
    assert len(await leasing.claim_due("runs", owner="w", limit=10, lease_seconds=30)) == 1


def test_a_row_woken_while_in_hand_is_due_again_at_release(store: Store, clock: FakeClock) -> None:
    woken, quiet = _runs(store, 2)
    leases = store.leases
    claimed = dict(leases.claim_due(Run, owner="a", limit=2, lease_seconds=30))
    assert leases.make_due(Run, woken.id)  # an event arrives while the row is processed
    leases.release(Run, woken.id, claimed[woken.id], due_in=60)
    leases.release(Run, quiet.id, claimed[quiet.id], due_in=60)
    assert [
        row_id for row_id, _ in leases.claim_due(Run, owner="b", limit=5, lease_seconds=30)
    ] == [woken.id]


def test_next_due_says_how_long_until_a_row_can_be_claimed(store: Store, clock: FakeClock) -> None:
    leases = store.leases
    assert leases.next_due(Run) is None
    (run,) = _runs(store, 1)
    assert leases.next_due(Run) == 0.0  # never processed: due now
    [(_, token)] = leases.claim_due(Run, owner="a", limit=1, lease_seconds=30)
    assert leases.next_due(Run) == 30.0  # in hand: claimable when the lease expires
    leases.release(Run, run.id, token, due_in=12)
    assert leases.next_due(Run) == 12.0
    clock.advance(20)
    assert leases.next_due(Run) == 0.0
