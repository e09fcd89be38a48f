"""The jobs worker's step writes go many per transaction (`StepWrites`), on a real store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from reconciler.adapters.db.jobsteps import JobStep, StepResult
from reconciler.adapters.db.models import Job
from reconciler.adapters.db.stepevents import RunFollowing
from reconciler.adapters.db.store import Store
from reconciler.engine.workers.job_writes import StepWrites
from tests.store.test_store_stepbatch import DONE, _ending, _rig


async def test_steps_written_together_go_in_one_transaction(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'dockyard.db'}", migrate=True)
    batches: list[int] = []

    def record(steps: Sequence[JobStep]) -> list[StepResult]:
        batches.append(len(steps))
        return store.record_job_steps(steps)

    try:
        instance, jobs, tokens = _rig(store, jobs=4)
        steps = [
            _ending(instance.project_id, job, token, RunFollowing("running", f"t{i}", DONE))
            for i, (job, token) in enumerate(zip(jobs, tokens, strict=True))
        ]
        writes = StepWrites(record)
        results = await asyncio.gather(*(writes.write(step) for step in steps[:3]))
        assert results == [StepResult.WRITTEN] * 3 and batches == [3]  # one transaction
        assert await writes.write(steps[3]) is StepResult.WRITTEN  # alone: no waiting
        assert batches == [3, 1]
        assert all((j := store.get(Job, job.id)) and j.status == "done" for job in jobs)
    finally:
        store.close()


async def test_each_writer_gets_the_batchs_failure(tmp_path: Path) -> None:
    def record(steps: Sequence[JobStep]) -> list[StepResult]:
        raise RuntimeError("database gone")

    store = Store.from_url(f"sqlite:///{tmp_path / 'dockyard.db'}", migrate=True)
    try:
        instance, jobs, tokens = _rig(store, jobs=2)
        follow = RunFollowing("running", "t0", DONE)
        steps = [
            _ending(instance.project_id, j, t, follow) for j, t in zip(jobs, tokens, strict=True)
        ]
        writes = StepWrites(record)
        results = await asyncio.gather(*(writes.write(s) for s in steps), return_exceptions=True)
        assert all(isinstance(r, RuntimeError) for r in results)
        with pytest.raises(RuntimeError):  # the next write tries again
            await writes.write(steps[0])
    finally:
        store.close()
