"""The fleets worker: a fleet's stack, its instances, and its agents.

- `submitted` (new or changed spec): the fleet's stack goes up through its engine
  (`stacking`); then each host gets its agent and an `instances` row:
  - the local fleet (no `ssh_config`, no cloud backend) is this host: the local agent is
    started on first use (`deps.local_agent`) and the one instance points at it;
  - an SSH fleet deploys the agent to each host over SSH (`deps.ssh_deployer`), through
    the host's `proxy_jump` if it has one (hosts read by `schemas.sshhosts`; the jump is
    recorded on the instance, so its agent is tunnelled to the same way), with the
    key file of its SSH server for users (`deps.ssh_keys`: dstack's attach); hosts
    removed from `ssh_config` have their instances terminated;
  - a cloud fleet's instances come from the engine's outputs (cloud-init installs the
    agent); without Pulumi the fleet is blocked with the engine's message. Its stack is
    brought up with `nodes.target`, or with the nodes it grew to if it has more.
  The fleet becomes `active` and the instances worker takes over their health.
- `active`: an SSH fleet's hosts get their agents' key files again when who may reach the
  fleet's jobs changed (`deps.ssh_keys`, compared with what was written last).
  `nodes: min..max` cloud fleets are elastic (`reconciler.core.elastic`):
  - *grow*: jobs no instance can take wait for the fleet and record how many nodes they
    need (`growing`); the target is `min(max, live + needed - spare)` from stored state
    only, and the stack is brought up with `StackResource.nodes = target` — a retry after
    a crash computes the same target, and `up` with the same count changes nothing;
  - *shrink*, only while no job waits for the fleet: idle instances above `nodes.min`
    idle longer than `idle_duration` are terminated. On a cloud fleet only the top run
    of idle instances goes (the stack indexes instances and drops the highest numbers);
    they stay `terminating` until the stack is brought up with the remaining count, then
    this worker marks them `terminated` (the instances worker leaves them alone).
  The local fleet (one host) and SSH fleets (listed hosts) never grow.
- `terminating`: instances are terminated first, then the stack is destroyed and the
  inventory row dropped (see `stacking`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.client import AgentUnreachable
from agent.deploy import DeployError
from agent.local import LocalAgentError
from agent.ssh.hosts import to_target
from reconciler.adapters.db.capacity import HostRecord
from reconciler.core.elastic import (
    IdleView,
    fleet_kind,
    grow_target,
    node_bounds,
    pick_victims,
    provision_nodes,
    stack_nodes,
)
from reconciler.domain.inventory import CapacityRecord, InstanceRecord
from reconciler.domain.statuses import InstanceStatus
from reconciler.engine.outcomes import Outcome, Verdict, outcome_of
from reconciler.engine.worker import Process, ProcessResult, WorkerConfig
from reconciler.engine.workers import WorkerDeps
from reconciler.engine.workers.growing import LEAVING_REASON, FleetState, fleet_state
from reconciler.engine.workers.stacking import StackRows
from schemas.sshhosts import FleetHost, JumpHost, spec_fleet_hosts
from stacks.protocol import StackOutputs

log = logging.getLogger(__name__)

CONFIG = WorkerConfig(kind="fleets", concurrency=10, lease_seconds=60.0, min_interval=15.0)
LOCAL_BLOCKS = 16
"""Jobs the local host runs at once when the fleet does not set `blocks` (shared host)."""
_AGENT_ERRORS = (AgentUnreachable, DeployError, LocalAgentError)
_LIVE = [s.value for s in InstanceStatus if s is not InstanceStatus.TERMINATED]
_TERMINABLE = ("pending", "provisioning", "idle")


@dataclass(frozen=True, slots=True)
class Host:
    """One instance of a fleet as provisioned: where its agent listens."""

    name: str
    hostname: str
    ssh_port: int
    ssh_user: str
    agent_port: int
    backend: str
    identity_file: str | None = None
    proxy_jump: JumpHost | None = None
    slurm: dict[str, Any] | None = None  # the Slurm allocation the instance runs in
    kubernetes: dict[str, Any] | None = None  # the pod the instance is


def make_process(deps: WorkerDeps) -> Process:
    return FleetsProcessor(deps).process


def blocks_of(spec: Mapping[str, Any], backend: str) -> int:
    """Pure: the instance's total blocks (`auto` is resolved from host facts later)."""
    blocks = spec.get("blocks", 1)
    if not isinstance(blocks, int):
        return 1
    if backend == "local" and blocks == 1:
        return LOCAL_BLOCKS
    return max(1, blocks)


