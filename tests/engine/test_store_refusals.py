"""A store that refuses writes for a while (a full disk): no worker dies of it, no row stays
leased, no agent event is passed over; on SQLite and PostgreSQL.

The database is real; its refusals are the driver's own disk-full errors raised at the
DB-API edge (`tests/engine/refusedwrites.py`). The workers and the event follower are the
server's own (`Worker` with the store's `refused_by_store`, `JobEventFollower`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

import pytest

from agent.client import AgentClient
from agent.jobevents import JobEnd, JobEvent, JobEventKind, JobEventsPage
from agent.protocol import JobState
from reconciler.adapters.db.models import Fleet, Instance, Job, Run, Volume
from reconciler.adapters.db.refusals import refused_by_store
from reconciler.adapters.db.replicas import this_server
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.engine.jobevents import JobEventFollower
from reconciler.engine.replicas import ReplicaHeartbeat
from reconciler.engine.worker import Lease, ProcessResult, Worker, WorkerConfig
from tests.engine.refusedwrites import RefusedWrites

HOUR = 3600.0


class GatedAgent:
    """An agent's long-poll: a reset page, then `page` once `gate` is set, then nothing."""

    name = "gated"

    def __init__(self, reset: JobEventsPage, page: JobEventsPage) -> None:
        self.gate = asyncio.Event()
        self.polls = 0
        self._reset, self._page = reset, page

    async def job_events(self, since: int, epoch: str, *, wait: float) -> JobEventsPage:
        self.polls += 1
        if self.polls == 1:
            return self._reset
        await self.gate.wait()
        if self.polls == 2:
            return self._page
        await asyncio.sleep(HOUR)  # held, as the agent holds a reader with no news
        raise AssertionError("unreachable")


