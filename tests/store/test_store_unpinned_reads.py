"""The workers' hot reads of one statement begin no transaction on SQLite: a claimed
batch's rows, the placement candidates and the next due time each cost their SELECTs
alone, not a `BEGIN` and a rollback around them (`StoreBase.reading_unpinned`,
`connecting.unpinned_engine`) — on SQLite and PostgreSQL, with the same answers; and a
read or write transaction after one still begins as before (the pooled connection keeps
no trace of it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event, func, select

from reconciler.adapters.db.models import Job
from reconciler.adapters.db.store import Store
from tests.store.test_store_stepbatch import _rig


@contextmanager
def _statements(store: Store) -> Iterator[list[str]]:
    seen: list[str] = []

    def listener(*args: object) -> None:
        seen.append(str(args[2]))

    event.listen(store.engine, "before_cursor_execute", listener)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", listener)


def _begins(statements: list[str]) -> list[str]:
    return [s for s in statements if s.lstrip().upper().startswith("BEGIN")]


def test_the_hot_reads_run_their_selects_alone(store: Store) -> None:
    instance, jobs, tokens = _rig(store, jobs=2)
    pairs = [(j.id, t) for j, t in zip(jobs, tokens, strict=True)]
    with _statements(store) as seen:
        batch = store.load_job_batch(pairs)
        candidates = store.placement_candidates(instance.project_id)
        due = store.leases.next_due(Job)
    assert _begins(seen) == []  # no BEGIN (on SQLite it was one per read)
    assert all(s.lstrip().upper().startswith("SELECT") for s in seen)
    assert len(seen) == 4  # the batch; instances and the jobs on them; the next due
    assert {rows.job.id for rows in batch.values()} == {j.id for j in jobs}
    assert [c.instance_id for c in candidates] == [instance.id]
    assert due is not None and due > 0  # both jobs leased: due at their leases' expiry


def test_transactions_after_an_unpinned_read_still_begin(store: Store) -> None:
    instance, _, _ = _rig(store)
    store.placement_candidates(instance.project_id)
    with _statements(store) as seen:
        with store.reading() as session:
            session.scalar(select(func.count()).select_from(Job))
        with store.writing() as session:
            session.scalar(select(func.count()).select_from(Job))
    if store.engine.dialect.name == "sqlite":  # PostgreSQL's driver begins by itself
        assert _begins(seen) == ["BEGIN", "BEGIN IMMEDIATE"]


def test_an_unpinned_read_sees_what_was_committed_when_each_statement_ran(
    store: Store,
) -> None:
    """Why only reads that need no snapshot use it: its second statement sees a commit
    made after its first (a `reading()` transaction on SQLite does not)."""
    _, (job,), _ = _rig(store, jobs=1)
    count = select(func.count()).select_from(Job)
    with store.reading_unpinned() as session:
        before = session.scalar(count)
        _another_job(store, job.run_id)
        after = session.scalar(count)
    assert (before, after) == (1, 2)
    if store.engine.dialect.name == "sqlite":
        with store.reading() as session:
            pinned = session.scalar(count)
            _another_job(store, job.run_id)
            assert session.scalar(count) == pinned  # the snapshot of its BEGIN


def _another_job(store: Store, run_id: str) -> None:
    store.add(Job(run_id=run_id, status="submitted", job_spec={}, submitted_at=store.now()))
