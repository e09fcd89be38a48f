"""The instances worker: each instance's agent health, host facts and reachability.

- `pending`/`provisioning`: once the agent answers its healthcheck, its host facts
  (CPUs, memory, disk, GPUs) are stored and the instance becomes `idle`: the scheduler
  can place jobs on it. `blocks: auto` is resolved here from the facts, and so are the
  local fleet's blocks (`reconciler.core.hostblocks`: sized by the host's memory and CPUs;
  checked again on each pass from the stored facts, so an existing instance follows).
- `idle`/`busy`: a healthcheck every `instance_check_interval`. An SSH host whose agent
  reports another build than the agent this server deploys (`deps.agent_build`: the server
  was upgraded) gets the server's agent again (`deps.ssh_deployer`), one host at a time per
  server: the old agent stops, its jobs keep running and the new one re-adopts them.
  Likewise, once per server process, an SSH host whose agent was started with other job
  options than the server's (`--ssh-job-isolation`, `--ssh-default-image` …:
  `deps.ssh_refresher`, which compares them on the host) gets it replaced.
- an unreachable agent is a *transport* state, not a failure: the first failure stamps
  `unreachable_since` and the message says so; past the grace window
  (`timings.unreachable_grace`, dstack: 2 min) the message says `instance_unreachable`
  and an event is recorded once (the jobs worker fails the jobs on it with that reason).
  The local fleet's agent is restarted when its process is gone, or after
  `LOCAL_RESTART_AFTER` healthchecks in a row failed (one slow answer under load is no
  reason: replacing it mid-work costs more); the old one is stopped with SIGTERM and its
  jobs are re-adopted by the new one (checked again at once). An answer clears the state.
  The agent's jobs are compared with the store's (`agent_sync`) when the agent is new to
  this server process, restarted (its healthcheck's epoch changed), reached again, or the
  store ended jobs there without it: the store's active jobs there look for themselves at
  once, jobs the store ended are stopped there (forced) if they run, removed if finished.
- `terminating`: nothing runs there any more (the runs were stopped first); the instance
  becomes `terminated` and the fleets worker is hinted. An SSH host is also recorded to
  undo in the same transaction (`Store.end_ssh_instance`): the teardowns worker writes its
  agent's key file for the fleets still listing it, or retires it (server key only, agent
  stopped), so the members of a deleted fleet's project keep nothing there. Except an
  idle instance an active cloud fleet shrinks away: the fleets worker marks it
  `terminated` once its node is out of the fleet's stack (so a crash in between never
  forgets a paid node).

The clock is the store's (`deps.clock`), so tests move time instead of waiting.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from agent.client import AgentClient, AgentError, AgentUnreachable
from agent.deploy import DeployError
from agent.local import LocalAgentError, local_agent_alive
from reconciler.core import hostblocks
from reconciler.core.elastic import fleet_kind
from reconciler.core.hostblocks import host_sized
from reconciler.domain.inventory import CapacityRecord, InstanceRecord
from reconciler.domain.statuses import InstanceStatus
from reconciler.engine.outcomes import AGENT_RETRY_DELAY
from reconciler.engine.worker import Process, ProcessResult, WorkerConfig
from reconciler.engine.workers import WorkerDeps
from reconciler.engine.workers.agent_sync import AgentSync
from reconciler.engine.workers.growing import LEAVING_REASON

CONFIG = WorkerConfig(kind="instances", concurrency=20, lease_seconds=30.0, min_interval=7.0)
UNREACHABLE = "instance_unreachable"
READY_WAKES = 64
LOCAL_RESTART_AFTER = 3
"""Failed healthchecks in a row after which a local agent that still runs is replaced."""
"""Waiting jobs woken when an instance becomes ready or grows (each placed one wakes the next)."""


def make_process(deps: WorkerDeps) -> Process:
    return InstancesProcessor(deps).process


def resources_of(host_info: dict[str, Any]) -> dict[str, Any]:
    """Pure: the instance's resources summary from the agent's host facts."""
    gpus = host_info.get("gpus") or []
    return {
        "cpus": host_info.get("cpus"),
        "memory_mib": host_info.get("memory_mib"),
        "disk_mib": host_info.get("disk_mib"),
        "gpus": [{"name": g.get("name"), "memory_mib": g.get("memory_mib")} for g in gpus],
        "spot": False,
    }


def auto_blocks(host_info: dict[str, Any]) -> int:
    """Pure: `blocks: auto` = one block per GPU, or per CPU on a host without GPUs."""
    return max(1, len(host_info.get("gpus") or []) or int(host_info.get("cpus") or 1))


def sized_blocks(backend: str, fleet_blocks: object, host_info: object) -> int | None:
    """Pure: the instance's total blocks from its host facts (`blocks: auto`, or the local
    fleet sized by `hostblocks`); None when the fleet's `blocks` is a number to keep."""
    if not isinstance(host_info, dict):
        return None
    if fleet_blocks == "auto":
        return auto_blocks(host_info)
    if host_sized(backend, fleet_blocks):
        return hostblocks.total_blocks(host_info)
    return None


