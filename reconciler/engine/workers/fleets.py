"""The fleets worker: a fleet's stack, its instances, and its agents.

- `submitted` (new or changed spec): the fleet's stack goes up through its engine
  (`stacking`); then each host gets its agent and an `instances` row:
  - the local fleet (no `ssh_config`, no cloud backend) is this host: the local agent is
    started on first use (`deps.local_agent`) and the one instance points at it;
  - an SSH fleet deploys the agent to each host over SSH (`deps.ssh_deployer`); hosts
    removed from `ssh_config` have their instances terminated;
  - a cloud fleet's instances come from the engine's outputs (cloud-init installs the
    agent); without Pulumi the fleet is blocked with the engine's message.
  The fleet becomes `active` and the instances worker takes over their health.
- `active`: `nodes: 0..N` fleets shrink: idle instances above `nodes.min` that have been
  idle longer than `idle_duration` are terminated (growth happens when the jobs worker
  finds no capacity and asks for a node).
- `terminating`: instances are terminated first, then the stack is destroyed and the
  inventory row dropped (see `stacking`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.client import AgentUnreachable
from agent.deploy import DeployError
from agent.local import LocalAgentError
from agent.tunnel import SSHTarget
from reconciler.adapters.db.models import Fleet, Instance
from reconciler.domain.statuses import InstanceStatus
from reconciler.engine.outcomes import Outcome, Verdict, outcome_of
from reconciler.engine.worker import Process, ProcessResult, WorkerConfig
from reconciler.engine.workers import WorkerDeps
from reconciler.engine.workers.stacking import StackRows
from stacks.protocol import StackOutputs

CONFIG = WorkerConfig(kind="fleets", concurrency=10, lease_seconds=60.0, min_interval=15.0)
LOCAL_BLOCKS = 16
"""Jobs the local host runs at once when the fleet does not set `blocks` (shared host)."""
_AGENT_ERRORS = (AgentUnreachable, DeployError, LocalAgentError)
_LIVE = [s.value for s in InstanceStatus if s is not InstanceStatus.TERMINATED]


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
        self.rows = StackRows(deps, Fleet, "fleet")

    async def process(self, fleet_id: str, token: str) -> ProcessResult:
        row = await self.rows.load(fleet_id, token)
        if not isinstance(row, Fleet):
            return None
        if row.status == "terminating":
            return await self._terminate(row, token)
        if row.status == "submitted":
            return await self._provision(row, token)
        if row.status == "active":
            return await self._maintain(row)
        return None

    async def _provision(self, fleet: Fleet, token: str) -> ProcessResult:
        outputs = await self.rows.up(fleet, token)
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

    async def _hosts(self, fleet: Fleet, outputs: StackOutputs) -> list[Host]:
        spec = dict(fleet.spec or {})
        entries = [e for e in outputs.get("instances") or [] if isinstance(e, Mapping)]
        if spec.get("ssh_config") is not None:
            return [await self._deploy(entry) for entry in entries]
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

    async def _deploy(self, entry: Mapping[str, Any]) -> Host:
        if self.deps.ssh_deployer is None:
            raise LocalAgentError("this server cannot deploy agents to SSH hosts")
        target = SSHTarget(
            hostname=str(entry["hostname"]),
            port=int(entry.get("port") or 22),
            user=str(entry.get("user") or "root"),
            identity_file=entry.get("identity_file"),
        )
        agent_port = await self.deps.ssh_deployer(target)
        return Host(
            str(entry["name"]),
            target.hostname,
            target.port,
            target.user,
            agent_port,
            "ssh",
            target.identity_file,
        )

    async def _maintain(self, fleet: Fleet) -> ProcessResult:
        victims = await asyncio.to_thread(idle_victims, self.deps, fleet)
        if victims:
            await asyncio.to_thread(terminate_instances, self.deps, victims, "idle_timeout")
            self.deps.hint("instances")
        return self.deps.timings.fleet_check_interval

    async def _terminate(self, fleet: Fleet, token: str) -> ProcessResult:
        live = await asyncio.to_thread(
            self.deps.store.list_instances, fleet_id=fleet.id, statuses=_LIVE
        )
        if live:
            await asyncio.to_thread(terminate_instances, self.deps, live, "terminated_by_user")
            self.deps.hint("instances")
            return 1.0
        failed = await self.rows.destroy(fleet, token)
        return failed.retry_after if failed is not None else None


def _cloud_host(entry: Mapping[str, Any]) -> Host:
    return Host(
        str(entry["name"]),
        str(entry.get("hostname") or entry.get("public_ip") or ""),
        int(entry.get("port") or 22),
        str(entry.get("user") or "ubuntu"),
        int(entry.get("agent_port") or 10998),
        str(entry.get("backend") or "cloud"),
    )


def sync_instances(deps: WorkerDeps, fleet: Fleet, hosts: Sequence[Host]) -> int:
    """Upsert one instance per host (by name); terminate those no longer listed.

    Returns how many rows were added or re-pointed (the instances worker is hinted then).
    """
    now = deps.store.now()
    changed = 0
    with deps.store.writing() as session:
        existing = {
            i.name: i
            for i in session.query(Instance).filter(
                Instance.fleet_id == fleet.id, Instance.status.in_(_LIVE)
            )
        }
        for num, host in enumerate(hosts):
            row = existing.pop(host.name, None)
            where = (host.hostname, host.ssh_port, host.ssh_user, host.agent_port)
            if row is not None:
                if (row.hostname, row.ssh_port, row.ssh_user, row.agent_port) != where:
                    row.hostname, row.ssh_port, row.ssh_user, row.agent_port = where
                    row.due_at, changed = None, changed + 1
                continue
            session.add(
                Instance(
                    fleet_id=fleet.id,
                    project_id=fleet.project_id,
                    name=host.name,
                    instance_num=num,
                    status=InstanceStatus.PENDING.value,
                    created_at=now,
                    hostname=host.hostname,
                    ssh_port=host.ssh_port,
                    ssh_user=host.ssh_user,
                    agent_port=host.agent_port,
                    backend=host.backend,
                    total_blocks=blocks_of(fleet.spec or {}, host.backend),
                    resources={"identity_file": host.identity_file} if host.identity_file else None,
                )
            )
            changed += 1
        for gone in existing.values():
            gone.status, gone.termination_reason, gone.due_at = (
                "terminating",
                "terminated_by_user",
                None,
            )
            changed += 1
    return changed


def idle_victims(deps: WorkerDeps, fleet: Fleet) -> list[Instance]:
    """Idle instances above `nodes.min` idle longer than the fleet's `idle_duration`."""
    spec = dict(fleet.spec or {})
    nodes = spec.get("nodes") or {}
    minimum = int(nodes.get("min") or 0) if isinstance(nodes, Mapping) else 0
    idle_for = spec.get("idle_duration")
    idle_for = 3 * 86400 if idle_for is None else int(idle_for)
    if idle_for < 0 or spec.get("ssh_config") is not None:
        return []
    live = deps.store.list_instances(fleet_id=fleet.id, statuses=_LIVE)
    surplus = len(live) - minimum
    now = deps.store.now()
    victims: list[Instance] = []
    for instance in sorted(live, key=lambda i: -i.instance_num):
        if len(victims) >= surplus:
            break
        since = instance.last_job_processed_at or instance.created_at
        if instance.status == "idle" and (now - since).total_seconds() >= idle_for:
            victims.append(instance)
    return victims


def terminate_instances(deps: WorkerDeps, instances: Sequence[Instance], reason: str) -> None:
    """Mark instances `terminating` (compare-and-set on their status; busy ones wait)."""
    with deps.store.writing() as session:
        for instance in instances:
            row = session.get(Instance, instance.id)
            if row is None or row.status in ("terminating", "terminated", "busy"):
                continue
            row.status, row.termination_reason, row.due_at = "terminating", reason, None
