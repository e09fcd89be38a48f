"""The jobs worker: takes each active job one step through dstack's job lifecycle.

submitted -> provisioning (an instance is chosen and its capacity taken) -> pulling /
running (the agent runs it; logs are pulled by offset into the server's log file) ->
terminating (stop with grace, drain logs, remove) -> done / failed / terminated / aborted.

`JobsProcessor.process(job_id, token)` is the worker callback (`reconciler.engine.worker`):
it reloads the job by its lease token, decides with the pure core (`scheduling`,
`jobspecs`, `transitions`), does the slow agent I/O outside any DB transaction and writes
the result fenced by the token. An unreachable agent is a state with a grace window, not a
failure. Placing a submitted job is `job_placing.py`; running and terminating jobs are
handled in `job_running.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.client import AgentError
from agent.protocol import ErrorCode, ExecutorKind, JobSpec
from agent.protocol import JobStatus as AgentStatus
from agent.tunnel import AgentUnreachable
from reconciler.adapters.blobs import BlobStore
from reconciler.adapters.db.jobsteps import JobStep, StepResult
from reconciler.adapters.db.secrets_crypto import SecretsCipher, load_or_create_key
from reconciler.adapters.db.stepevents import RunFollowing
from reconciler.adapters.db.steploads import JobRows
from reconciler.adapters.db.store import Store
from reconciler.core.jobspecs import ClusterInfo, JobSlot, render_agent_job, volume_names
from reconciler.core.runfollow import follow_run, follows_its_job
from reconciler.core.transitions import moves_run
from reconciler.domain.inventory import InstanceRecord
from reconciler.domain.statuses import JobStatus, JobTerminationReason
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.worker import RELEASED, Lease, Process, WorkerConfig
from reconciler.engine.workers import ArchiveBuilder, WorkerDeps
from reconciler.engine.workers.agent_batches import JobSubmits
from reconciler.engine.workers.job_context import (
    MARKERS,
    PARK_LIKE,
    PASS_WAKE,
    RELEASE,
    REMOVE,
    TAKE,
    WAKE_FLEET,
    JobContext,
    JobsConfig,
    Update,
    finish,
)
from reconciler.engine.workers.job_placing import JobPlacer
from reconciler.engine.workers.job_running import RunningJobs
from reconciler.engine.workers.job_uploads import job_archives
from reconciler.engine.workers.job_writes import StepWrites
from reconciler.engine.workers.run_jobs import job_view, run_view
from reconciler.errors import PermanentError
from reconciler.ports import WorkKind


class JobsProcessor:
    """The worker callback for jobs; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        agents: AgentDirectory,
        config: JobsConfig,
        secrets: Callable[[str], Mapping[str, str]],
        hint: Callable[[WorkKind], None],
        archives: ArchiveBuilder | None = None,
    ) -> None:
        self.store = store
        self._archives = archives
        self._blobs = BlobStore(config.data_dir / "files")  # what `dockyard apply` uploaded
        self.agents = agents
        self.config = config
        self._secrets = secrets
        self._hint = hint
        self._prepared: dict[str, JobContext] = {}  # by lease token, read with the claim
        self._placer = JobPlacer(store=store, config=config, write=self._write_placement)
        self._running = RunningJobs(
            store=store, agents=agents, config=config, release=self.release, hint=hint
        )
        self._writes = StepWrites(store.record_job_steps, run=store.in_lane)
        # a claimed batch's jobs, placed one after the other, go to their agent together
        self._submits = JobSubmits(gather=self._placer.settled)

    async def __call__(self, job_id: str, token: str) -> float | None:
        """The worker callback (`Worker` also finds `prepare` on it)."""
        return await self.process(job_id, token)

    async def prepare(self, leases: Sequence[Lease]) -> None:
        """Read every job of a claimed batch in one read (one thread hop for the batch)."""
        pairs = [(lease.row_id, lease.token) for lease in leases]
        batch = await self.store.in_lane(self.store.load_job_batch, pairs)
        self._placer.forget()
        self._prepared.update((token, _context(rows)) for token, rows in batch.items())

    async def process(self, job_id: str, token: str) -> float | None:
        ctx = self._prepared.pop(token, None)
        batched = ctx is not None  # read with its claimed batch (`prepare`)
        if ctx is None:
            ctx = await self.store.in_lane(self._load, job_id, token)
        if ctx is None:
            return None
        if JobStatus(ctx.job.status) is JobStatus.SUBMITTED:
            update, due, placed = await self._placer.submitted(ctx, token, batched=batched)
            if placed is None:
                return await self._finish_step(ctx, token, update, due)
            # Placed (and still leased): submit it to its agent in the same pass.
            ctx = placed
        return await self._step(ctx, token)

    async def _step(self, ctx: JobContext, token: str) -> float | None:
        """One step of a placed job (provisioning, pulling, running, terminating)."""
        status = JobStatus(ctx.job.status)
        if status is JobStatus.PROVISIONING:
            update, due = await self._provisioning(ctx)
        elif status in (JobStatus.PULLING, JobStatus.RUNNING):
            update, due = await self._running.running(ctx)
        elif status is JobStatus.TERMINATING:
            update, due = await self._running.terminating(ctx)
        else:
            return None
        return await self._finish_step(ctx, token, update, due)

    async def _finish_step(
        self, ctx: JobContext, token: str, update: Update, due: float | None
    ) -> float | None:
        if update:  # the write drops the lease too (one transaction): nothing left to release
            held = await self._write_together(ctx, token, update, _due_in(due))
            if held and REMOVE in update:
                # Only once the final status is stored: a crash before this line leaves a
                # finished job on the host (harmless), never a stored job the host lost.
                await self._running.remove(ctx, update[REMOVE])
            if held:
                return RELEASED
        return due

    def _load(self, job_id: str, token: str) -> JobContext | None:
        rows = self.store.load_job_rows(job_id, token)  # one read transaction
        return None if rows is None else _context(rows)

    def write(
        self, ctx: JobContext, token: str, update: Update, release_lease: float | None = None
    ) -> bool:
        """Write fenced by the lease and by the status read: a stop requested meanwhile
        (status set to terminating by the runs worker or the API) is never overwritten.
        Capacity taken (`TAKE`) or given back (`RELEASE`), the status event, the run made
        due and (with `release_lease`: due again in that many seconds) the lease dropped
        commit in the same transaction (`Store.record_job_step`). True if written."""
        step = self._step_of(ctx, token, update, release_lease)
        return self._written(self.store.record_job_step(step), step, update)

    async def _write_together(
        self, ctx: JobContext, token: str, update: Update, release_lease: float
    ) -> bool:
        """`write`, in one transaction with the other steps written now (`StepWrites`)."""
        step = self._step_of(ctx, token, update, release_lease)
        if step.take:  # a placement answers its instance: on its own
            return await self.store.in_lane(self.write, ctx, token, update, release_lease)
        return self._written(await self._writes.write(step), step, update)

    def _write_placement(self, ctx: JobContext, token: str, update: Update) -> JobContext | None:
        """`write` for a placement (`Store.place_job`, the lease kept): the placed job as
        written, on its instance as the placement left it; None if nothing was written."""
        step = self._step_of(ctx, token, update, None)
        # Room made while it waited to be placed woke it (it was first in line): placed,
        # it has used that wake, so its pass does not run again after the submit.
        values = step.values
        placed = self.store.place_job(replace(step, values={**values, "due_at": self.store.now()}))
        if isinstance(placed, StepResult):
            self._written(placed, step, update)
            return None
        self._written(StepResult.WRITTEN, step, update)
        return replace(ctx, job=replace(ctx.job, **values), instance=placed)

    def _written(self, result: StepResult, step: JobStep, update: Update) -> bool:
        """Hint the workers whose rows the write made due; True if it was written."""
        held = result in (StepResult.WRITTEN, StepResult.WRITTEN_RUN_DUE)
        if held and RELEASE in update:  # the woken jobs run now, not at the next poll
            self._placer.forget()
            self._hint("jobs")
        if held and WAKE_FLEET in update:  # the fleet sees the demand now stored
            self._hint("fleets")
        if held and (step.wake_run or result is StepResult.WRITTEN_RUN_DUE):
            self._hint("runs")  # the run reacts now
        return held

    def _step_of(
        self, ctx: JobContext, token: str, update: Update, release_lease: float | None
    ) -> JobStep:
        values = {k: v for k, v in update.items() if k not in MARKERS}
        changed = "status" in values and values["status"] != ctx.job.status
        event = None
        if changed:
            reason = values.get("termination_reason")
            message = f"job status {ctx.job.status} -> {values['status']}" + (
                f" ({reason})" if reason else ""
            )
            event = (f"{ctx.run.run_name}/{ctx.job.replica_num}/{ctx.job.job_num}", message)
        wake_run = changed and moves_run(JobStatus(ctx.job.status), JobStatus(values["status"]))
        follow = None
        run = run_view(ctx.run)
        if follows_its_job(run):  # the run's status goes with the job's write, no run pass
            wake_run = False
            if TAKE not in update:  # a placement's pass goes on: its next write carries it
                change = follow_run(run, job_view(ctx.job, values), now=self.store.clock.now_ts())
                wake_run = change is None
                if change is not None:
                    follow = RunFollowing(ctx.run.status, ctx.run.run_name, change)
        return JobStep(
            job_id=ctx.job.id,
            token=token,
            read_status=ctx.job.status,
            project_id=ctx.project.id,
            run_id=ctx.run.id,
            values=values,
            take=tuple(update.get(TAKE) or ()),
            release=update.get(RELEASE),
            wake_fleet=update.get(WAKE_FLEET),
            pass_wake=update.get(PASS_WAKE),
            park_like=update.get(PARK_LIKE),
            event=event,
            release_lease=release_lease,
            wake_run=wake_run,
            follow=follow,
        )

    def _note(self, ctx: JobContext, message: str) -> None:
        self.store.append_event(
            project_id=ctx.project.id,
            target_type="job",
            target_id=ctx.job.id,
            target_name=f"{ctx.run.run_name}/{ctx.job.replica_num}/{ctx.job.job_num}",
            message=message,
        )

    # -- provisioning: submit to the agent ----------------------------------------------------

    async def _provisioning(self, ctx: JobContext) -> tuple[Update, float | None]:
        instance = ctx.instance
        if instance is None:
            return finish(
                JobTerminationReason.INSTANCE_UNREACHABLE, self.store.now(), "instance gone"
            ), None
        try:
            # not in the store's lane: it may pack a repo or files (git reads, archives)
            body, note = await asyncio.to_thread(self._render, ctx, instance)
        except PermanentError as exc:
            return self.release(
                ctx, finish(JobTerminationReason.EXECUTOR_ERROR, self.store.now(), str(exc))
            ), None
        client = self.agents.client(instance)
        events, agent_job_id = self.agents.events, str(body["id"])
        events.submitting(instance.id, agent_job_id)  # its start event: the answer tells it
        try:
            # with the other jobs submitted there now: one call for them all (`JobSubmits`)
            state = await self._submits.submit(client, JobSpec.model_validate(body))
        except AgentUnreachable as exc:
            events.submitted(instance.id, agent_job_id, started=False)
            return self._running.unreachable(ctx, exc), self.config.wait_poll
        except AgentError as exc:
            events.submitted(instance.id, agent_job_id, started=False)
            if exc.code == ErrorCode.NO_CAPACITY.value:
                released = self.release(
                    ctx, {"status": JobStatus.SUBMITTED.value, "instance_id": None}
                )
                return released | {"status_message": exc.message}, self.config.wait_poll
            reason = JobTerminationReason.CREATING_CONTAINER_ERROR
            return self.release(ctx, finish(reason, self.store.now(), exc.message)), None
        # the agent's word on how it runs the job (e.g. not in a container, and why)
        note = "; ".join(part for part in (note, state.notice) if part)
        if note:  # kept past the job's end (its status message is not)
            await self.store.in_lane(self._note, ctx, note)
        executor = state.executor.value if state.executor else body["executor"]
        runtime = ctx.runtime | {"executor": executor}
        # The agent answers once the job left `pending` (agent.server.events.settled): a
        # process job is running, or has even exited, by then.
        ran = state.status in (AgentStatus.RUNNING, AgentStatus.EXITED)
        status = JobStatus.RUNNING if ran else JobStatus.PULLING
        if status is JobStatus.RUNNING:
            runtime["started_at"] = self.store.clock.now_ts()
            runtime["ports"] = {str(p.container_port): p.host_port for p in state.ports}
        missed = events.submitted(instance.id, agent_job_id, started=ran)  # a start, told late
        # One that ended is looked at again at once, unless its end event will wake it; a
        # running service too: its first look makes it ready (or probes it) and records
        # its ports, and no event may come to wake it (a quiet server prints nothing). So
        # is a dev environment (its first look, as a service's). A task is looked at by
        # its first duty (`max_duration`, a utilization window) or when its events say.
        ended = state.status.is_finished() and not self.agents.following(instance.id)
        serving = ran and ctx.run.run_type != "task"
        soon = 0.0 if ended or missed or serving else None
        due = self._running.after_submit(ctx, runtime, pulling=not ran) if soon is None else soon
        return {
            "status": status.value,
            "agent_job_id": state.id,
            "runtime": runtime,
            "unreachable_since": None,
            "status_message": note,
        }, due

    def _render(self, ctx: JobContext, instance: InstanceRecord) -> tuple[dict[str, Any], str]:
        """The agent's job body, and a note on what it could not bring (`repos`/`files`)."""
        slot = ctx.slot
        info = instance.host_info if isinstance(instance.host_info, Mapping) else {}
        executors = info.get("executors") or ["process"]
        image = slot.spec.get("image")
        if image and "docker" not in executors:
            raise PermanentError(
                f"`image: {image}` needs a Docker engine, and instance {instance.name} has none: "
                "install Docker on the host or remove `image` to run as a process"
            )
        executor = ExecutorKind.DOCKER.value if image else ExecutorKind.PROCESS.value
        ips = self._cluster_ips(ctx, slot)
        uploads = job_archives(self.store, ctx, self._archives, self._blobs)
        gpus = [int(i) for i in ctx.runtime.get("gpus") or ()]
        vendors = {str(g.get("vendor")) for g in info.get("gpus") or () if isinstance(g, Mapping)}
        body = render_agent_job(
            gpu_vendor="amd" if vendors == {"amd"} else "nvidia",
            job_id=ctx.job.id,
            run_name=ctx.run.run_name,
            slot=slot,
            gpus=gpus,
            cluster=ClusterInfo(ips, len(gpus)),
            secrets=self._secrets(ctx.project.id) if ctx.secrets else {},
            executor=executor,
            working_dir=None,
            labels={
                "dockyard.project": ctx.project.name,
                "dockyard.run": ctx.run.run_name,
                "dockyard.job": ctx.job.id,
            },
            archives=uploads.archives,
            local_volumes=self._local_volumes(ctx, instance),
        )
        # A whole instance gives containers the host network; a shared one (blocks) maps
        # container ports to free host ports so neighbours never collide.
        shared = executor == ExecutorKind.DOCKER.value and instance.total_blocks > 1
        body["network_mode"] = "bridge" if shared else "host"
        return body, uploads.note

    def _local_volumes(self, ctx: JobContext, instance: InstanceRecord) -> dict[str, str]:
        """The job's network volumes that are directories on its host: active volumes of
        the local engine, when the host is the local fleet's (the server's own host)."""
        if instance.backend != "local":
            return {}
        found = {}
        for name in volume_names(ctx.slot.spec, ctx.job.job_num):
            volume = self.store.get_volume_by_name(ctx.project.id, name)
            if volume is None or volume.status != "active":
                continue
            outputs = volume.outputs
            if isinstance(outputs, Mapping) and outputs.get("backend") == "local":
                found[name] = str(outputs.get("path") or "")
        return found

    def _cluster_ips(self, ctx: JobContext, slot: JobSlot) -> tuple[str, ...]:
        if slot.nodes <= 1:
            return ()
        jobs = [
            j
            for j in self.store.run_job_records(ctx.run.id)
            if j.replica_num == ctx.job.replica_num and j.submission_num == ctx.job.submission_num
        ]
        by_rank: dict[int, str] = {}
        for job in jobs:
            instance = self.store.instance_record(job.instance_id) if job.instance_id else None
            if instance is not None:
                info = instance.host_info if isinstance(instance.host_info, Mapping) else {}
                addresses = info.get("addresses") or []
                by_rank[job.job_num] = instance.hostname or (addresses[0] if addresses else "")
        return tuple(by_rank.get(rank, "") for rank in range(slot.nodes))

    def release(self, ctx: JobContext, update: Update) -> Update:
        """Mark a final (or re-queue) update to give the job's instance blocks back; the
        blocks are returned in the same transaction as the update (`write`)."""
        blocks = int(ctx.runtime.get("blocks") or 0)
        if ctx.job.instance_id and blocks:
            runtime = dict(update.get("runtime") or ctx.runtime) | {"blocks": 0, "gpus": []}
            update = update | {"runtime": runtime, RELEASE: (ctx.job.instance_id, blocks)}
        return update