class FleetsProcessor:
    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self.rows = StackRows(deps, "fleet")

    async def process(self, fleet_id: str, token: str) -> ProcessResult:
        row = await self.rows.load(fleet_id, token)
        if row is None:
            return None
        if row.status == "terminating":
            return await self._terminate(row, token)
        if row.status == "submitted":
            return await self._provision(row, token)
        if row.status == "active":
            return await self._maintain(row, token)
        return None

    async def _provision(self, fleet: CapacityRecord, token: str) -> ProcessResult:
        nodes = None
        if fleet_kind(fleet.spec or {}) == "cloud":
            state = await asyncio.to_thread(fleet_state, self.deps.store, fleet)
            nodes = provision_nodes(fleet.spec or {}, (i.instance_num for i in state.staying))
        outputs = await self.rows.up(fleet, token, nodes=nodes)
        if isinstance(outputs, Outcome):
            return outputs.retry_after
        try:
            hosts = await self._hosts(fleet, outputs)
        except _AGENT_ERRORS as exc:
            outcome = outcome_of(exc) or Outcome(Verdict.RETRY, str(exc), retry_after=30.0)
            return (await self.rows.record_failure(fleet, token, outcome)).retry_after
        added = await asyncio.to_thread(sync_instances, self.deps, fleet, hosts)
        if await self.rows.write(fleet, token, status="active", status_message=""):
            await self.rows.event(fleet, f"fleet {fleet.name} active with {len(hosts)} instance(s)")
            await self.rows.set_resource(fleet, "active")
        if added:
            self.deps.hint("instances")
        return self.deps.timings.fleet_check_interval

    async def _hosts(self, fleet: CapacityRecord, outputs: StackOutputs) -> list[Host]:
        spec = dict(fleet.spec or {})
        entries = [e for e in outputs.get("instances") or [] if isinstance(e, Mapping)]
        ssh_hosts = spec_fleet_hosts(spec)
        if ssh_hosts is not None:  # the stack lists them in the same order, with their names
            names = [str(entry["name"]) for entry in entries]
            return [
                await self._deploy(fleet.id, name, host)
                for name, host in zip(names, ssh_hosts, strict=True)
            ]
        if spec.get("backends"):
            return [_cloud_host(entry) for entry in entries]
        if self.deps.local_agent is None:
            raise LocalAgentError("this server runs no local fleet (no local agent starter)")
        local = await self.deps.local_agent()
        return [
            Host(
                f"{fleet.name}-0",
                local.hostname,
                local.ssh_port,
                local.ssh_user,
                local.agent_port,
                "local",
            )
        ]

    async def _deploy(self, fleet_id: str, name: str, host: FleetHost) -> Host:
        if self.deps.ssh_deployer is None:
            raise LocalAgentError("this server cannot deploy agents to SSH hosts")
        # through its jump host, if it has one; with the key the instance is reached with later
        target = to_target(host, default_key=self.deps.agents.default_key)
        agent_port = await self.deps.ssh_deployer(target)
        if self.deps.ssh_keys is not None:  # who may attach to this fleet's jobs
            await self.deps.ssh_keys(fleet_id, target, force=True)
        return Host(
            name,
            target.hostname,
            target.port,
            target.user,
            agent_port,
            "ssh",
            target.identity_file,
            host.proxy_jump,
        )

    async def _maintain(self, fleet: CapacityRecord, token: str) -> ProcessResult:
        spec = dict(fleet.spec or {})
        cloud = fleet_kind(spec) == "cloud"
        state = await asyncio.to_thread(fleet_state, self.deps.store, fleet)
        if cloud and state.leaving:  # a shrink not finished (crash, failed `up`): finish it
            return await self._shrink_stack(fleet, token, state)
        target = grow_target(state.live, state.spare, state.demand, node_bounds(spec)[1])
        if cloud and target > state.live:
            return await self._grow(fleet, token, state, target)
        if spec.get("ssh_config") is not None:
            await self._follow_keys(fleet)
        victims = [] if state.demand else await asyncio.to_thread(idle_victims, self.deps, fleet)
        if victims:
            await asyncio.to_thread(terminate_instances, self.deps, victims, LEAVING_REASON)
            if cloud:
                state = await asyncio.to_thread(fleet_state, self.deps.store, fleet)
                return await self._shrink_stack(fleet, token, state)
            self.deps.hint("instances")
        return self.deps.timings.fleet_check_interval

    async def _follow_keys(self, fleet: CapacityRecord) -> None:
        """Each pass: the hosts' key files follow who may reach the fleet's jobs (written
        only when they changed; a host not reachable now is tried again next pass)."""
        if self.deps.ssh_keys is None:
            return
        live = await asyncio.to_thread(
            self.deps.store.instance_records, fleet_id=fleet.id, statuses=_LIVE
        )
        for instance in live:
            target = self.deps.agents.address(instance).target
            try:
                await self.deps.ssh_keys(fleet.id, target, force=False)
            except (*_AGENT_ERRORS, OSError, ValueError) as exc:  # unreachable, bad key file
                log.warning("keys of instance %s not written: %s", instance.name, exc)

    async def _grow(
        self, fleet: CapacityRecord, token: str, state: FleetState, target: int
    ) -> ProcessResult:
        """Bring the stack up with `target` nodes and record the new instances."""
        nodes = max(target, stack_nodes(i.instance_num for i in state.staying))
        outputs = await self.rows.up(fleet, token, nodes=nodes)
        if isinstance(outputs, Outcome):
            return outputs.retry_after
        hosts = [_cloud_host(e) for e in outputs.get("instances") or [] if isinstance(e, Mapping)]
        added = await asyncio.to_thread(sync_instances, self.deps, fleet, hosts)
        if added:
            runs = ", ".join(state.run_names) or "waiting jobs"
            await self.rows.event(
                fleet, f"fleet {fleet.name}: growing {state.live} → {target} nodes for run {runs}"
            )
            self.deps.hint("instances")
            self.deps.hint("jobs")
        if fleet.status_message:
            await self.rows.write(fleet, token, status_message="")
        return self.deps.timings.fleet_check_interval

    async def _shrink_stack(
        self, fleet: CapacityRecord, token: str, state: FleetState
    ) -> ProcessResult:
        """Bring a cloud stack down to the instances that stay, then mark the leaving
        ones terminated (only now: until then a retry knows the stack still holds them)."""
        staying = [i.instance_num for i in state.staying]
        count = stack_nodes(staying)
        kept = [i for i in state.leaving if i.instance_num < count]
        if kept:  # below an instance that stays (it got busy meanwhile): the node stays too
            await asyncio.to_thread(keep_leaving, self.deps, kept)
        outputs = await self.rows.up(fleet, token, nodes=count)
        if isinstance(outputs, Outcome):
            return outputs.retry_after
        leaving = [i for i in state.leaving if i.instance_num >= count]
        gone = await asyncio.to_thread(finish_leaving, self.deps, leaving)
        if gone:
            before = len(staying) + len(gone)
            await self.rows.event(
                fleet,
                f"fleet {fleet.name}: shrinking {before} → {len(staying)} nodes "
                f"(idle {', '.join(i.name for i in gone)})",
            )
        return self.deps.timings.fleet_check_interval

    async def _terminate(self, fleet: CapacityRecord, token: str) -> ProcessResult:
        live = await asyncio.to_thread(
            self.deps.store.instance_records, fleet_id=fleet.id, statuses=_LIVE
        )
        if live:
            await asyncio.to_thread(terminate_instances, self.deps, live, "terminated_by_user")
            self.deps.hint("instances")
            return 1.0
        failed = await self.rows.destroy(fleet, token)
        return failed.retry_after if failed is not None else None


