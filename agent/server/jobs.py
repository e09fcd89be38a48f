"""The job manager: accepts jobs, supervises each one, and answers for them.

One ``JobManager`` per agent. ``submit`` checks the spec and the allocation (pure,
``allocation.detect_misfit``), stores the job and starts its supervisor task, which walks
it through ``pending -> pulling -> running -> exited|failed|terminated`` with the
job's executor (``executors/``). Every state change is written to the job's ``job.json``
before anyone can read it, so a restarted agent (``start``) re-adopts running jobs from
the data dir: processes by pid file, containers by label. Stops are persisted too: a stop
in progress when the agent died is finished by the next agent.

The manager never kills jobs when the agent itself stops (``close``): jobs are detached.
A job is never recorded ended while a process of it may live: after an agent error the
job is killed before it is marked failed, and processes of jobs the agent does not know
are killed (``strays.StraySweeper``: at start, periodically, and on a stop of an unknown
job, before the agent answers ``not_found``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.diskspace import DiskWatch
from agent.jobevents import END_LOG_BYTES, JobEnd, JobEventKind
from agent.protocol import (
    ErrorCode,
    ExecutorKind,
    GpuMetrics,
    JobMetrics,
    JobReason,
    JobSpec,
    JobState,
    JobStatus,
    LogChunk,
)
from agent.server.activity import ConnectionActivity
from agent.server.allocation import Capacity, Claim, detect_misfit
from agent.server.archives import (
    DEFAULT_ARCHIVE_LIMITS,
    ArchiveError,
    ArchiveLimits,
    archives_problem,
    stage_archives,
    without_data,
)
from agent.server.errors import AgentError, EngineUnavailableError
from agent.server.events import JobEventFeed
from agent.server.executors.base import Executor, ExecutorError, Launched, Usage
from agent.server.isolation import JobIsolation, Placement
from agent.server.logs import read_log, release_log
from agent.server.optionalvolumes import skip_unattachable
from agent.server.store import JobFiles, JobStore, StopOrder, StoredJob
from agent.server.strays import SWEEP_SECONDS, StraySweeper

log = logging.getLogger(__name__)

GpuSampler = Callable[[], Awaitable[list[GpuMetrics]]]
ENGINE_RETRY_SECONDS = (1.0, 2.0, 5.0)
UNWRITTEN_RETRY_SECONDS = (0.25, 0.5, 1.0, 2.0)
"""Back-off of writing job records a full disk refused (the last step repeats)."""
CPU_SAMPLE_WINDOW = 0.25
RELEASE_STEP = 1024 * 1024  # a job's log gives disk back in steps of at least this


@dataclass(eq=False)
class _Job:
    stored: StoredJob
    files: JobFiles
    done: asyncio.Event = field(default_factory=asyncio.Event)
    supervisor: asyncio.Task[None] | None = None
    stopper: asyncio.Task[None] | None = None
    preparing: bool = False  # in ``prepare``: a stop may cancel it, nothing runs yet
    last_usage: tuple[float, Usage] | None = None
    released: int = 0  # the log's prefix whose disk blocks were given back (`release_log`)

    @property
    def spec(self) -> JobSpec:
        return self.stored.spec

    @property
    def state(self) -> JobState:
        return self.stored.state

    def claim(self) -> Claim:
        spec = self.spec
        return Claim(spec.id, frozenset(spec.gpus), spec.cpus, spec.memory_mib)


class JobManager:
    """Jobs of this agent; all methods run on the agent's event loop."""

    def __init__(
        self,
        *,
        store: JobStore,
        executors: Mapping[ExecutorKind, Executor],
        capacity: Capacity,
        gpu_sampler: GpuSampler,
        clock: Callable[[], float] = time.time,
        engine_retry: tuple[float, ...] = ENGINE_RETRY_SECONDS,
        activity: ConnectionActivity | None = None,
        disk: DiskWatch | None = None,
        isolation: JobIsolation | None = None,
        archive_limits: ArchiveLimits = DEFAULT_ARCHIVE_LIMITS,
        sweep_every: float = SWEEP_SECONDS,
    ) -> None:
        self.activity = activity or ConnectionActivity(clock)  # fed by the SSH server
        self._store = store
        self._executors = executors
        self._capacity = capacity
        self._gpu_sampler = gpu_sampler
        self._clock = clock
        self._engine_retry = engine_retry
        self.disk = disk or DiskWatch({})
        self._isolation = isolation  # None: a job without an image is a process job
        self._archive_limits = archive_limits  # what a job's archives may extract to
        self._jobs: dict[str, _Job] = {}
        self._unwritten: set[str] = set()  # jobs whose record a full disk refused
        self._writer: asyncio.Task[None] | None = None  # writes them once it takes them
        self._closing = False
        self.events = JobEventFeed(running_logs=self._running_logs)  # the server follows it
        # called with a finished job's id just before it is removed (the SSH service keeps
        # its log for a late `attach`: the removal must not come first)
        self.before_remove: list[Callable[[str], None]] = []
        self.strays = StraySweeper(executors.values(), self._unfinished, sweep_every)

    # --- lifecycle of the manager --------------------------------------------------------

    async def start(self) -> None:
        """Load the data dir; re-adopt every job that was not finished."""
        stored_jobs, problems = self._store.load_all()
        for problem in problems:
            log.warning("skipping an unreadable job record: %s", problem)
        for stored in stored_jobs:
            job = _Job(stored, self._store.files(stored.spec.id))
            self._jobs[stored.spec.id] = job
            if stored.state.status.is_finished():
                job.done.set()
        # first, before any request: no process of a job this agent does not run lives on
        await self.strays.start()
        adopted: list[str] = []
        for job in self._jobs.values():
            if not job.done.is_set():
                adopted.append(f"{job.spec.id} ({job.spec.run_name}, {job.state.status})")
                job.supervisor = asyncio.create_task(self._supervise(job, resume=True))
        if adopted:
            log.info("re-adopted %d unfinished job(s): %s", len(adopted), ", ".join(adopted))
        else:
            log.info("no unfinished jobs to re-adopt (%d finished kept)", len(stored_jobs))

    async def close(self) -> None:
        """Stop supervising (jobs keep running; the next agent re-adopts them)."""
        self._closing = True
        await self.strays.close()
        tasks = [t for job in self._jobs.values() for t in (job.supervisor, job.stopper) if t]
        tasks += [self._writer] if self._writer is not None else []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for executor in self._executors.values():
            await executor.close()
        await self.events.close()

    # --- requests --------------------------------------------------------------------------

    def get(self, job_id: str) -> JobState:
        return self.activity.annotate(self._job(job_id).state)

    def list(self) -> list[JobState]:
        return [self.activity.annotate(job.state) for job in self._jobs.values()]

    def spec(self, job_id: str) -> JobSpec:
        return self._job(job_id).spec

    def files(self, job_id: str) -> JobFiles:
        return self._job(job_id).files

    async def submit(self, spec: JobSpec) -> JobState:
        if spec.id in self._jobs:
            return self._jobs[spec.id].state
        placement = await self._isolation.place(spec) if self._isolation else Placement(spec)
        spec = placement.spec
        executor = self._executors.get(spec.executor)
        if executor is None or not await executor.is_available():
            raise AgentError(
                ErrorCode.EXECUTOR_UNAVAILABLE, f"the {spec.executor} executor is not available"
            )
        if spec.id in self._jobs:  # submitted again while we asked the executor
            return self._jobs[spec.id].state
        spec, skipped = skip_unattachable(spec, executor.check)
        for line in skipped:
            log.warning("job %s: %s", spec.id, line)
        problem = executor.check(spec)
        if problem is not None:
            raise AgentError(ErrorCode.INVALID_REQUEST, problem)
        disk = await asyncio.to_thread(self.disk.check)
        if disk.low:  # the server puts the job back to wait, with this reason
            raise AgentError(ErrorCode.NO_CAPACITY, disk.problem)
        held = [job.claim() for job in self._jobs.values() if not job.state.status.is_finished()]
        misfit = detect_misfit(
            self._capacity, held, Claim(spec.id, frozenset(spec.gpus), spec.cpus, spec.memory_mib)
        )
        if misfit is not None:
            raise AgentError(ErrorCode.NO_CAPACITY, misfit)
        if spec.archives:
            spec = await self._stage(spec)
            if spec.id in self._jobs:  # submitted again while we staged
                return self._jobs[spec.id].state
        notice = "; ".join(part for part in (placement.notice, *skipped) if part)
        state = JobState(
            id=spec.id, status=JobStatus.PENDING, executor=spec.executor, notice=notice
        )
        stored = StoredJob(spec=spec, state=state)
        job = _Job(stored, self._store.create(stored))
        self._jobs[spec.id] = job
        job.supervisor = asyncio.create_task(self._supervise(job, resume=False))
        return job.state

    async def _stage(self, spec: JobSpec) -> JobSpec:
        """Check and extract the job's archives (``archives.py``); the spec without data."""
        problem = archives_problem(spec.archives)
        if problem is not None:
            raise AgentError(ErrorCode.INVALID_REQUEST, problem)
        try:
            root = self._store.files(spec.id).root
            await asyncio.to_thread(stage_archives, spec.archives, root, self._archive_limits)
        except ArchiveError as error:
            raise AgentError(ErrorCode.INVALID_REQUEST, str(error)) from error
        return without_data(spec)

    async def stop(self, job_id: str, *, grace: float | None, force: bool) -> JobState:
        if job_id not in self._jobs:  # nothing of it may run on: kill by its marker first
            await self.strays.sweep(only=job_id)
        job = self._job(job_id)
        if job.state.status.is_finished() or (job.stored.stop is not None and not force):
            return job.state
        now = self._clock()
        seconds = 0.0 if force else (job.spec.stop_duration if grace is None else grace)
        order = StopOrder(requested_at=now, deadline=now + seconds, killed=force)
        self._save(job, stop=order)
        if job.preparing and job.supervisor is not None:
            job.supervisor.cancel()  # nothing runs yet: the supervisor records the stop
        elif job.state.status == JobStatus.RUNNING:
            if job.stopper is not None:
                job.stopper.cancel()  # a forced stop replaces a graceful one
            job.stopper = asyncio.create_task(self._enforce_stop(job))
        return job.state

    async def remove(self, job_id: str) -> None:
        job = self._job(job_id)
        if not job.state.status.is_finished():
            raise AgentError(ErrorCode.JOB_ACTIVE, f"job {job_id} is {job.state.status}: stop it")
        for hook in self.before_remove:
            hook(job_id)
        executor = self._executors.get(job.spec.executor)
        if executor is not None:
            await executor.remove(job.spec, job.files)
        self._store.delete(job_id)
        self._jobs.pop(job_id, None)
        self.activity.forget(job_id)

    def read_logs(
        self, job_id: str, *, offset: int, limit: int, ack: int | None = None
    ) -> LogChunk:
        """A chunk of the log; `ack`: the server has stored the log up to there, so that
        prefix's disk blocks go back (every `RELEASE_STEP` bytes)."""
        job = self._job(job_id)
        finished = job.state.status.is_finished()  # before reading: no line can follow it
        if ack is not None and job.released + RELEASE_STEP <= ack <= offset:
            job.released = release_log(job.files.log, ack) or job.released
        data, next_offset = read_log(job.files.log, offset, limit)
        return LogChunk(offset=offset, next_offset=next_offset, finished=finished, data=data)

    async def metrics(self, job_id: str) -> JobMetrics:
        job = self._job(job_id)
        now = self._clock()
        executor = self._executors.get(job.spec.executor)
        if job.state.status != JobStatus.RUNNING or executor is None:
            return JobMetrics(timestamp=now, cpu_percent=0.0, memory_bytes=0)
        try:
            previous = job.last_usage
            if previous is None or now - previous[0] > 60:
                previous = (now, await executor.sample(job.spec, job.files))
                await asyncio.sleep(CPU_SAMPLE_WINDOW)
            usage = await executor.sample(job.spec, job.files)
        except EngineUnavailableError as error:
            raise AgentError(ErrorCode.EXECUTOR_UNAVAILABLE, str(error)) from error
        except ExecutorError as error:
            raise AgentError(ErrorCode.INTERNAL, error.message) from error
        now = self._clock()
        job.last_usage = (now, usage)
        elapsed = max(now - previous[0], 1e-6)
        cpu = max(usage.cpu_seconds - previous[1].cpu_seconds, 0.0) / elapsed * 100
        gpus = [gpu for gpu in await self._gpu_sampler() if gpu.index in job.spec.gpus]
        return JobMetrics(
            timestamp=now, cpu_percent=cpu, memory_bytes=usage.memory_bytes, gpus=gpus
        )

    # --- supervision -----------------------------------------------------------------------

    async def _supervise(self, job: _Job, *, resume: bool) -> None:
        executor = self._executors[job.spec.executor]
        try:
            launched = await self._adopt(job, executor) if resume else None
            if launched is None and not (resume and job.state.status == JobStatus.RUNNING):
                launched = await self._launch(job, executor)
                if launched is None:
                    return  # stopped before anything ran
            if launched is not None:
                self._mark_running(job, launched)
                if job.stored.stop is not None:
                    self._start_stopper(job)
                exit_status = await self._wait(job, executor)
            else:
                exit_status = None  # it ran, and the host no longer knows it
            self._finish(job, exit_status)
        except ExecutorError as error:
            self._fail(job, error.reason, error.message)
        except EngineUnavailableError as error:  # while preparing or launching: not started
            self._fail(job, JobReason.EXECUTOR_ERROR, f"cannot start the job: {error}")
        except Exception as error:  # the outermost loop of one job: record, never vanish
            log.exception("job %s: supervisor failed; killing the job", job.spec.id)
            self._save(job, message=f"agent error: {type(error).__name__}; killing the job")
            await self._signal(job, executor, kill=True)  # nothing may outlive its record
            self._fail(job, JobReason.EXECUTOR_ERROR, f"agent error: {type(error).__name__}")
        finally:
            if job.state.status.is_finished():
                job.done.set()

    async def _adopt(self, job: _Job, executor: Executor) -> Launched | None:
        attempt = 0
        while True:
            try:
                return await executor.adopt(job.spec, job.files)
            except EngineUnavailableError as error:
                self._save(job, message=f"waiting for the engine: {error}")
                await asyncio.sleep(self._engine_retry[min(attempt, len(self._engine_retry) - 1)])
                attempt += 1

    async def _wait(self, job: _Job, executor: Executor) -> int | None:
        while True:
            try:
                return await executor.wait(job.spec, job.files)
            except EngineUnavailableError as error:
                self._save(job, message=f"waiting for the engine: {error}")
                await asyncio.sleep(self._engine_retry[-1])
                if await self._adopt(job, executor) is None:
                    return None

    async def _launch(self, job: _Job, executor: Executor) -> Launched | None:
        def progress(fraction: float | None) -> None:
            # a stop cancels our wait, not the engine's pull: its later events must not
            # turn a stopped (or already recorded) job back into `pulling`
            if job.stored.stop is not None or job.state.status.is_finished():
                return
            message = f"pulling {job.spec.image}"
            self._save(
                job,
                persist=False,
                status=JobStatus.PULLING,
                pull_progress=fraction,
                message=message,
            )

        if job.stored.stop is None:
            job.preparing = True
            try:
                await executor.prepare(job.spec, job.files, progress)
            except asyncio.CancelledError:
                if self._closing:
                    raise
            finally:
                job.preparing = False
        if job.stored.stop is not None:
            self._finish(job, None)
            return None
        return await executor.launch(job.spec, job.files)

    def _mark_running(self, job: _Job, launched: Launched) -> None:
        self._save(
            job,
            status=JobStatus.RUNNING,
            pull_progress=None,
            message="",
            pid=launched.pid,
            container_id=launched.container_id,
            ports=launched.ports,
            started_at=job.state.started_at or self._clock(),
        )

    def _start_stopper(self, job: _Job) -> None:
        if job.stopper is None or job.stopper.done():
            job.stopper = asyncio.create_task(self._enforce_stop(job))

    async def _enforce_stop(self, job: _Job) -> None:
        """SIGTERM, then SIGKILL at the deadline unless the job ended meanwhile."""
        executor = self._executors[job.spec.executor]
        order = job.stored.stop
        if order is None:
            return
        if not order.killed:
            await self._signal(job, executor, kill=False)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job.done.wait(), max(order.deadline - self._clock(), 0))
                return
            self._save(job, stop=order.model_copy(update={"killed": True}))
        await self._signal(job, executor, kill=True)

    async def _signal(self, job: _Job, executor: Executor, *, kill: bool) -> None:
        """Signal the job; an error (engine away, /proc unreadable) is logged and the
        signal sent again until it goes through or the job has ended."""
        for attempt in itertools.count():
            try:
                await executor.signal(job.spec, job.files, kill=kill)
                return
            except (OSError, ExecutorError, EngineUnavailableError) as error:
                if job.done.is_set():
                    return
                log.warning("job %s: cannot signal it (%s); trying again", job.spec.id, error)
                await asyncio.sleep(self._engine_retry[min(attempt, len(self._engine_retry) - 1)])

    def _finish(self, job: _Job, exit_status: int | None) -> None:
        order = job.stored.stop
        now = self._clock()
        if order is not None:
            killed = order.killed
            if exit_status is None and killed:
                exit_status = 137  # 128 + SIGKILL, as a shell or Docker reports it
            reason = JobReason.KILLED if killed else JobReason.STOPPED
            message = "killed after the grace period" if killed else "stopped on request"
            self._save(
                job,
                status=JobStatus.TERMINATED,
                reason=reason,
                exit_status=exit_status,
                message=message,
                finished_at=now,
                pull_progress=None,
            )
        elif exit_status is None:
            self._fail(job, JobReason.LOST, "the job vanished without an exit status")
        else:
            self._save(
                job,
                status=JobStatus.EXITED,
                exit_status=exit_status,
                message=f"exited with status {exit_status}",
                finished_at=now,
            )

    def _fail(self, job: _Job, reason: JobReason, message: str) -> None:
        self._save(
            job,
            status=JobStatus.FAILED,
            reason=reason,
            message=message,
            finished_at=self._clock(),
            pull_progress=None,
        )

    def _save(
        self, job: _Job, *, persist: bool = True, stop: StopOrder | None = None, **changes: object
    ) -> None:
        before = job.stored
        state = job.state.model_copy(update=changes) if changes else job.state
        job.stored = job.stored.model_copy(update={"state": state, "stop": stop or job.stored.stop})
        if persist:
            self._persist(job)
        if state.status != before.state.status or job.stored.stop != before.stop:
            ended = state.status.is_finished() and not before.state.status.is_finished()
            end = JobEnd(state=state, log=_short_log(job.files.log)) if ended else None
            self.events.publish(job.spec.id, JobEventKind.STATE, state.status.value, end)

    def _persist(self, job: _Job) -> None:
        """Write the job's record. A disk that refuses it (full) does not stop the job's
        story: the state is kept, answered and told (its event, its end) as usual, and the
        record is written once the disk takes it (`_write_unwritten`); a failed write must
        not fail a job that ran well (its supervisor would kill and fail it)."""
        try:
            self._store.save(job.stored)
        except OSError as error:
            log.warning(
                "job %s: its record is written once the disk takes it: %s", job.spec.id, error
            )
            self._unwritten.add(job.spec.id)
            if self._writer is None or self._writer.done():
                with contextlib.suppress(RuntimeError):  # no running loop: the next save
                    self._writer = asyncio.get_running_loop().create_task(self._write_unwritten())
        else:
            self._unwritten.discard(job.spec.id)

    async def _write_unwritten(self) -> None:
        for attempt in itertools.count():
            await asyncio.sleep(
                UNWRITTEN_RETRY_SECONDS[min(attempt, len(UNWRITTEN_RETRY_SECONDS) - 1)]
            )
            for job_id in sorted(self._unwritten):
                job = self._jobs.get(job_id)
                try:
                    if job is not None:
                        self._store.save(job.stored)
                except OSError:
                    break  # still full: all again later
                self._unwritten.discard(job_id)
            if not self._unwritten:
                return

    def _unfinished(self) -> set[str]:
        return {i for i, job in self._jobs.items() if not job.state.status.is_finished()}

    def _running_logs(self) -> tuple[tuple[str, Path], ...]:
        return tuple(
            (job_id, job.files.log)
            for job_id, job in self._jobs.items()
            if job.state.status == JobStatus.RUNNING
        )

    def _job(self, job_id: str) -> _Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise AgentError(ErrorCode.NOT_FOUND, f"no job {job_id} on this agent")
        return job


def _short_log(path: Path) -> bytes | None:
    """The whole log of a finished job if it is at most `END_LOG_BYTES` (it travels with
    the job's end event); None if longer or unreadable. A small read, on the event loop."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(END_LOG_BYTES + 1)
    except FileNotFoundError:
        return b""
    except OSError:
        return None
    return data if len(data) <= END_LOG_BYTES else None
