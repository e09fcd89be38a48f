"""The Slurm engine: a `backends: [slurm]` fleet is one `sbatch` allocation per node.

An `Engine` (`stacks.protocol`) built by `build_controller` when the server's backends
file has a Slurm backend; the fleets worker brings a fleet up through it as through any
engine, and the previewer asks it what a plan would allocate. Everything happens on the
cluster's login node, over the server's pooled SSH connection to it
(`reconciler.engine.slurmjobs.LoginNode`: sbatch, squeue, scancel):

- `up`: the agent's bundle is put in `~/.dockyard/slurm` on the login node (the home
  directory is shared with the compute nodes, as on HPC clusters; `agent.deploy.
  install_bundle`); each missing node is an `sbatch` of `core.slurm_alloc.batch_script`
  (options: `sbatch_options` of the partition `choose_offer` picks from the clusters'
  offers) with the server's public key as the agent SSH server's key file; then it waits
  until every allocation runs and its agent wrote the `endpoint` file. The outputs list one
  instance per allocation: the compute node's address (`NodeAddr`) and the agent's SSH
  port, reached through the login node as jump host, and the allocation (`slurm`: cluster,
  job id, partition, node) that the instance keeps in the store. An allocation still
  queued past `wait_s` is `StackBusy` (the fleet retries; its submitted jobs are kept).
- `destroy`: `scancel` of every allocation of the fleet.
- `job_ended(instance)`: the termination reason of an instance whose allocation Slurm
  ended (the instances worker asks when the agent stops answering).

The allocations are also recorded in `<data-dir>/stacks/slurm/<stack>.json` (written
right after each `sbatch`), so a retried `up` keeps those that still run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import asyncssh

from agent.bundle import Bundle
from agent.deploy import AgentOptions, DeployError, install_bundle
from agent.tunnel import SSHTarget, TunnelPool
from reconciler.adapters.slurm_login import SlurmUnavailable, read_project_clusters
from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.slurm_alloc import (
    Wanted,
    batch_script,
    choose_offer,
    ended_reason,
    sbatch_options,
)
from reconciler.core.slurm_nodes import ClusterOffer
from reconciler.domain.statuses import JobTerminationReason
from reconciler.engine.agentsetup import AgentSetup
from reconciler.engine.slurmjobs import LoginNode
from schemas.serverbackends import PrivateKey, SlurmBackend, SlurmCluster
from stacks.catalog import requirements_from_spec
from stacks.programs.config import node_count
from stacks.protocol import (
    Availability,
    EngineName,
    StackBusy,
    StackFailed,
    StackOutputs,
    StackPlan,
    StackResource,
    StackStep,
    StackUnavailable,
    StackUnsupported,
    StepOp,
)

REMOTE_DIR = ".dockyard/slurm"  # default: beside the SSH hosts' `.dockyard/agent`
AGENT_USER = "dockyard"  # the agent's SSH server takes any user name; the key decides
Allocation = dict[str, Any]  # index, cluster, job_id, partition, options, job_dir


class SlurmEngine:
    """The `Engine` of `backends: [slurm]` fleets (see the module docstring)."""

    name: EngineName = "slurm"

    def __init__(
        self,
        clusters: ServerBackends,
        pool: TunnelPool,
        data_dir: Path,
        key: Path,
        bundle: Callable[[], Awaitable[Bundle]],
        options: AgentOptions,
        *,
        remote_dir: str = REMOTE_DIR,
        wait_s: float = 60.0,
        limit_s: float = 30.0,
    ) -> None:
        self._clusters = clusters
        self._pool = pool
        self._data_dir = data_dir
        self._key = key
        self._bundle = bundle
        self._options = options
        self._wait_s = wait_s
        self._remote_dir = remote_dir.removeprefix("~/")  # the bundle; allocations in jobs/
        self._limit_s = limit_s
        self._locks: dict[str, asyncio.Lock] = {}

    def available(self) -> Availability:
        return Availability(True)

    # -- the cluster ----------------------------------------------------------------------

    def _cluster(self, project: str, name: str | None = None) -> SlurmCluster:
        for backend in self._clusters.config.backends_of(project):
            if isinstance(backend, SlurmBackend):
                for cluster in backend.clusters:
                    if name is None or cluster.name == name:
                        return cluster
        reason = self._clusters.block_reason(project, ["slurm"])
        if name is not None:
            reason = f"Slurm cluster `{name}` is no longer in {self._clusters.path}"
        raise StackUnavailable(reason or "no Slurm cluster for this project")

    def _key_file(self, key: PrivateKey) -> str:
        if key.path is not None:
            return os.path.expanduser(key.path)
        assert key.content is not None  # an inline key: written for the SSH pool, 0600
        digest = hashlib.sha256(key.content.encode()).hexdigest()[:16]
        path = self._data_dir / "slurm" / "keys" / digest
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(0o600)
            path.write_text(key.content if key.content.endswith("\n") else key.content + "\n")
        return str(path)

    def login(self, cluster: SlurmCluster) -> SSHTarget:
        """The login node as the SSH pool reaches it."""
        if cluster.proxy_jump is not None:
            raise StackUnsupported(
                f"Slurm cluster `{cluster.name}`: allocating through a proxy_jump to the login "
                "node is not supported yet (reading offers is)"
            )
        return SSHTarget(
            cluster.hostname,
            cluster.port,
            user=cluster.user,
            identity_file=self._key_file(cluster.private_key),
        )

    def node(self, project: str, cluster: str) -> LoginNode:
        """The login node of the project's cluster named `cluster`."""
        return LoginNode(self._pool, self.login(self._cluster(project, cluster)), self._limit_s)

    async def _choose(self, resource: StackResource) -> tuple[ClusterOffer, tuple[str, ...]]:
        """The partition one node comes from and its sbatch options; StackUnavailable
        with the login node's error when no cluster could be read."""
        req = requirements_from_spec(resource.spec)
        wanted = Wanted(req.gpu_names, req.gpu_count, req.cpus, req.memory_gib)
        offers, errors = await read_project_clusters(self._clusters, resource.project)
        if req.regions:
            offers = tuple(o for o in offers if o.cluster.lower() in req.regions)
        offer = choose_offer(offers, wanted)
        if offer is None:
            if errors:
                raise StackUnavailable("; ".join(errors))
            raise StackUnavailable(
                f"{resource.label}: no partition of the project's Slurm clusters has nodes "
                f"with the fleet's resources (gpu {req.gpu_count} {'/'.join(req.gpu_names)}, "
                f"cpu {req.cpus}, memory {req.memory_gib}GB)"
            )
        return offer, sbatch_options(offer, wanted)

    # -- state --------------------------------------------------------------------------------

    def _state_file(self, resource: StackResource) -> Path:
        return self._data_dir / "stacks" / "slurm" / f"{resource.stack_name}.json"

    def _load(self, resource: StackResource) -> list[Allocation]:
        path = self._state_file(resource)
        if not path.exists():
            return []
        found: list[Allocation] = json.loads(path.read_text("utf-8"))["allocations"]
        return found

    def _save(self, resource: StackResource, allocations: Sequence[Allocation]) -> None:
        path = self._state_file(resource)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"allocations": list(allocations)}, indent=2), "utf-8")
        os.replace(tmp, path)

    async def _submit(
        self,
        resource: StackResource,
        node: LoginNode,
        index: int,
        python: str,
        chosen: tuple[ClusterOffer, tuple[str, ...]],
    ) -> Allocation:
        offer, options = chosen
        job_dir = f"{self._remote_dir}/jobs/{resource.stack_name}-{index}-{secrets.token_hex(4)}"
        key_line = asyncssh.read_private_key(str(self._key)).export_public_key().decode().strip()
        script = batch_script(job_dir, self._remote_dir, python, self._options.args())
        name = f"dockyard-{resource.stack_name}-{index}"
        job_id = await node.submit(job_dir, key_line, script, name, options)
        return {
            "index": index,
            "cluster": offer.cluster,
            "job_id": job_id,
            "partition": offer.partition,
            "options": list(options),
            "job_dir": job_dir,
        }

    # -- the engine ---------------------------------------------------------------------------

    async def preview(self, resource: StackResource) -> StackPlan:
        try:
            offer, options = await self._choose(resource)
        except ValueError as exc:
            raise StackFailed(f"{resource.label}: {exc}") from None
        recorded = {int(a["index"]) for a in self._load(resource)}
        where = f"{offer.cluster}/{offer.partition}"
        count = node_count(resource.spec, resource.nodes)
        steps = [
            StackStep(
                StepOp.SAME if i in recorded else StepOp.CREATE,
                f"allocation/{resource.name}-{i}",
                "slurm:sbatch",
                (where, *options),
            )
            for i in range(count)
        ]  # and those `up` cancels: a lower `nodes` gives back the highest indexes
        steps += [
            StackStep(StepOp.DELETE, f"allocation/{resource.name}-{i}", "slurm:scancel")
            for i in sorted(recorded)
            if i >= count
        ]
        summary = {"create": sum(1 for s in steps if s.op is StepOp.CREATE)}
        if len(steps) > count:
            summary["delete"] = len(steps) - count
        return StackPlan(resource.stack_name, tuple(steps), summary)

    async def up(self, resource: StackResource) -> StackOutputs:
        lock = self._locks.setdefault(resource.stack_name, asyncio.Lock())
        async with lock:
            return await self._up(resource)

    async def _up(self, resource: StackResource) -> StackOutputs:
        count = node_count(resource.spec, resource.nodes)
        kept: list[Allocation] = []
        for allocation in self._load(resource):  # those that still hold (or wait for) a node
            node = self.node(resource.project, allocation["cluster"])
            queued = await node.queue([allocation["job_id"]])
            alive = ended_reason(allocation["job_id"], queued.get(allocation["job_id"])) is None
            if alive and allocation["index"] < count:
                kept.append(allocation)
            elif alive:
                await node.cancel([allocation["job_id"]], [allocation["job_dir"]])
        self._save(resource, kept)
        missing = sorted(set(range(count)) - {int(a["index"]) for a in kept})
        if missing:
            try:
                offer, options = await self._choose(resource)
            except SlurmUnavailable as exc:
                raise StackFailed(str(exc)) from None
            except StackUnavailable as exc:
                raise StackFailed(str(exc)) from None
            node = self.node(resource.project, offer.cluster)
            try:
                bundle = await self._bundle()
                python = await install_bundle(self._pool, node.target, bundle, self._remote_dir)
            except DeployError as exc:
                raise StackFailed(f"{resource.label}: the agent's bundle: {exc}") from None
            for index in missing:
                chosen = (offer, options)
                kept.append(await self._submit(resource, node, index, python, chosen))
                self._save(resource, kept)  # at once: a crash now forgets no allocation
        return {"instances": await self._running(resource, sorted(kept, key=lambda a: a["index"]))}

    async def _running(
        self, resource: StackResource, allocations: Sequence[Allocation]
    ) -> list[dict[str, Any]]:
        """Wait until each allocation runs and its agent wrote its endpoint; the instances."""
        deadline = time.monotonic() + self._wait_s
        found: dict[str, dict[str, Any]] = {}
        while True:
            waiting = []
            for allocation in allocations:
                job_id = allocation["job_id"]
                if job_id in found:
                    continue
                cluster = self._cluster(resource.project, allocation["cluster"])
                node = LoginNode(self._pool, self.login(cluster), self._limit_s)
                job = (await node.queue([job_id])).get(job_id)
                ended = ended_reason(job_id, job)
                if ended is not None:
                    raise StackFailed(
                        f"{resource.label}: {ended[1]} before its agent started (see "
                        f"{allocation['job_dir']}/slurm.out on the login node)"
                    )
                running = job is not None and job.running
                endpoint = await node.endpoint(allocation["job_dir"], job_id) if running else None
                if endpoint is None:
                    waiting.append(
                        f"job {job_id} {job.state if job else '?'} ({job.reason if job else ''})"
                    )
                    continue
                found[job_id] = _instance(
                    resource, allocation, cluster, node.target, endpoint, self._key
                )
            if not waiting:
                return [found[a["job_id"]] for a in allocations]
            if time.monotonic() > deadline:
                raise StackBusy(
                    f"{resource.label}: Slurm allocations not running yet: {', '.join(waiting)}",
                    retry_after=10.0,
                )
            await asyncio.sleep(0.5)

    async def refresh(self, resource: StackResource) -> StackPlan:
        steps = []
        for allocation in self._load(resource):
            node = self.node(resource.project, allocation["cluster"])
            job_id = allocation["job_id"]
            if ended_reason(job_id, (await node.queue([job_id])).get(job_id)):
                name = f"allocation/{resource.name}-{allocation['index']}"
                steps.append(StackStep(StepOp.DELETE, name, "slurm:sbatch"))
        return StackPlan(resource.stack_name, tuple(steps), {"delete": len(steps)} if steps else {})

    async def preview_destroy(self, resource: StackResource) -> StackPlan:
        steps = tuple(
            StackStep(StepOp.DELETE, f"allocation/{resource.name}-{a['index']}", "slurm:sbatch")
            for a in self._load(resource)
        )
        return StackPlan(resource.stack_name, steps, {"delete": len(steps)} if steps else {})

    async def destroy(self, resource: StackResource) -> None:
        """`scancel` every allocation of the fleet, then forget them."""
        allocations = self._load(resource)
        for cluster in dict.fromkeys(a["cluster"] for a in allocations):
            mine = [a for a in allocations if a["cluster"] == cluster]
            node = self.node(resource.project, cluster)
            await node.cancel([str(a["job_id"]) for a in mine], [a["job_dir"] for a in mine])
        self._state_file(resource).unlink(missing_ok=True)

    async def instance_ended(self, resources: object) -> tuple[JobTerminationReason, str] | None:
        """Why the allocation an instance records (`resources.slurm`) ended, or None while
        it runs (or the cluster cannot say now)."""
        record = resources.get("slurm") if isinstance(resources, Mapping) else None
        job_id = str(record.get("job_id") or "") if isinstance(record, Mapping) else ""
        if not job_id or not isinstance(record, Mapping):
            return None
        try:
            project, cluster = str(record.get("project")), str(record.get("cluster"))
            queued = await self.node(project, cluster).queue([job_id])
        except (StackFailed, StackUnavailable, StackUnsupported):
            return None
        return ended_reason(job_id, queued.get(job_id))