def _cloud_host(entry: Mapping[str, Any]) -> Host:
    slurm = entry.get("slurm")  # a Slurm allocation: reached through the login node
    pod = entry.get("kubernetes")  # a Kubernetes pod (`engine.kubeengine`)
    return Host(
        str(entry["name"]),
        str(entry.get("hostname") or entry.get("public_ip") or ""),
        int(entry.get("port") or 22),
        str(entry.get("user") or "ubuntu"),
        int(entry.get("agent_port") or 10998),
        str(entry.get("backend") or "cloud"),
        str(entry["identity_file"]) if entry.get("identity_file") else None,
        JumpHost.from_record(entry.get("proxy_jump")),
        dict(slurm) if isinstance(slurm, Mapping) else None,
        dict(pod) if isinstance(pod, Mapping) else None,
    )


def sync_instances(deps: WorkerDeps, fleet: CapacityRecord, hosts: Sequence[Host]) -> int:
    """Upsert one instance per host (by name); terminate those no longer listed.

    Returns how many rows were added or re-pointed (the instances worker is hinted then).
    """
    records = [
        HostRecord(
            name=host.name,
            hostname=host.hostname,
            ssh_port=host.ssh_port,
            ssh_user=host.ssh_user,
            agent_port=host.agent_port,
            backend=host.backend,
            total_blocks=blocks_of(fleet.spec or {}, host.backend),
            identity_file=host.identity_file,
            proxy_jump=host.proxy_jump,
            slurm=host.slurm,
            kubernetes=host.kubernetes,
        )
        for host in hosts
    ]
    return deps.store.sync_fleet_instances(fleet.id, fleet.project_id, records)