def _context(rows: JobRows) -> JobContext:
    return JobContext(rows.job, rows.run, rows.project, rows.instance, secrets=rows.secrets)


def _due_in(due: float | None) -> float:
    """When the row is due again after a step that answered `due` (None: the default)."""
    return CONFIG.min_interval if due is None else max(0.0, due)


CONFIG = WorkerConfig(
    kind="jobs",
    concurrency=40,
    lease_seconds=30.0,
    min_interval=2.0,
)


def project_secrets(store: Store, data_dir: Path) -> Callable[[str], Mapping[str, str]]:
    """Decrypted secrets of a project, read when a job is rendered (never logged)."""

    def load(project_id: str) -> Mapping[str, str]:
        names = store.list_secret_names(project_id)
        if not names:
            return {}
        cipher = SecretsCipher(load_or_create_key(data_dir))
        values = {}
        for name in names:
            ciphertext = store.get_secret_ciphertext(project_id, name)
            if ciphertext is not None:
                values[name] = cipher.decrypt(ciphertext)
        return values

    return load


def make_process(deps: WorkerDeps) -> Process:
    """The jobs worker callback (see `reconciler.engine.workers`)."""
    config = JobsConfig(
        data_dir=deps.data_dir,
        unreachable_grace=deps.timings.unreachable_grace,
        wait_backoff=deps.timings.wait_backoff,
        log_cap=deps.log_cap,
        disk=deps.disk,
        cluster_ended=deps.cluster_ended,
    )
    processor = JobsProcessor(
        store=deps.store,
        agents=deps.agents,
        config=config,
        secrets=project_secrets(deps.store, deps.data_dir),
        hint=deps.hint,
        archives=deps.archives,
    )
    return processor  # callable, with `prepare` for the worker
