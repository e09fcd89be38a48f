"""The jobs worker's hot reads on SQLite: the claim, `next_due` and the wake of waiting
jobs read by index, so their cost follows the active jobs (or the first in line), not the
finished history every job leaves behind, nor the length of the queue.

SQLite's own plan (`EXPLAIN QUERY PLAN`) of the statements the store runs, captured as
they run: a full `SCAN jobs` or a sort of the whole line fails. (PostgreSQL plans by its
statistics, which a test-sized table does not have.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from reconciler.adapters.db.jobsteps import JobStep, WaitPlace
from reconciler.adapters.db.models import Job
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import pending_work
from tests.store.test_store_jobsteps import _in_line, _rig


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """A migrated SQLite store of its own (the plans are SQLite's)."""
    store = Store.from_url(f"sqlite:///{tmp_path / 'plans.db'}", migrate=True)
    yield store
    store.close()


@pytest.fixture
def captured(sqlite_store: Store) -> Iterator[list[tuple[str, Any]]]:
    """Every statement on the jobs table run from now on, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, *rest: Any) -> None:
        if " jobs" in statement and not statement.lstrip().startswith("INSERT"):
            seen.append((statement, parameters))

    event.listen(sqlite_store.engine, "before_cursor_execute", before)
    yield seen
    event.remove(sqlite_store.engine, "before_cursor_execute", before)


def _plans(store: Store, statements: list[tuple[str, Any]]) -> list[str]:
    with store.engine.connect() as connection:
        raw = connection.connection.driver_connection
        assert raw is not None
        return [
            " / ".join(str(row[3]) for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}", params))
            for sql, params in statements
        ]


def test_the_claim_and_next_due_read_only_active_jobs(
    sqlite_store: Store, captured: list[tuple[str, Any]]
) -> None:
    store = sqlite_store
    _rig(store)
    captured.clear()
    store.leases.claim_due(Job, owner="t", limit=40, lease_seconds=30, where=pending_work("jobs"))
    store.leases.next_due(Job, where=pending_work("jobs"))
    plans = _plans(store, captured)
    assert len(plans) >= 2
    for plan in plans:
        assert "SCAN jobs" not in plan, plan
        assert "USING INDEX ix_jobs_status" in plan or "USING INDEX ix_jobs_waiting" in plan, plan


def test_a_wake_walks_the_line_in_its_order(
    sqlite_store: Store, captured: list[tuple[str, Any]]
) -> None:
    store = sqlite_store
    instance, job, token = _rig(store, total_blocks=4)
    _in_line(store, job, [1, 2, 1])
    captured.clear()
    store.wake_waiting_jobs(instance.project_id, 1)
    passing = JobStep(
        job_id=job.id, token=token, read_status="submitted", project_id=instance.project_id,
        run_id=job.run_id, values={"room_ask": 2},
        pass_wake=WaitPlace(1, job.submitted_at, job.id),
    )  # fmt: skip
    store.record_job_step(passing)
    wakes = [(sql, p) for sql, p in captured if "jobs.id IN (SELECT" in sql]
    assert len(wakes) == 2  # the wake, then the wake passed down the line
    for plan in _plans(store, wakes):
        assert "USING INDEX ix_jobs_waiting_line" in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # the line is not sorted: the index is
