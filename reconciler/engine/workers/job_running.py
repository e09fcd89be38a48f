"""Running and terminating jobs: poll the agent, pull logs, probe, enforce limits, stop.

Called by `JobsProcessor` for jobs in pulling/running/terminating. Logs are pulled by
byte offset into the server's log file before a finished job is removed from the agent,
so nothing printed is lost. An unreachable agent sets `unreachable_since`; only after the
grace window does the job fail with `instance_unreachable` (or `interrupted_by_no_capacity`
on spot instances), dstack's rule. The instance is an `AgentHost` (read with the job, or
the store's `InstanceRecord`): this module imports no ORM model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from agent.client import AgentClient, AgentError
from agent.jobevents import JobEnd
from agent.protocol import ErrorCode, JobReason, JobState
from agent.protocol import JobStatus as AgentStatus
from agent.ssh.transport import SSHTransport
from agent.tunnel import AgentUnreachable, SSHTarget
from reconciler.adapters.db.store import Store
from reconciler.core.cloning import clone_failure
from reconciler.core.inactivity import Activity, inactivity_limit, inactivity_verdict
from reconciler.core.jobspecs import container_ports
from reconciler.core.utilization import Sample, keep_window, violates
from reconciler.domain.inventory import AgentHost
from reconciler.domain.statuses import JobStatus, JobTerminationReason
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.joblogs import job_log_path, read_log, write_chunk
from reconciler.engine.workers.agent_batches import JobRemovals
from reconciler.engine.workers.job_context import REMOVE, JobContext, JobsConfig, Update, finish
from reconciler.ports import WorkKind

log = logging.getLogger(__name__)
JR = JobTerminationReason
EVENT_POLL = 600.0
"""Seconds between the passes of a job whose agent's events are followed (a safety net:
the events wake it on every change). Long, so a thousand sleeping jobs cost the server
next to nothing (bench/sleeping.py)."""
Release = Callable[[JobContext, Update], Update]
USER_STOPS = frozenset({JR.TERMINATED_BY_USER, JR.ABORTED_BY_USER})
"""A terminating job's reasons that its own end never overrides (dstack keeps them)."""
CLONE_TAIL = 4096
"""Bytes read from the end of a failed job's log for a failed `repos:` fetch's line."""


def _exit_reason(state: JobState) -> tuple[JobTerminationReason, str]:
    if state.status is AgentStatus.EXITED:
        if state.exit_status == 0:
            return JR.DONE_BY_RUNNER, ""
        return JR.CONTAINER_EXITED_WITH_ERROR, f"exited ({state.exit_status})"
    if state.status is AgentStatus.FAILED:
        if state.reason is JobReason.IMAGE_NOT_FOUND:
            return JR.CREATING_CONTAINER_ERROR, state.message
        return JR.EXECUTOR_ERROR, state.message or "the agent lost the job"
    return JR.TERMINATED_BY_SERVER, "stopped outside Dockyard"