def _instance(
    resource: StackResource,
    allocation: Allocation,
    cluster: SlurmCluster,
    login: SSHTarget,
    endpoint: Mapping[str, Any],
    key: Path,
) -> dict[str, Any]:
    return {
        "name": f"{resource.name}-{allocation['index']}",
        "hostname": endpoint["hostname"],
        "port": endpoint["port"],
        "user": AGENT_USER,
        "agent_port": endpoint["agent_port"],
        "backend": "slurm",
        "identity_file": str(key),
        "proxy_jump": {
            "hostname": login.hostname,
            "port": login.port,
            "user": login.user,
            "identity_file": login.identity_file,
        },
        "slurm": {
            "project": resource.project,
            "cluster": cluster.name,
            "job_id": allocation["job_id"],
            "partition": allocation["partition"],
            "node": endpoint["node"],
        },
    }


def slurm_engine(
    clusters: ServerBackends | None,
    pool: TunnelPool,
    data_dir: Path,
    key: Path,
    agents: AgentSetup,
) -> SlurmEngine | None:
    """The server's Slurm engine, when its backends file configures Slurm for a project.
    Its files on the login node go beside the SSH hosts' agent (`--ssh-agent-dir`'s
    parent: `~/.dockyard/slurm` by default)."""
    if clusters is None or not any(
        isinstance(backend, SlurmBackend)
        for entry in clusters.config.projects
        for backend in entry.backends
    ):
        return None
    remote_dir = str(PurePosixPath(agents.remote_dir).parent / "slurm")
    return SlurmEngine(
        clusters,
        pool,
        data_dir,
        key,
        agents.agent_bundle,
        agents.ssh_options,
        remote_dir=remote_dir,
    )