def idle_victims(deps: WorkerDeps, fleet: CapacityRecord) -> list[InstanceRecord]:
    """Idle instances above `nodes.min` idle longer than the fleet's `idle_duration`
    (`elastic.pick_victims`; on a cloud fleet only the top run of idle instances)."""
    spec = dict(fleet.spec or {})
    idle_for = spec.get("idle_duration")
    idle_for = 3 * 86400 if idle_for is None else int(idle_for)
    if idle_for < 0 or spec.get("ssh_config") is not None:
        return []
    live = [
        i
        for i in deps.store.instance_records(fleet_id=fleet.id, statuses=_LIVE)
        if i.status != InstanceStatus.TERMINATING.value
    ]
    now = deps.store.now()
    views = [
        IdleView(
            i.id,
            i.instance_num,
            (now - (i.last_job_processed_at or i.created_at)).total_seconds()
            if i.status == InstanceStatus.IDLE.value
            else None,
        )
        for i in live
    ]
    chosen = set(
        pick_victims(views, node_bounds(spec)[0], idle_for, from_top=fleet_kind(spec) == "cloud")
    )
    return [i for i in live if i.id in chosen]


def keep_leaving(deps: WorkerDeps, instances: Sequence[InstanceRecord]) -> None:
    """Take back the termination of instances the stack keeps (compare-and-set)."""
    deps.store.keep_leaving_instances((i.id for i in instances), LEAVING_REASON)


def finish_leaving(deps: WorkerDeps, leaving: Sequence[InstanceRecord]) -> list[InstanceRecord]:
    """Mark instances whose node left the stack `terminated` (compare-and-set on
    `terminating`); the ones this call changed, each with an event."""
    done = deps.store.finish_leaving_instances(i.id for i in leaving)
    return [i for i in leaving if i.id in done]


def terminate_instances(deps: WorkerDeps, instances: Sequence[InstanceRecord], reason: str) -> None:
    """Mark instances `terminating`: one conditional UPDATE per instance, so one a job
    took meanwhile (`Store.record_job_step` sets it busy) is never taken away; busy ones
    wait."""
    deps.store.terminate_instances((i.id for i in instances), reason, from_statuses=_TERMINABLE)