class RunningJobs:
    """See the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        agents: AgentDirectory,
        config: JobsConfig,
        release: Release,
        event_poll: float = EVENT_POLL,
        hint: Callable[[WorkKind], None] | None = None,
    ) -> None:
        self.store = store
        self._hint = hint
        self.agents = agents
        self.config = config
        self._release = release
        self._probe_clients: dict[SSHTarget, httpx.AsyncClient] = {}
        self._removals = JobRemovals()
        self.removing: set[asyncio.Task[None]] = set()
        """Removals started and not yet answered (`remove`)."""
        self.event_poll = event_poll

    def _instance(self, ctx: JobContext) -> AgentHost | None:
        """Where the job runs: as read with it, else the store's record of that instance."""
        if ctx.instance is not None and ctx.instance.id == ctx.job.instance_id:
            return ctx.instance  # read with the job
        if ctx.job.instance_id is None:
            return None
        return self.store.instance_record(ctx.job.instance_id)

    # -- unreachable ------------------------------------------------------------------------

    async def host_lost(self, ctx: JobContext) -> None:
        """A job found its agent gone for the first time: the instance is checked at once
        (a local agent that died is started again, and the jobs there look for themselves
        as soon as it answers: `agent_sync`), not at its next regular check."""
        if ctx.job.unreachable_since is not None or not ctx.job.instance_id:
            return
        woken = await self.store.in_lane(self.store.wake_instance, ctx.job.instance_id)
        if woken and self._hint is not None:
            self._hint("instances")

    def unreachable(self, ctx: JobContext, exc: AgentUnreachable) -> Update:
        now = self.store.now()
        since = ctx.job.unreachable_since or now
        if (now - since).total_seconds() < self.config.unreachable_grace:
            return {"unreachable_since": since, "status_message": f"agent unreachable: {exc}"}
        instance = self._instance(ctx)
        spot = bool(
            instance and isinstance(instance.resources, Mapping) and instance.resources.get("spot")
        )
        reason = JR.INTERRUPTED_BY_NO_CAPACITY if spot else JR.INSTANCE_UNREACHABLE
        message = f"agent unreachable for {self.config.unreachable_grace:.0f}s: {exc}"
        return self._release(ctx, finish(reason, now, message))

    async def _allocation_end(
        self, instance: AgentHost, reason: JR, message: str
    ) -> tuple[JR, str]:
        """A job that failed on a Slurm allocation the cluster ended ends with the
        allocation's reason (`JobsConfig.cluster_ended`): Slurm signals every process of
        the allocation, the job's with its agent's, so the agent may report the job's
        death before it goes itself."""
        ended = self.config.cluster_ended
        resources = getattr(instance, "resources", None)
        if ended is None or getattr(instance, "backend", None) != "slurm":
            return reason, message
        found = await ended(resources)
        if found is None:
            return reason, message
        # its instance goes too, now, not at its next check
        if await self.store.in_lane(self.store.wake_instance, instance.id) and self._hint:
            self._hint("instances")
        return found

    # -- logs -------------------------------------------------------------------------------

    async def pull_logs(self, ctx: JobContext, client: AgentClient) -> tuple[int, bool]:
        """Copy new log bytes to the server file; (new offset, whether the end was reached)."""
        path = job_log_path(self.config.data_dir, ctx.project.name, ctx.run.run_name, ctx.job.id)
        offset = ctx.job.log_offset
        job_id = ctx.job.agent_job_id or ctx.job.id
        if self.config.disk is not None and self.config.disk.check().low:
            return offset, False  # the agent keeps them; copied once space returns
        cap = self.config.log_cap
        for _ in range(self.config.log_chunks_per_pass):
            chunk = await client.logs(job_id, offset, self.config.log_chunk, ack=ctx.job.log_offset)
            if chunk.data:
                offset = await self.store.in_lane(write_chunk, path, offset, chunk.data, cap)
            if len(chunk.data) < self.config.log_chunk:
                return offset, True
        return offset, False

    async def _state_and_logs(
        self, ctx: JobContext, client: AgentClient, instance_id: str, job_id: str
    ) -> tuple[JobState, int, bool]:
        """The job's state and its new log bytes (`pull_logs`'s offset and end): from its
        end event when the agent told it (nothing asked), else asked of the agent."""
        end = self.agents.events.ended(instance_id, job_id)
        if end is not None:
            offset, drained = await self._end_logs(ctx, client, end)
            return end.state, offset, drained
        state = await client.job(job_id)
        offset, drained = await self.pull_logs(ctx, client)
        return state, offset, drained

    async def _end_logs(
        self, ctx: JobContext, client: AgentClient, end: JobEnd
    ) -> tuple[int, bool]:
        """`pull_logs` for a job whose end event carried its whole log: what the server
        lacks is written from it, nothing asked (pulled as usual when it did not carry it)."""
        log, offset = end.log, ctx.job.log_offset
        low = self.config.disk is not None and self.config.disk.check().low
        if log is None or len(log) < offset or low:
            return await self.pull_logs(ctx, client)
        if len(log) > offset:
            path = job_log_path(
                self.config.data_dir, ctx.project.name, ctx.run.run_name, ctx.job.id
            )
            await self.store.in_lane(write_chunk, path, offset, log[offset:], self.config.log_cap)
        return len(log), True

    async def _clone_failure(self, ctx: JobContext, end: int) -> str | None:
        """git's error when the job's `repos:` fetch failed (`cloning.clone_failure`), from
        the last bytes of its log (`end`: the log's length)."""
        path = job_log_path(self.config.data_dir, ctx.project.name, ctx.run.run_name, ctx.job.id)
        start = max(0, end - CLONE_TAIL)
        found = await self.store.in_lane(read_log, path, start, CLONE_TAIL)
        return clone_failure(found.data)

    # -- running ----------------------------------------------------------------------------

    async def running(self, ctx: JobContext) -> tuple[Update, float | None]:
        instance = await self.store.in_lane(self._instance, ctx)
        if instance is None:
            return finish(JR.INSTANCE_UNREACHABLE, self.store.now(), "instance gone"), None
        client = self.agents.client(instance)
        job_id = ctx.job.agent_job_id or ctx.job.id
        try:
            state, offset, drained = await self._state_and_logs(ctx, client, instance.id, job_id)
        except AgentUnreachable as exc:
            await self.host_lost(ctx)
            return self.unreachable(ctx, exc), self.config.active_poll
        except AgentError as exc:
            if exc.code != ErrorCode.NOT_FOUND.value:
                raise
            # a stop of a job it does not know makes the agent kill what carries its marker
            with contextlib.suppress(AgentError, AgentUnreachable):
                await client.stop(job_id, grace=0, force=True)
            return self._release(
                ctx, finish(JR.EXECUTOR_ERROR, self.store.now(), "the agent lost the job")
            ), None
        update: Update = {"log_offset": offset, "unreachable_since": None}
        runtime = ctx.runtime
        if state.status.is_finished():
            if self.config.disk is not None and not drained:
                disk = self.config.disk.check()  # logs wait on the agent until space returns
                if disk.low:  # nothing wakes it when space returns: it looks (a statvfs)
                    return update | {"status_message": disk.problem}, self.config.disk_poll
            if not drained:
                return update, 0.0
            reason, message = _exit_reason(state)
            if reason is not JR.DONE_BY_RUNNER:  # killed with the Slurm allocation it ran in?
                reason, message = await self._allocation_end(instance, reason, message)
            if reason is JR.CONTAINER_EXITED_WITH_ERROR:  # a failed `repos:` fetch says why
                message = await self._clone_failure(ctx, offset) or message
            update |= finish(reason, self.store.now(), message, exit_status=state.exit_status)
            return self._release(ctx, update | {"runtime": runtime, REMOVE: job_id}), None
        if state.status is AgentStatus.RUNNING:
            if "started_at" not in runtime:
                runtime["started_at"] = self.store.clock.now_ts()
            runtime["ports"] = {str(p.container_port): p.host_port for p in state.ports}
            update["status"] = JobStatus.RUNNING.value
            await self._probe(ctx, instance, runtime)
            over = (
                self._over_max_duration(ctx, runtime)
                or self._inactive(ctx, state, runtime)
                or await self._underused(ctx, client, job_id, runtime)
            )
            if over:
                update |= {"status": JobStatus.TERMINATING.value, "termination_reason": over.value}
        else:
            update["status"] = JobStatus.PULLING.value
            if state.pull_progress is not None:
                update["status_message"] = f"pulling {state.pull_progress:.0%}"
        update["runtime"] = runtime
        duty = self._duty(ctx, runtime, pulling=state.status is not AgentStatus.RUNNING)
        return update, self.next_pass(ctx, runtime.get("started_at"), duty=duty)

    def after_submit(self, ctx: JobContext, runtime: Mapping[str, Any], *, pulling: bool) -> float:
        """When a job just submitted is looked at next: its first duty (a limit, a pull's
        progress), else `next_pass` (its start event, told by the submit's answer, wakes
        no one: the duties must not wait for the event poll)."""
        duty = self._duty(ctx, runtime, pulling=pulling)
        return self.next_pass(ctx, runtime.get("started_at"), duty=duty)

    def next_pass(
        self, ctx: JobContext, since: float | None, *, duty: float | None = None
    ) -> float:
        """When a job on an agent is looked at next. While its agent's events are followed,
        every change (state, output) wakes it, so it sleeps until `event_poll` or its next
        duty (a probe, a limit); otherwise it is polled, quickly in its first seconds (or
        those of its stop), then at the pace."""
        if ctx.job.instance_id and self.agents.following(ctx.job.instance_id):
            return self.event_poll if duty is None else min(self.event_poll, duty)
        polled = self._poll_after(since)
        return polled if duty is None else min(polled, duty)

    def _poll_after(self, since: float | None) -> float:
        """Poll quickly in the first seconds of a job (or of its stop), then at the pace."""
        if since is None or self.store.clock.now_ts() - float(since) < self.config.quick_for:
            return self.config.quick_poll
        return self.config.active_poll

    def _duty(self, ctx: JobContext, runtime: Mapping[str, Any], *, pulling: bool) -> float | None:
        """Seconds until a running job must be looked at whatever its agent says: image
        pull progress, a service probe, a utilization or inactivity window, max_duration."""
        spec = ctx.slot.spec
        duties: list[float] = []
        if pulling:
            duties.append(self.config.active_poll)
        probes = spec.get("probes")
        if spec.get("type") == "service" and probes:
            duties.append(float(probes[0].get("interval") or 15))
        if isinstance(spec.get("utilization_policy"), Mapping) or inactivity_limit(spec):
            duties.append(self.config.active_poll)
        limit, started = spec.get("max_duration"), runtime.get("started_at")
        if isinstance(limit, int) and not isinstance(limit, bool) and started is not None:
            left = float(started) + limit - self.store.clock.now_ts()
            duties.append(max(left, 0.0) + 0.5)
        return min(duties) if duties else None

    def _over_max_duration(self, ctx: JobContext, runtime: Mapping[str, Any]) -> JR | None:
        limit = ctx.slot.spec.get("max_duration")
        if not isinstance(limit, int) or isinstance(limit, bool):
            return None
        started = runtime.get("started_at")
        if started is not None and self.store.clock.now_ts() - float(started) > limit:
            return JR.MAX_DURATION_EXCEEDED
        return None

    def _inactive(self, ctx: JobContext, state: JobState, runtime: dict[str, Any]) -> JR | None:
        """Dev environments' `inactivity_duration`, from the agent's connection figures."""
        limit = inactivity_limit(ctx.slot.spec)
        if limit is None:
            return None
        activity = Activity(state.connections, state.last_connection_at, state.no_connections_secs)
        verdict = inactivity_verdict(
            limit,
            activity,
            running_since=float(runtime.get("started_at") or self.store.clock.now_ts()),
            now=self.store.clock.now_ts(),
        )
        runtime["idle_seconds"] = verdict.idle_seconds
        return JR.INACTIVITY_DURATION_EXCEEDED if verdict.exceeded else None

    async def _underused(
        self, ctx: JobContext, client: AgentClient, job_id: str, runtime: dict[str, Any]
    ) -> JR | None:
        """`utilization_policy`: sample GPU utilization; end the job if idle a whole window."""
        policy = ctx.slot.spec.get("utilization_policy")
        if not isinstance(policy, Mapping):
            return None
        now = self.store.clock.now_ts()
        metrics = await client.metrics(job_id)
        samples: list[Sample] = [(float(t), tuple(u)) for t, u in runtime.get("gpu_samples", [])]
        samples.append((now, tuple(g.utilization for g in metrics.gpus)))
        window = float(policy.get("time_window") or 0)
        samples = keep_window(samples, now=now, window=window)
        runtime["gpu_samples"] = [[t, list(u)] for t, u in samples]
        return (
            JR.TERMINATED_DUE_TO_UTILIZATION_POLICY if violates(policy, samples, now=now) else None
        )

    # -- probes -----------------------------------------------------------------------------

    async def _probe(self, ctx: JobContext, instance: AgentHost, runtime: dict[str, Any]) -> None:
        """Services: run the configured HTTP probes; no probes = ready once running."""
        spec = ctx.slot.spec
        probes = spec.get("probes")
        if spec.get("type") != "service" or not probes:
            runtime["ready"] = True
            return
        probe = probes[0]
        now = self.store.clock.now_ts()
        if now - float(runtime.get("probed_at", 0)) < float(probe.get("interval") or 15):
            return
        runtime["probed_at"] = now
        ports = container_ports(spec)
        port = int((runtime.get("ports") or {}).get(str(ports[0]), ports[0])) if ports else 80
        ok = await self._probe_once(instance, port, probe)
        successes = int(runtime.get("probe_successes", 0)) + 1 if ok else 0
        runtime["probe_successes"] = successes
        needed = int(probe.get("ready_after") or 1)
        was_ready = bool(runtime.get("ready"))
        runtime["ready"] = successes >= needed or (was_ready and bool(probe.get("until_ready")))

    async def _probe_once(self, instance: AgentHost, port: int, probe: Mapping[str, Any]) -> bool:
        address = self.agents.address(instance)
        client = self._probe_clients.get(address.target)
        if client is None:
            pool, target = self.agents.pool, address.target

            async def open_stream(host: str, p: int) -> Any:
                return await pool.open_stream(target, host, p)

            client = httpx.AsyncClient(transport=SSHTransport(open_stream))
            self._probe_clients[address.target] = client
        headers = {h["name"]: h["value"] for h in probe.get("headers") or () if "name" in h}
        try:
            response = await client.request(
                str(probe.get("method") or "get").upper(),
                f"http://127.0.0.1:{port}{probe.get('url') or '/'}",
                headers=headers,
                content=probe.get("body"),
                timeout=float(probe.get("timeout") or 10),
            )
        except (httpx.HTTPError, AgentUnreachable):
            return False
        return 200 <= response.status_code < 400

    # -- terminating ------------------------------------------------------------------------

    async def terminating(self, ctx: JobContext) -> tuple[Update, float | None]:
        reason = JR(ctx.job.termination_reason or JR.TERMINATED_BY_SERVER.value)
        instance = await self.store.in_lane(self._instance, ctx)
        if instance is None:
            return self._release(ctx, finish(reason, self.store.now())), None
        client = self.agents.client(instance)
        runtime = ctx.runtime
        # no agent_job_id yet: a submit whose answer was lost may still have started it
        # (the agent's id is the job's); a `not_found` below says nothing runs
        job_id = ctx.job.agent_job_id or ctx.job.id
        try:
            if not runtime.get("stop_sent"):
                abort = reason is JR.ABORTED_BY_USER
                timeout = 0.0 if abort else float(_stop_duration(ctx))
                await client.stop(job_id, grace=timeout, force=abort)
                runtime["stop_sent"] = True
            state, offset, drained = await self._state_and_logs(ctx, client, instance.id, job_id)
        except AgentUnreachable as exc:
            await self.host_lost(ctx)
            # Past the grace window `unreachable` ends the job: the host is lost, the job too.
            return self.unreachable(ctx, exc) | {"runtime": runtime}, self.config.active_poll
        except AgentError as exc:
            if exc.code != ErrorCode.NOT_FOUND.value:
                raise
            return self._release(ctx, finish(reason, self.store.now())), None
        progress: Update = {"log_offset": offset, "runtime": runtime}
        if not (state.status.is_finished() and drained):
            runtime.setdefault("stop_sent_at", self.store.clock.now_ts())
            return progress, self.next_pass(ctx, runtime["stop_sent_at"])
        ended = finish(reason, self.store.now(), exit_status=state.exit_status)
        if state.status is AgentStatus.EXITED and reason not in USER_STOPS:
            # it ended on its own before the server's stop (a limit, a scale-down): that wins
            own, message = _exit_reason(state)
            ended = finish(own, self.store.now(), message, exit_status=state.exit_status)
        elif state.status is AgentStatus.EXITED:
            # A user's stop is the user's, as dstack keeps it: a job that ended on its own
            # before the stop reached it (its agent was away) still ends stopped.
            ended["status_message"] = f"{state.message or 'exited'} before the stop reached it"
        return self._release(ctx, progress | ended | {REMOVE: job_id}), None

    async def remove(self, ctx: JobContext, job_id: str) -> None:
        """Remove a finished job from its host (its final status is already stored): the
        removal is started and goes on without the caller (`removing`), with the others
        ending there meanwhile (`JobRemovals` gathers them): the job's pass ends now."""
        instance = await self.store.in_lane(self._instance, ctx)
        if instance is None:
            return
        self.agents.events.ended(instance.id, job_id)  # an end its pass did not use: dropped
        task = asyncio.create_task(self._remove(instance, job_id), name="job-removal")
        self.removing.add(task)
        task.add_done_callback(self.removing.discard)

    async def _remove(self, instance: AgentHost, job_id: str) -> None:
        # Unreachable: the instances worker removes it once the agent answers
        # (`agent_sync`), soon, in whichever replica checks the instance next: the mark is
        # the store's (`removal_missed`), this process's own besides.
        try:
            await self._removals.remove(self.agents.client(instance), job_id)
        except AgentUnreachable:
            self.agents.unsettled.add(instance.id)
            await self.store.in_lane(self.store.removal_missed, instance.id)
        except Exception:  # no caller to tell: the job is done, its files stay (harmless)
            log.exception("removing job %s from %s failed", job_id, instance.id)

    async def aclose(self) -> None:
        await self._removals.aclose()  # cancels the removals not sent (their files stay)
        await asyncio.gather(*self.removing, return_exceptions=True)
        for client in self._probe_clients.values():
            await client.aclose()


def _stop_duration(ctx: JobContext) -> int:
    value = ctx.slot.spec.get("stop_duration")
    if value == "off":
        return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 300