class InstancesProcessor:
    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self._upgrading = asyncio.Lock()  # one SSH host's agent replaced at a time
        self._settled: set[str] = set()  # SSH instances whose agent options were checked
        self._options_failed = ""  # the first host whose agent failed with the new options
        self._local_misses: dict[str, int] = {}  # local instance -> failed checks in a row
        # the agent's jobs beside the store's
        self._sync = AgentSync(deps.store, self._now, deps.agents.unsettled)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.deps.clock.now_ts(), UTC)

    async def process(self, instance_id: str, token: str) -> ProcessResult:
        leased = await asyncio.to_thread(self.deps.store.load_instance, instance_id, token)
        if leased is None:
            return None
        row, fleet = leased.instance, leased.fleet
        if row.status == InstanceStatus.TERMINATING.value:
            if _left_to_fleet(row, fleet):
                self.deps.hint("fleets")
                return None
            await self._terminated(row, token)
            await self._event(row, f"instance {row.name} terminated ({row.termination_reason})")
            self.deps.hint("fleets")
            return None
        client = self.deps.agents.client(row)
        try:
            health = await client.healthcheck()
            if self._outdated(row, health.build):
                return await self._upgrade(row, token, health.build)
            if self._unsettled(row):
                return await self._refresh(row, token)
            facts = None
            if row.host_info is None or row.status in ("pending", "provisioning"):
                facts = (await client.host_info()).model_dump(mode="json")
            await self._settle(row, client, health.epoch)
        except (AgentUnreachable, AgentError) as exc:
            return await self._unreachable(row, token, str(exc))
        return await self._reachable(row, fleet, token, facts)

    async def _settle(self, row: InstanceRecord, client: AgentClient, epoch: str) -> None:
        """Compare the agent's jobs with the store's (`agent_sync`) when it is new, restarted,
        reached again, or the store ended jobs there without it."""
        settled = await self._sync.settle(row, client, epoch)
        if settled.stopped:
            await self._event(
                row,
                f"instance {row.name}: stopped {settled.stopped} job(s) the server had ended "
                "while the agent was unreachable",
            )
        if settled.woken:
            self.deps.hint("jobs")

    async def _reachable(
        self,
        row: InstanceRecord,
        fleet: CapacityRecord | None,
        token: str,
        facts: dict[str, Any] | None,
    ) -> ProcessResult:
        self._local_misses.pop(row.id, None)
        values: dict[str, Any] = {}
        if row.unreachable_since is not None:
            values.update(unreachable_since=None, status_message="")
            await self._event(row, f"instance {row.name}: agent reachable again")
        if facts is not None:
            known = row.resources if isinstance(row.resources, dict) else {}
            values.update(host_info=facts, resources={**known, **resources_of(facts)})
        if facts is not None or row.backend == "local":
            fleet_blocks = fleet.spec.get("blocks") if fleet is not None else None
            total = sized_blocks(row.backend or "", fleet_blocks, facts or row.host_info)
            if total is not None and total != row.total_blocks:
                values["total_blocks"] = total
        ready = row.status in ("pending", "provisioning")
        if ready:
            values["status"] = "busy" if row.busy_blocks > 0 else InstanceStatus.IDLE.value
            await self._event(row, f"instance {row.name} ready ({values['status']})")
        if values and await self._write(row, token, **values):
            if ready or int(values.get("total_blocks") or 0) > row.total_blocks:
                # room for the jobs that wait (they sleep; each placed one wakes the next)
                blocks = min(READY_WAKES, int(values.get("total_blocks") or row.total_blocks))
                await asyncio.to_thread(self.deps.store.wake_waiting_jobs, row.project_id, blocks)
            self.deps.hint("jobs")
        return self.deps.timings.instance_check_interval

    def _outdated(self, row: InstanceRecord, build: str) -> bool:
        return bool(
            row.backend == "ssh"
            and self.deps.agent_build
            and self.deps.ssh_deployer is not None
            and build != self.deps.agent_build
            and row.status not in ("pending", "provisioning")
        )

    def _unsettled(self, row: InstanceRecord) -> bool:
        return bool(
            row.backend == "ssh"
            and self.deps.ssh_refresher is not None
            and row.id not in self._settled
            and row.status not in ("pending", "provisioning")
        )

    async def _refresh(self, row: InstanceRecord, token: str) -> ProcessResult:
        """The host's agent runs with the server's SSH agent options, else it is replaced
        (its jobs survive and are re-adopted); checked once per server process."""
        assert self.deps.ssh_refresher is not None
        target = self.deps.agents.address(row).target
        async with self._upgrading:
            if self._options_failed:  # the rollout stops at the first failed host
                self._settled.add(row.id)
                message = f"agent options not applied: they failed on {self._options_failed}"
                await self._event(row, f"instance {row.name}: {message}")
                return 0.0
            try:
                replaced = await self.deps.ssh_refresher(target)
            except DeployError as exc:
                self._options_failed = f"instance {row.name}"
                message = f"agent options not applied: {exc}"
                await self._event(row, f"instance {row.name}: {message}")
                await self._write(row, token, status_message=message)
                return self.deps.timings.instance_check_interval
        self._settled.add(row.id)
        if (row.status_message or "").startswith("agent options not applied"):
            await self._write(row, token, status_message="")
        if replaced:
            await self._event(
                row, f"instance {row.name}: agent replaced (started with the server's options)"
            )
        return 0.0

    async def _upgrade(self, row: InstanceRecord, token: str, build: str) -> ProcessResult:
        """Deploy this server's agent to the host (its jobs survive and are re-adopted)."""
        assert self.deps.ssh_deployer is not None
        target = self.deps.agents.address(row).target
        async with self._upgrading:
            try:
                await self.deps.ssh_deployer(target)
            except DeployError as exc:
                await self._write(row, token, status_message=f"agent upgrade failed: {exc}")
                await self._event(row, f"instance {row.name}: agent upgrade failed: {exc}")
                return self.deps.timings.instance_check_interval
        self._settled.add(row.id)  # deployed with the server's options too
        old = build or "unknown"
        await self._event(
            row, f"instance {row.name}: agent replaced (build {old} -> {self.deps.agent_build})"
        )
        return 0.0

    async def _unreachable(self, row: InstanceRecord, token: str, detail: str) -> ProcessResult:
        if row.backend in ("slurm", "kubernetes") and self.deps.cluster_ended is not None:
            ended = await self.deps.cluster_ended(row.resources)
            if ended is not None:  # the cluster ended the allocation: so do its jobs
                reason, message = ended
                store = self.deps.store
                await asyncio.to_thread(store.end_cluster_instance, row.id, reason, message)
                await self._event(row, f"instance {row.name} terminated: {message}")
                self.deps.hint("runs")
                self.deps.hint("fleets")
                return None
        now = self._now()
        since = row.unreachable_since or now
        waited = (now - since).total_seconds()
        grace = self.deps.timings.unreachable_grace
        if waited >= grace:
            message = f"{UNREACHABLE}: agent unreachable for {waited:.0f}s: {detail}"
            if not (row.status_message or "").startswith(UNREACHABLE):
                await self._event(row, f"instance {row.name}: {message}")
        else:
            message = f"agent unreachable since {since.isoformat()} (grace {grace:.0f}s): {detail}"
        await self._write(row, token, unreachable_since=since, status_message=message)
        if row.unreachable_since is None:
            await self._event(row, f"instance {row.name}: agent unreachable: {detail}")
        if row.backend == "local" and await self._restart_local(row, token):
            return 0.0  # the new agent is compared with the store now (`agent_sync`)
        return min(AGENT_RETRY_DELAY, max(0.5, grace - waited) if waited < grace else 5.0)

    async def _restart_local(self, row: InstanceRecord, token: str) -> bool:
        """The local agent died (or moved), or failed `LOCAL_RESTART_AFTER` checks in a
        row: start it again (`ensure_local_agent` keeps one that answers now) and re-point
        the instance. A slow agent whose process runs is given more checks first. True if an
        agent answers now."""
        if self.deps.local_agent is None:
            return False
        misses = self._local_misses[row.id] = self._local_misses.get(row.id, 0) + 1
        alive = await asyncio.to_thread(local_agent_alive, self.deps.data_dir)
        if alive and misses < LOCAL_RESTART_AFTER:
            return False
        self._local_misses.pop(row.id, None)
        # the new agent mostly takes the old one's ports: its predecessor's failures must not
        # hold back the connections to it (the tunnel pool's back-off)
        self.deps.agents.pool.retry_now(self.deps.agents.address(row).target)
        try:
            local = await self.deps.local_agent()
        except LocalAgentError as exc:
            await self._write(row, token, status_message=f"local agent restart failed: {exc}")
            return False
        where = (local.hostname, local.ssh_port, local.ssh_user, local.agent_port)
        if (row.hostname, row.ssh_port, row.ssh_user, row.agent_port) != where:
            hostname, ssh_port, ssh_user, agent_port = where
            await self._write(
                row,
                token,
                hostname=hostname,
                ssh_port=ssh_port,
                ssh_user=ssh_user,
                agent_port=agent_port,
            )
        return True

    async def _terminated(self, row: InstanceRecord, token: str) -> None:
        """Mark it `terminated`; an SSH host also gets undone (`workers.teardowns`: its
        agent's key file follows the fleets still listing it, or the host is retired)."""
        if row.backend != "ssh":
            await self._write(row, token, status=InstanceStatus.TERMINATED.value)
            return
        if await asyncio.to_thread(self.deps.store.end_ssh_instance, row.id, token):
            self.deps.hint("teardowns")

    async def _write(self, row: InstanceRecord, token: str, **values: Any) -> bool:
        return bool(await asyncio.to_thread(self.deps.store.write_instance, row.id, token, values))

    async def _event(self, row: InstanceRecord, message: str) -> None:
        await asyncio.to_thread(
            self.deps.store.append_event,
            project_id=row.project_id,
            target_type="instance",
            target_id=row.id,
            target_name=row.name,
            message=message,
        )


def _left_to_fleet(row: InstanceRecord, fleet: CapacityRecord | None) -> bool:
    """A cloud fleet shrinking: its worker ends the instance after the stack's `up`."""
    if row.termination_reason != LEAVING_REASON or row.fleet_id is None:
        return False
    return fleet is not None and fleet.status == "active" and fleet_kind(fleet.spec) == "cloud"
