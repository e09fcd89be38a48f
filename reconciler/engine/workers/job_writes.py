"""The jobs worker's step writes, many per transaction (group commit).

A job's step ends with one fenced write (`Store.record_job_step`). When many jobs end their
steps at about the same time (a queue of tiny tasks starting and ending), each write was
its own thread hop and transaction: `BEGIN IMMEDIATE`, the write lock's turn, commit. The
`StepWrites` batcher gathers the steps written while one batch is being written and writes
them together (`Store.record_job_steps`: one thread hop and one transaction, each step
still fenced by its own lease and status). The first write goes at once; a write never
waits for company. Each caller gets its own step's result, or the batch's failure.

Steps that take capacity (placements) are not batched: `Store.place_job` answers the
instance as the take left it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from reconciler.adapters.db.jobsteps import JobStep, StepResult

RecordSteps = Callable[[Sequence[JobStep]], list[StepResult]]
RunOff = Callable[[RecordSteps, Sequence[JobStep]], Awaitable[list[StepResult]]]
"""Runs the record off the event loop: the store's lane (`Store.in_lane`) in the worker."""
MAX_BATCH = 200
"""Steps written in one transaction at most (the write lock is held while they are)."""


class StepWrites:
    """See the module docstring; one per jobs worker, on its event loop."""

    def __init__(self, record: RecordSteps, *, run: RunOff | None = None) -> None:
        self._record = record
        self._run: RunOff = run or asyncio.to_thread
        self._waiting: list[tuple[JobStep, asyncio.Future[StepResult]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def write(self, step: JobStep) -> StepResult:
        """Record `step` (with the others waiting now); its result."""
        done: asyncio.Future[StepResult] = asyncio.get_running_loop().create_future()
        self._waiting.append((step, done))
        if self._writer is None:  # a task of its own: a cancelled caller stops no one
            self._writer = asyncio.create_task(self._write_all(), name="job-step-writes")
        return await done

    async def _write_all(self) -> None:
        batch: list[tuple[JobStep, asyncio.Future[StepResult]]] = []
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
                steps = [step for step, _ in batch]
                try:
                    results = await self._run(self._record, steps)
                except Exception as exc:  # noqa: BLE001 - each caller raises the batch's failure
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                else:
                    for (_, done), result in zip(batch, results, strict=True):
                        if not done.done():
                            done.set_result(result)
                batch = []
        finally:  # cancelled (shutdown): whoever still waits is cancelled too
            self._writer = None
            for _, done in [*batch, *self._waiting]:
                done.cancel()
            self._waiting = []
