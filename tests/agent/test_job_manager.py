"""The job manager's lifecycle with a scripted executor at the ``Executor`` port: pulling
with progress, a stop during a pull, launch failures, an engine that is away for a while."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.protocol import ExecutorKind, JobReason, JobSpec, JobState, JobStatus
from agent.server.allocation import Capacity
from agent.server.errors import EngineUnavailableError
from agent.server.executors.base import ExecutorError, Launched, ProgressCallback, Usage
from agent.server.executors.containers import to_pull_fraction
from agent.server.jobs import JobManager
from agent.server.store import JobFiles, JobStore
from tests.agent.conftest import wait_for
from tests.operations.tmpfs import fill, tmpfs


class ScriptedExecutor:
    """Does what the test says, when the test says."""

    kind = ExecutorKind.DOCKER

    def __init__(self) -> None:
        self.pulled = asyncio.Event()
        self.exit_status: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self.launches = 0
        self.launch_error: ExecutorError | None = None
        self.adopt_failures = 0
        self.signals: list[bool] = []
        self.progress: ProgressCallback | None = None

    async def is_available(self) -> bool:
        return True

    def check(self, spec: JobSpec) -> str | None:
        return None

    async def prepare(self, spec: JobSpec, files: JobFiles, progress: ProgressCallback) -> None:
        self.progress = progress  # Docker's pull thread runs on after a cancel
        progress(None)
        progress(0.25)
        await self.pulled.wait()

    async def launch(self, spec: JobSpec, files: JobFiles) -> Launched:
        self.launches += 1
        if self.launch_error is not None:
            raise self.launch_error
        return Launched(container_id="c1")

    async def adopt(self, spec: JobSpec, files: JobFiles) -> Launched | None:
        if self.adopt_failures > 0:
            self.adopt_failures -= 1
            raise EngineUnavailableError("connection refused")
        return Launched(container_id="c1")

    async def wait(self, spec: JobSpec, files: JobFiles) -> int | None:
        return await asyncio.shield(self.exit_status)

    async def signal(self, spec: JobSpec, files: JobFiles, *, kill: bool) -> None:
        self.signals.append(kill)
        if kill and not self.exit_status.done():
            self.exit_status.set_result(None)

    async def sample(self, spec: JobSpec, files: JobFiles) -> Usage:
        return Usage(cpu_seconds=0.0, memory_bytes=0)

    async def remove(self, spec: JobSpec, files: JobFiles) -> None:
        return None

    async def close(self) -> None:
        return None


@pytest.fixture
async def executor() -> ScriptedExecutor:
    return ScriptedExecutor()


def manager_for(tmp_path: Path, executor: ScriptedExecutor) -> JobManager:
    async def no_gpus() -> list[object]:
        return []

    return JobManager(
        store=JobStore(tmp_path),
        executors={ExecutorKind.DOCKER: executor},
        capacity=Capacity(cpus=4, memory_mib=1024),
        gpu_sampler=no_gpus,  # type: ignore[arg-type]
        engine_retry=(0.01,),
    )


SPEC = JobSpec(id="j", run_name="r", executor=ExecutorKind.DOCKER, image="img", commands=["x"])


async def status_of(manager: JobManager, *statuses: JobStatus) -> JobState:
    async def probe() -> JobState | None:
        state = manager.get("j")
        return state if state.status in statuses else None

    result: JobState = await wait_for(probe, f"status {statuses}", deadline=5)
    return result


async def test_pulling_with_progress_then_running(
    tmp_path: Path, executor: ScriptedExecutor
) -> None:
    manager = manager_for(tmp_path, executor)
    await manager.submit(SPEC)
    pulling = await status_of(manager, JobStatus.PULLING)
    assert pulling.pull_progress == 0.25
    executor.pulled.set()
    running = await status_of(manager, JobStatus.RUNNING)
    assert (running.container_id, running.pull_progress) == ("c1", None)
    executor.exit_status.set_result(0)
    assert (await status_of(manager, JobStatus.EXITED)).exit_status == 0
    await manager.close()


async def test_stop_during_the_pull_launches_nothing(
    tmp_path: Path, executor: ScriptedExecutor
) -> None:
    manager = manager_for(tmp_path, executor)
    await manager.submit(SPEC)
    await status_of(manager, JobStatus.PULLING)
    await manager.stop("j", grace=None, force=False)
    state = await status_of(manager, JobStatus.TERMINATED)
    assert (state.reason, state.exit_status, executor.launches) == (JobReason.STOPPED, None, 0)
    await manager.close()


async def test_progress_after_a_stop_does_not_revive_the_job(
    tmp_path: Path, executor: ScriptedExecutor
) -> None:
    """The pull runs in a thread that a stop cannot cancel: the engine's later progress
    events reach the callback after the job was recorded terminated."""
    manager = manager_for(tmp_path, executor)
    await manager.submit(SPEC)
    await status_of(manager, JobStatus.PULLING)
    await manager.stop("j", grace=None, force=False)
    await status_of(manager, JobStatus.TERMINATED)
    assert executor.progress is not None
    executor.progress(0.5)
    state = manager.get("j")
    assert (state.status, state.pull_progress) == (JobStatus.TERMINATED, None)
    await manager.close()


async def test_launch_failure_is_reported_with_its_reason(
    tmp_path: Path, executor: ScriptedExecutor
) -> None:
    executor.pulled.set()
    executor.launch_error = ExecutorError(JobReason.EXECUTOR_ERROR, "Docker refused: no such user")
    manager = manager_for(tmp_path, executor)
    await manager.submit(SPEC)
    state = await status_of(manager, JobStatus.FAILED)
    assert (state.reason, state.message) == (
        JobReason.EXECUTOR_ERROR,
        "Docker refused: no such user",
    )
    await manager.close()


async def test_an_engine_away_at_restart_is_waited_for(
    tmp_path: Path, executor: ScriptedExecutor
) -> None:
    executor.pulled.set()
    first = manager_for(tmp_path, executor)
    await first.submit(SPEC)
    await status_of(first, JobStatus.RUNNING)
    await first.close()
    executor.adopt_failures = 10**6
    second = manager_for(tmp_path, executor)
    await second.start()

    async def message_is(text: str) -> bool:
        return second.get("j").message == text

    await wait_for(lambda: message_is("waiting for the engine: connection refused"), "retries")
    assert second.get("j").status == JobStatus.RUNNING  # not lost: the engine is only away
    executor.adopt_failures = 0
    await wait_for(lambda: message_is(""), "the job to be adopted", deadline=5)
    executor.exit_status.set_result(3)
    assert (await status_of(second, JobStatus.EXITED)).exit_status == 3
    await second.close()


async def test_forced_stop_kills_at_once(tmp_path: Path, executor: ScriptedExecutor) -> None:
    executor.pulled.set()
    manager = manager_for(tmp_path, executor)
    await manager.submit(SPEC)
    await status_of(manager, JobStatus.RUNNING)
    await manager.stop("j", grace=None, force=True)
    state = await status_of(manager, JobStatus.TERMINATED)
    assert (state.reason, state.exit_status, executor.signals) == (JobReason.KILLED, 137, [True])
    await manager.close()


def test_pull_fraction_from_engine_events() -> None:
    layers: dict[str, tuple[int, int]] = {}
    events = [
        {"status": "Pulling from library/python", "id": "3.12"},
        {"status": "Pulling fs layer", "progressDetail": {}, "id": "a"},
        {"status": "Downloading", "progressDetail": {"current": 100, "total": 400}, "id": "a"},
        {"status": "Downloading", "progressDetail": {"current": 50, "total": 100}, "id": "b"},
        {"status": "Downloading", "progressDetail": {"current": 400, "total": 400}, "id": "a"},
    ]
    fractions = [to_pull_fraction(layers, event) for event in events]
    assert fractions == [None, None, 0.25, 0.3, 0.9]


async def test_an_end_a_full_disk_refuses_to_record_is_kept_and_written_once_it_can(
    tmp_path: Path, executor: ScriptedExecutor
) -> None:
    # The agent's data dir on a real tmpfs, filled to the last byte as the job ends: its
    # record cannot be written. The job ran well: it is `exited 0` (answered, told by its
    # event), not failed by an agent error and killed, and its record follows once the
    # disk takes it. (Without that, the supervisor died with the OSError and the job's end
    # was never told: the server saw it running until its 600 s safety pass.)
    with tmpfs(tmp_path / "small", 4) as mount:
        manager = manager_for(mount, executor)
        await manager.submit(SPEC)
        executor.pulled.set()
        await status_of(manager, JobStatus.RUNNING)
        filler = fill(mount, leave_mib=0)
        executor.exit_status.set_result(0)
        ended = await status_of(manager, JobStatus.EXITED, JobStatus.FAILED)
        assert (ended.status, ended.exit_status) == (JobStatus.EXITED, 0)
        assert executor.signals == []  # not killed

        def on_disk() -> JobStatus:
            [stored], _ = JobStore(mount).load_all()
            return stored.state.status

        assert on_disk() is JobStatus.RUNNING  # the disk took nothing
        filler.unlink()

        async def written() -> bool | None:
            return True if on_disk() is JobStatus.EXITED else None

        await wait_for(written, "the record written once space returned", deadline=10)
        await manager.close()
