"""A harness for the runs and jobs workers on a real local agent (process executor).

Starts the real local agent through its embedded SSH server, records it as the instance
of fleet `local`, and drives the real runs and jobs workers (real leases on SQLite or
PostgreSQL) step by step until a condition holds. Used by `test_runs_*.py`. Given stacks
`engines`, the fleets and instances workers run too (fleets grow and shrink).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.client import AgentClient
from agent.diskspace import DiskWatch
from agent.local import LocalAgent, ensure_client_key, ensure_local_agent
from agent.tunnel import TunnelPool
from reconciler.adapters.db.models import Fleet, Instance, Job, Project, Resource, Run
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.joblogs import LogCap
from reconciler.engine.service_stats import RequestStats
from reconciler.engine.worker import Lease, Worker
from reconciler.engine.workers import ArchiveBuilder, WorkerDeps, WorkerTimings
from reconciler.engine.workers import fleets as fleets_worker
from reconciler.engine.workers import instances as instances_worker
from reconciler.engine.workers import jobs as jobs_worker
from reconciler.engine.workers import runs as runs_worker
from schemas import parse_config
from stacks.protocol import Engine, EngineName


@dataclass
class Harness:
    store: Store
    data_dir: Path
    project: Project
    fleet: Fleet
    instance: Instance
    pool: TunnelPool
    agents: AgentDirectory
    local: LocalAgent
    runs: Worker
    jobs: Worker
    stats: RequestStats
    key: Path
    capacity: tuple[Worker, ...] = ()
    """The fleets and instances workers, when the harness was given stacks engines."""

    def submit(
        self, text: str, *, status: str = "submitted", git: tuple[str, str] | None = None
    ) -> Run:
        """A run of `text`; with `git` = (config path, commit), created by GitOps (its
        resource has the origin `git:<path>@<commit>`)."""
        config = parse_config(text, git[0] if git else "test.dstack.yml")
        spec = config.normalized()
        resource_id = None
        if git is not None:
            now = self.store.now()
            resource = self.store.add(
                Resource(
                    project_id=self.project.id,
                    kind=config.type,
                    name=str(config.name),
                    origin=f"git:{git[0]}@{git[1]}",
                    path=git[0],
                    commit=git[1],
                    spec=spec,
                    spec_hash=config.spec_hash(),
                    status="active",
                    created_at=now,
                    updated_at=now,
                )
            )
            resource_id = resource.id
        return self.store.add(
            Run(
                project_id=self.project.id,
                resource_id=resource_id,
                run_name=str(config.name),
                run_type=config.type,
                spec=spec,
                spec_hash=config.spec_hash(),
                status=status,
                submitted_at=self.store.now(),
            )
        )

    def run(self, run_id: str) -> Run:
        row = self.store.get(Run, run_id)
        assert row is not None
        return row

    async def add_instance(self, env: AgentEnv, fleet: Fleet, name: str) -> Instance:
        """Record another agent (another local agent process) as an instance of `fleet`."""
        client = AgentClient.over_tunnel(self.pool, env.local.target, env.local.agent_port)
        try:
            info = await client.host_info()
        finally:
            await client.aclose()
        return self.store.add(
            Instance(
                fleet_id=fleet.id,
                project_id=self.project.id,
                name=name,
                status="idle",
                created_at=self.store.now(),
                hostname=env.local.target.hostname,
                ssh_port=env.local.target.port,
                ssh_user=env.local.target.user,
                agent_port=env.local.agent_port,
                backend="local",
                host_info=info.model_dump(mode="json"),
            )
        )

    def jobs_of(self, run_id: str) -> list[Job]:
        return self.store.list_jobs(run_id)

    async def step(self) -> int:
        done = await self.runs.process_once() + await self.jobs.process_once()
        for worker in self.capacity:
            done += await worker.process_once()
        return done

    async def until(self, condition: Callable[[], bool], *, within: float = 30.0) -> None:
        """Step the workers until `condition()` holds (polling, bounded by a deadline)."""
        deadline = time.monotonic() + within
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"condition not reached before the deadline; {self.describe()}"
                )
            if not await self.step():
                await asyncio.sleep(0.05)

    def describe(self) -> str:
        """Every run and job with status and message, for failure messages."""
        lines = []
        for run in self.store.list_runs(self.project.id):
            lines.append(
                f"run {run.run_name}: {run.status} {run.termination_reason} {run.status_message!r}"
            )
            for job in self.store.list_jobs(run.id):
                lines.append(
                    f"  job {job.replica_num}/{job.job_num}#{job.submission_num}: {job.status} "
                    f"{job.termination_reason} {job.status_message!r} runtime={job.runtime}"
                )
        return "\n".join(lines)

    def log_text(self, run: Run) -> str:
        path = self.data_dir / "projects" / self.project.name / "logs" / run.run_name
        return "".join(p.read_text(errors="replace") for p in sorted(path.glob("*.log")))


@dataclass(frozen=True)
class AgentEnv:
    """A running local agent, shared by the tests of a module (starting one takes seconds)."""

    root: Path
    key: Path
    local: LocalAgent


async def start_agent_env(root: Path, key: Path | None = None) -> AgentEnv:
    """Start a local agent under `root`, authorizing `key` (default: a new key)."""
    pool = TunnelPool()
    key = key or ensure_client_key(root / "ssh" / "id_ed25519")
    # jobs of these tests write to the test's temp dir: they run as the agent's own user
    local = await ensure_local_agent(root, key, pool, job_user="self")
    await pool.close()
    return AgentEnv(root, key, local)


def stop_agent_env(env: AgentEnv) -> None:
    from agent.local import stop_local_agent

    stop_local_agent(env.root)


async def make_harness(
    tmp_path: Path,
    env: AgentEnv,
    db_url: str | None = None,
    *,
    total_blocks: int = 8,
    archives: ArchiveBuilder | None = None,
    engines: Mapping[EngineName, Engine] | None = None,
    log_cap: LogCap | None = None,
    disk: DiskWatch | None = None,
    **timings: Any,
) -> Harness:
    data_dir = tmp_path / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    store = Store.from_url(db_url or f"sqlite:///{data_dir / 'dockyard.db'}", migrate=True)
    pool = TunnelPool()
    key, local = env.key, env.local
    agents = AgentDirectory(pool, identity_file=str(key))
    client = AgentClient.over_tunnel(pool, local.target, local.agent_port)
    info = await client.host_info()
    await client.aclose()
    project = store.get_or_create_project("main")
    now = store.now()
    fleet = store.add(
        Fleet(
            project_id=project.id,
            name="local",
            spec={"type": "fleet"},
            status="active",
            created_at=now,
        )
    )
    instance = store.add(
        Instance(
            fleet_id=fleet.id,
            project_id=project.id,
            name="local-0",
            status="idle",
            created_at=now,
            hostname=local.target.hostname,
            ssh_port=local.target.port,
            ssh_user=local.target.user,
            agent_port=local.agent_port,
            backend="local",
            host_info=info.model_dump(mode="json"),
            total_blocks=total_blocks,
        )
    )
    stats = RequestStats()
    kinds: dict[str, Worker] = {}

    def hint(kind: str) -> None:
        if kind in kinds:
            kinds[kind].hint()

    deps = WorkerDeps(
        store=store,
        clock=store.clock,
        hint=hint,
        agents=agents,
        data_dir=data_dir,
        timings=WorkerTimings(**timings),
        archives=archives,
        engines=engines or {},
        log_cap=log_cap,
        disk=disk,
    )
    leasing: StoreLeasing[Lease] = StoreLeasing(store.leases, make_lease=Lease)
    fast = {"min_interval": 0.0}
    runs = Worker(
        runs_worker.CONFIG.__class__(**{**_fields(runs_worker.CONFIG), **fast}),
        leasing=leasing,
        process=runs_worker.make_process(deps, stats=stats),
    )
    jobs = Worker(
        jobs_worker.CONFIG.__class__(**{**_fields(jobs_worker.CONFIG), **fast}),
        leasing=leasing,
        process=jobs_worker.make_process(deps),
    )
    kinds.update(runs=runs, jobs=jobs)
    if engines is not None:
        for module in (fleets_worker, instances_worker):
            config = module.CONFIG.__class__(**{**_fields(module.CONFIG), **fast})
            kinds[config.kind] = Worker(config, leasing=leasing, process=module.make_process(deps))
    capacity = tuple(kinds[k] for k in ("fleets", "instances") if k in kinds)
    return Harness(
        store,
        data_dir,
        project,
        fleet,
        instance,
        pool,
        agents,
        local,
        runs,
        jobs,
        stats,
        key,
        capacity,
    )


def _fields(config: object) -> dict[str, Any]:
    from dataclasses import fields

    return {f.name: getattr(config, f.name) for f in fields(config)}  # type: ignore[arg-type]


async def close_harness(h: Harness) -> None:
    """Kill what the test left running on the agents (jobs outlive their agent by design),
    then close the clients and the store."""
    stopping = []
    for run in h.store.list_runs(h.project.id, include_deleted=True):
        for job in h.store.list_jobs(run.id):
            instance = h.store.get(Instance, job.instance_id or "")
            if instance is None or job.agent_job_id is None or job.finished_at is not None:
                continue
            client = h.agents.client(instance)
            with contextlib.suppress(Exception):  # best effort: the agent may be gone
                await client.stop(job.agent_job_id, force=True)
                stopping.append((client, job.agent_job_id))
    deadline = time.monotonic() + 15
    for client, job_id in stopping:  # a stop proceeds in the agent's background: wait for it
        with contextlib.suppress(Exception):
            while not (await client.job(job_id)).status.is_finished():
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
    await h.agents.aclose()
    await h.pool.close()
    h.store.close()
