"""The generic worker: the claim/process/release step, fencing, heartbeat, hint and stop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from reconciler.engine.worker import Lease, ProcessResult, Worker, WorkerConfig
from reconciler.ports import WorkKind
from tests.engine.leasing import MemoryLeasing

CONFIG = WorkerConfig(kind="fleets", concurrency=4, lease_seconds=30, min_interval=15)


def _worker(leasing: MemoryLeasing, seen: list[tuple[str, str]]) -> Worker:
    async def process(row_id: str, token: str) -> ProcessResult:
        seen.append((row_id, token))
        return None

    return Worker(CONFIG, leasing=leasing, process=process, owner="w1")


async def test_process_once_handles_due_rows_and_releases_with_min_interval() -> None:
    leasing = MemoryLeasing()
    leasing.add("fleets", "a")
    leasing.add("fleets", "b")
    leasing.add("fleets", "later", due_at=100)
    leasing.add("volumes", "v")
    seen: list[tuple[str, str]] = []
    worker = _worker(leasing, seen)

    assert await worker.process_once() == 2
    assert sorted(row for row, _ in seen) == ["a", "b"]
    assert leasing.rows[("fleets", "a")].token is None
    assert leasing.rows[("fleets", "a")].due_at == 15
    assert worker.held == ()
    assert await worker.process_once() == 0  # released, but not due again yet


async def test_callback_answer_sets_next_due_and_errors_use_error_delay() -> None:
    leasing = MemoryLeasing()
    for row in ("ok", "soon", "boom"):
        leasing.add("fleets", row)

    async def process(row_id: str, token: str) -> ProcessResult:
        if row_id == "boom":
            raise RuntimeError("bug")
        return 2.5 if row_id == "soon" else None

    worker = Worker(CONFIG, leasing=leasing, process=process)
    assert await worker.process_once() == 3
    assert leasing.rows[("fleets", "ok")].releases == [15]
    assert leasing.rows[("fleets", "soon")].releases == [2.5]
    assert leasing.rows[("fleets", "boom")].releases == [CONFIG.error_delay]


async def test_a_leased_row_is_not_claimed_twice_and_a_lost_lease_is_not_released() -> None:
    leasing = MemoryLeasing()
    leasing.add("fleets", "a")
    entered, go_on = asyncio.Event(), asyncio.Event()

    async def slow(row_id: str, token: str) -> ProcessResult:
        entered.set()
        await go_on.wait()
        return None

    first = Worker(CONFIG, leasing=leasing, process=slow, owner="first")
    seen: list[tuple[str, str]] = []
    second = _worker(leasing, seen)
    running = asyncio.create_task(first.process_once())
    await asyncio.wait_for(entered.wait(), 5)

    assert await second.process_once() == 0  # held by `first`
    leasing.now = 20
    await first.heartbeat_once()  # renewed to 50
    leasing.now = 45
    assert await second.process_once() == 0
    leasing.now = 100  # no heartbeat: the lease expired and `second` takes the row
    assert await second.process_once() == 1
    leasing.rows[("fleets", "a")].token = "taken-again"
    await first.heartbeat_once()
    assert first.held == ()  # lost
    go_on.set()
    await running
    assert leasing.rows[("fleets", "a")].token == "taken-again"  # not released by `first`


async def test_hint_wakes_the_idle_loop_and_stop_lets_rows_in_hand_finish() -> None:
    leasing = MemoryLeasing()
    config = WorkerConfig(kind="fleets", idle_cap=3600.0, lease_seconds=30)
    handled: asyncio.Queue[str] = asyncio.Queue()
    release, entered = asyncio.Event(), asyncio.Event()

    async def process(row_id: str, token: str) -> ProcessResult:
        if row_id == "slow":
            entered.set()
            await release.wait()
        await handled.put(row_id)
        return None

    worker = Worker(config, leasing=leasing, process=process)
    await worker.start()
    try:
        await asyncio.sleep(0)  # let the loop find nothing and go idle for an hour
        leasing.add("fleets", "a")
        worker.hint()
        assert await asyncio.wait_for(handled.get(), 5) == "a"
        leasing.add("fleets", "slow")
        worker.hint()
        await asyncio.wait_for(entered.wait(), 5)
        assert len(worker.held) == 1
    finally:
        stopping = asyncio.create_task(worker.stop())
        await asyncio.sleep(0)
        release.set()
        await asyncio.wait_for(stopping, 5)
    assert await asyncio.wait_for(handled.get(), 5) == "slow"
    assert leasing.rows[("fleets", "slow")].token is None


@pytest.mark.parametrize("kind", ["volumes", "gateways"])
async def test_workers_of_other_kinds_do_not_see_the_rows(kind: str) -> None:
    leasing = MemoryLeasing()
    leasing.add("fleets", "a")

    async def process(row_id: str, token: str) -> ProcessResult:
        raise AssertionError(row_id)

    worker = Worker(WorkerConfig(kind=kind), leasing=leasing, process=process)  # type: ignore[arg-type]
    assert await worker.process_once() == 0


async def test_a_callback_with_prepare_gets_each_claimed_batch_once_before_its_rows() -> None:
    leasing = MemoryLeasing()
    for row in ("a", "b", "c"):
        leasing.add("fleets", row)
    calls: list[tuple[str, ...]] = []

    class Batched:
        async def __call__(self, row_id: str, token: str) -> ProcessResult:
            calls.append(("process", row_id))
            return None

        async def prepare(self, leases: Sequence[Lease]) -> None:
            calls.append(("prepare", *sorted(lease.row_id for lease in leases)))

    worker = Worker(CONFIG, leasing=leasing, process=Batched())
    assert await worker.process_once() == 3
    assert calls[0] == ("prepare", "a", "b", "c")  # one read for the batch, then the rows
    assert sorted(calls[1:]) == [("process", "a"), ("process", "b"), ("process", "c")]
    assert await worker.process_once() == 0 and len(calls) == 4  # nothing claimed: no read


async def test_a_claim_woken_meanwhile_claims_again_without_asking_the_next_due() -> None:
    """A hint (or a finished row) during a claim makes the loop claim again at once: the
    query for when the next row is due is not run for nothing (one per claim in a burst)."""
    calls: list[str] = []
    config = WorkerConfig(kind="fleets", idle_cap=3600.0, lease_seconds=30)
    handled: asyncio.Queue[str] = asyncio.Queue()

    class Leasing(MemoryLeasing):
        async def claim_due(
            self, kind: WorkKind, *, owner: str, limit: int, lease_seconds: float
        ) -> Sequence[Lease]:
            calls.append("claim")
            leases = await super().claim_due(
                kind, owner=owner, limit=limit, lease_seconds=lease_seconds
            )
            if ("fleets", "late") not in self.rows:  # a write hinted during this claim
                self.add("fleets", "late")
                worker.hint()
            return leases

        async def next_due(self, kind: WorkKind) -> float | None:
            calls.append("next_due")
            return await super().next_due(kind)

    async def process(row_id: str, token: str) -> ProcessResult:
        await handled.put(row_id)
        return 3600.0

    leasing = Leasing()
    leasing.add("fleets", "a")
    worker = Worker(config, leasing=leasing, process=process)
    await worker.start()
    try:
        got = {await asyncio.wait_for(handled.get(), 5) for _ in range(2)}
    finally:
        await worker.stop()
    assert got == {"a", "late"}
    assert calls[:2] == ["claim", "claim"]  # woken during the first: claimed again at once
    assert "next_due" in calls  # a claim not woken meanwhile still asks when to look again


async def test_a_row_failing_in_a_row_backs_off_to_a_bound_and_is_noted_twice() -> None:
    """A step that keeps failing (a bug, not the store refusing it) is not tried every
    `error_delay` for ever: the delay doubles up to `max_error_delay`; `on_error` hears of
    the first failure and of the delay reaching its bound; a success starts over."""
    leasing = MemoryLeasing()
    leasing.add("fleets", "boom")
    failing = True
    notes: list[tuple[str, str]] = []

    async def process(row_id: str, token: str) -> ProcessResult:
        if failing:
            raise RuntimeError("bug")
        return None

    async def on_error(lease: Lease, message: str) -> None:
        notes.append((lease.row_id, message))

    config = WorkerConfig(kind="fleets", min_interval=15, error_delay=15, max_error_delay=100)
    worker = Worker(config, leasing=leasing, process=process, on_error=on_error)
    row = leasing.rows[("fleets", "boom")]
    for _ in range(6):
        leasing.now = row.due_at
        assert await worker.process_once() == 1
    assert row.releases == [15, 30, 60, 100, 100, 100]
    assert notes == [
        ("boom", "fleets step failed (bug); tried again in 15 s"),
        ("boom", "fleets step failed 4 times in a row (bug); tried again in 100 s"),
    ]
    failing = False
    leasing.now = row.due_at
    assert await worker.process_once() == 1
    failing = True
    leasing.now = row.due_at
    assert await worker.process_once() == 1
    assert row.releases[-2:] == [15, 15]  # done once: its next failure is a first one
    assert len(notes) == 3


async def test_idle_is_set_once_the_due_rows_are_done_and_nothing_else_is_due() -> None:
    """`idle` (what a restarted server waits for before it builds its web app): set by the
    loop only after the rows due at its start were processed, not before."""
    leasing = MemoryLeasing()
    for row in ("a", "b"):
        leasing.add("fleets", row)
    leasing.add("fleets", "later", due_at=3600)
    gate = asyncio.Event()
    seen: list[str] = []

    async def process(row_id: str, token: str) -> ProcessResult:
        await gate.wait()
        seen.append(row_id)
        return 3600.0

    worker = Worker(CONFIG, leasing=leasing, process=process)
    await worker.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while len(worker.held) < 2:  # the rows are in hand
            assert asyncio.get_running_loop().time() < deadline, "rows not claimed"
            await asyncio.sleep(0.01)
        assert not worker.idle.is_set()
        gate.set()
        await asyncio.wait_for(worker.idle.wait(), timeout=10)
        assert sorted(seen) == ["a", "b"]
    finally:
        await worker.stop()