async def _until(condition: Callable[[], bool], within: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def _volume(store: Store, name: str) -> str:
    project = store.get_or_create_project("main")
    row = Volume(
        project_id=project.id, name=name, spec={}, status="submitted", created_at=store.now()
    )
    return store.add(row).id


def _worker(store: Store, process: Callable[[str, str], object]) -> Worker:
    # An hour's lease and error delay: only the store-failure handling can bring a row back
    # within the test (a lease left behind, or a row due in an hour, never comes back).
    config = WorkerConfig(
        kind="volumes", lease_seconds=HOUR, error_delay=HOUR, min_interval=HOUR, idle_cap=0.05
    )
    return Worker(
        config,
        leasing=StoreLeasing(store.leases, make_lease=Lease),
        process=process,  # type: ignore[arg-type]
        store_failure=refused_by_store,
    )


async def test_a_refused_release_is_retried_and_the_worker_goes_on(db_url: str) -> None:
    store = Store.from_url(db_url, migrate=True)
    faults = RefusedWrites(store.engine)
    first = _volume(store, "first")
    done: list[str] = []

    async def process(row_id: str, token: str) -> ProcessResult:
        assert store.leases.fenced_update(Volume, row_id, token, {"status": "active"})
        done.append(row_id)
        if done == [first]:
            faults.refuse(3)  # the disk fills as the first step ends: its release is refused
        return HOUR

    worker = _worker(store, process)
    await worker.start()
    try:
        await _until(lambda: faults.refused == 3)
        # released at last, due at once (what the step wrote may not all be recorded): the
        # worker looks at the row again now, not in the step's hour
        await _until(lambda: done.count(first) == 2)
        await _until(lambda: store.get(Volume, first).lock_token is None)  # type: ignore[union-attr]
        row = store.get(Volume, first)
        assert row is not None and row.status == "active"
        second = _volume(store, "second")  # the worker is alive: it takes the next row
        worker.hint()
        await _until(lambda: second in done)
    finally:
        await worker.stop()
        faults.close()
        store.close()


async def test_a_step_the_store_refused_runs_again_within_seconds(db_url: str) -> None:
    store = Store.from_url(db_url, migrate=True)
    faults = RefusedWrites(store.engine)
    row_id = _volume(store, "v")
    tries: list[bool] = []

    async def process(row_id: str, token: str) -> ProcessResult:
        if not tries:
            faults.refuse(1)  # this step's own write is refused (its release is not)
        tries.append(True)
        await asyncio.to_thread(
            store.leases.fenced_update, Volume, row_id, token, {"status": "active"}
        )
        return HOUR

    worker = _worker(store, process)
    await worker.start()
    try:
        await _until(lambda: store.get(Volume, row_id).status == "active")  # type: ignore[union-attr]
        assert faults.refused == 1 and len(tries) == 2
    finally:
        await worker.stop()
        faults.close()
        store.close()


async def test_events_whose_wakes_were_refused_are_not_passed_over(db_url: str) -> None:
    store = Store.from_url(db_url, migrate=True)
    faults = RefusedWrites(store.engine)
    project = store.get_or_create_project("main")
    later = store.now() + timedelta(hours=1)
    fleet = store.add(
        Fleet(project_id=project.id, name="f", spec={}, status="active", created_at=store.now())
    )
    instance = store.add(
        Instance(fleet_id=fleet.id, project_id=project.id, name="f-0", status="busy",
                 created_at=store.now())
    )  # fmt: skip
    run = store.add(
        Run(project_id=project.id, run_name="r", run_type="task", spec={}, spec_hash="h",
            status="running", submitted_at=store.now(), due_at=later)
    )  # fmt: skip
    jobs: dict[str, str] = {}  # what the agent calls each job: its id (as the server submits)
    for n, (name, status) in enumerate([("ended", "running"), ("started", "pulling")]):
        row = Job(run_id=run.id, status=status, job_spec={}, submitted_at=store.now(),
                  instance_id=instance.id, job_num=n, due_at=later)  # fmt: skip
        jobs[name] = store.add(row).id
    ended, started = jobs["ended"], jobs["started"]
    end = JobEnd(state=JobState(id=ended, status="exited", exit_status=0), log=b"")
    events = [
        JobEvent(seq=1, job_id=ended, kind=JobEventKind.STATE, status="exited", end=end),
        JobEvent(seq=2, job_id=started, kind=JobEventKind.STATE, status="running"),
    ]
    agent = GatedAgent(
        JobEventsPage(epoch="e", seq=0, reset=True),  # recorded before the disk fills
        JobEventsPage(epoch="e", seq=2, events=events),
    )
    hints: list[str] = []
    follower = JobEventFollower(
        StoreLeasing(store.leases, make_lease=Lease), hints.append, states=store, gap=0,
        write_retry=(0.01,),
    )  # fmt: skip
    client: AgentClient = agent  # type: ignore[assignment]  # the long-poll is all it reads
    follower.follow(instance.id, client)
    try:
        await _until(lambda: follower.following(instance.id) and agent.polls == 2)
        for job_id in jobs.values():  # the reset woke them: asleep again, for an hour
            store.update(Job, job_id, due_at=later)
        faults.fill()
        agent.gate.set()  # the events come while the disk is full
        await _until(lambda: faults.refused >= 3)  # the page's writes, refused, tried again
        assert agent.polls == 2  # not passed over: no poll after it yet
        faults.free()
        await _until(lambda: all(store.get(Job, j).due_at is None for j in jobs.values()))  # type: ignore[union-attr]
        stored = store.get(Job, started)
        assert stored is not None and stored.status == "running"  # its start recorded
        assert follower.ended(instance.id, ended) == end  # its end kept for its pass
        assert "jobs" in hints and "runs" in hints
        await _until(lambda: agent.polls == 3)  # and then it reads on
    finally:
        await follower.aclose()
        faults.close()
        store.close()


def test_what_counts_as_the_store_refusing_work() -> None:
    import errno

    from sqlalchemy.exc import IntegrityError

    assert refused_by_store(OSError(errno.ENOSPC, "No space left on device"))  # a job log
    assert refused_by_store(OSError(errno.EROFS, "Read-only file system"))
    assert not refused_by_store(FileNotFoundError(errno.ENOENT, "gone"))  # a bug: error delay
    assert not refused_by_store(IntegrityError("INSERT", {}, Exception("unique")))
    assert not refused_by_store(ValueError("bad"))


async def test_heartbeats_log_a_refused_write_in_one_line_and_a_bug_with_its_traceback(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store.from_url(db_url, migrate=True)
    faults = RefusedWrites(store.engine)
    _volume(store, "v")
    held = asyncio.Event()
    done = asyncio.Event()

    async def process(row_id: str, token: str) -> ProcessResult:
        held.set()
        await done.wait()  # the lease is held: the job manager's heartbeat renews it
        return HOUR

    config = WorkerConfig(kind="volumes", lease_seconds=0.15, min_interval=HOUR, idle_cap=0.05)
    worker = Worker(
        config,
        leasing=StoreLeasing(store.leases, make_lease=Lease),
        process=process,
        store_failure=refused_by_store,
    )
    replica = ReplicaHeartbeat(store, this_server("host:refusals:1"), every=0.02)
    caplog.set_level(logging.WARNING)
    await worker.start()
    await replica.start()
    try:
        await held.wait()
        faults.fill()  # the disk is full: renewals and beats are refused
        await _until(lambda: faults.refused >= 4)
        await _until(
            lambda: (
                any("renewing leases failed" in r.message for r in caplog.records)
                and any("replica heartbeat failed" in r.message for r in caplog.records)
            )
        )
        refused = [r for r in caplog.records if "failed" in r.message]
        assert all(r.exc_info is None for r in refused), "a refusal logged a traceback"
        assert any(
            "database or disk is full" in r.getMessage() or "No space" in r.getMessage()
            for r in refused
        )
        faults.free()
        caplog.clear()
        replica.replicas.beat = _bug  # type: ignore[method-assign]  # a real bug keeps its trace
        await _until(lambda: any(r.exc_info for r in caplog.records))
    finally:
        faults.free()
        done.set()
        await replica.stop()
        await worker.stop()
        faults.close()
        store.close()


def _bug(me: object) -> bool:
    raise KeyError("a bug")
