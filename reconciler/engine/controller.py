"""The runtime the server runs: workers, timers and the reconcile queue behind `Controller`.

`build_controller(settings, store)` is the composition of the engine (called by
`reconciler.app`): one SSH tunnel pool and agent directory shared by every worker (and by
the service proxy, through `controller.agents`), the stacks engines, the local agent
starter and the SSH deployer, the git source of the config repo, the `Reconciler`, one
`Worker` per kind and the apscheduler timers. `EngineController` implements
`reconciler.ports.Controller`: every method is quick — it queues, hints or runs one short
transaction in a thread; the workers do the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dataclasses_replace
from pathlib import Path
from typing import Any

from agent.deploy import DeployError, session_port_for
from agent.diskspace import DiskWatch
from agent.local import ensure_client_key
from agent.protocol import agent_build
from agent.tunnel import AgentUnreachable, TunnelPool
from reconciler.adapters.db.refusals import refused_by_store
from reconciler.adapters.db.replicas import this_server
from reconciler.adapters.db.sourceleasing import ProjectReconcileLeasing
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.adapters.gitsource.remotes import location_from_env
from reconciler.adapters.gitsource.source import GitSource
from reconciler.adapters.gitsource.sourcearchives import SourceArchives
from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.gpugroups import gpu_groups
from reconciler.core.jobusers import JobUserRule
from reconciler.core.policy import PolicyRules, RepoPolicy
from reconciler.core.rendering_json import action_to_dict
from reconciler.domain.metrics import JobSample
from reconciler.engine import unmanaged
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.agentsetup import AgentSetup
from reconciler.engine.agentsetup import ssh_agent_options as ssh_agent_options  # tests
from reconciler.engine.clusterengines import cluster_ended_of, kube_engine
from reconciler.engine.engines import server_engines
from reconciler.engine.jobevents import JobEventFollower
from reconciler.engine.joblogs import LogCap
from reconciler.engine.jobsampling import JobSampler
from reconciler.engine.previewing import Previewer
from reconciler.engine.reconciling import ConfigSource, GitConfigSource, Reconciler, Reporter
from reconciler.engine.replicas import ReplicaHeartbeat
from reconciler.engine.retention import RetentionPolicy, RetentionSweeper
from reconciler.engine.sessionforwards import LISTEN_HOST, SessionForwards
from reconciler.engine.slurmengine import slurm_engine
from reconciler.engine.sourceloops import SourceLoops, source_reconcilers, suspended_reason
from reconciler.engine.triggers import Timers, queue_reconcile
from reconciler.engine.worker import ErrorNote, Lease, Process, Worker, WorkerConfig
from reconciler.engine.workers import WorkerDeps, WorkerTimings
from reconciler.errors import DockyardError, UsageError
from reconciler.ports import Trigger, WorkKind
from reconciler.settings import Settings
from schemas import parse_config
from schemas.limits import DEFAULT_LIMITS, ConfigLimits
from stacks.catalog import CatalogRow, load_catalog
from stacks.credentials import host_probe, missing_credentials
from stacks.protocol import Engine, EngineName

log = logging.getLogger(__name__)

WORKER_MODULES: Mapping[WorkKind, str] = {
    "runs": "runs",
    "jobs": "jobs",
    "instances": "instances",
    "fleets": "fleets",
    "volumes": "volumes",
    "gateways": "gateways",
    "teardowns": "teardowns",
}
RECONCILES = WorkerConfig(kind="reconciles", concurrency=1, lease_seconds=120.0, min_interval=0.0)


@dataclass
class Runtime:
    """What the controller drives; built by `build_controller` (or by tests)."""

    store: Store
    deps: WorkerDeps
    reconciler: Reconciler | None
    projects: set[str]
    fetch_interval: float
    workers: dict[WorkKind, Worker] = field(default_factory=dict)
    identity: str = ""
    sweeper: RetentionSweeper | None = None  # the retention sweep (docs/operations.md)
    heartbeat: ReplicaHeartbeat | None = None  # this server among the database's replicas
    config_limits: ConfigLimits = DEFAULT_LIMITS  # --config-max-*: posted configs too
    catalog: tuple[CatalogRow, ...] = field(default_factory=load_catalog)
    """The offers catalog runs are priced with (policy: `max_price`, budgets), read once
    when the runtime is built: the reconciler and `dockyard apply` / the dstack API share it."""
    job_users: JobUserRule | None = None
    """The server's rule for a process job's `user:` (`core.jobusers`), which every plan of
    the reconciler, `dockyard apply` and the dstack API applies (None: not checked)."""


class EngineController:
    """`reconciler.ports.Controller` over the engine's workers; see the module docstring."""

    def __init__(self, runtime: Runtime, *, pool: TunnelPool | None = None) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self.agents = runtime.deps.agents
        self.source: ConfigSource | None = None  # the config repo (its policy's run limits)
        self.clusters: ServerBackends | None = None  # the server's backends file
        self.policies: dict[str, RepoPolicy] = {}  # the last policy each reconcile saw
        self.pool = pool
        self.setup: AgentSetup | None = None  # the SSH deployer (build_controller)
        self.forwards = SessionForwards(pool) if pool is not None else None
        self.timers = Timers(self._timer_request, fetch_interval=runtime.fetch_interval)
        self.loops: SourceLoops | None = None  # the stored sources' loops (build_controller)
        self.repo_project: str | None = None  # the project the --repo shorthand feeds
        self._started = False
        self.leasing = StoreLeasing(self.store.leases, make_lease=Lease, lane=self.store.lane)
        # Agents' job events wake their jobs (no quick polls): `engine/jobevents.py`.
        self.events = JobEventFollower(
            self.leasing, self.hint, states=self.store, store_failure=refused_by_store
        )
        self.agents.on_client = self.events.follow
        self.agents.following = self.events.following
        self.agents.events = self.events

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.events.open()
        if self.runtime.identity:
            released = await asyncio.to_thread(
                release_dead_leases, self.store, self.runtime.identity
            )
            if released:
                log.info("took back %d leases of this server's previous run", released)
        # Every host is looked at now, not at its next interval (up to the instances
        # worker's 7 s): that pass follows the agent's job events (`jobevents`: the first
        # page wakes every job there) and settles it with the store (`agent_sync`), so
        # running jobs' logs and ends flow again within a second of a restart.
        await self.leasing.wake_all("instances")
        for worker in self.runtime.workers.values():
            await worker.start()
        if self.runtime.heartbeat is not None:
            await self.runtime.heartbeat.start()
        if self.runtime.sweeper is not None:
            self.runtime.sweeper.start()
        if self.runtime.reconciler is not None or self.loops is not None:
            self.timers.start(self.runtime.projects if self.runtime.reconciler else set())
        if self.loops is not None:  # every stored source: its own loop (sourceloops)
            await self.loops.start()
        if self.runtime.reconciler is not None:
            for project in sorted(self.runtime.projects):
                await self.request_reconcile(project, trigger="startup")

    async def caught_up(self, within: float) -> None:
        """Wait (at most `within` seconds) until the instances worker, then the jobs worker,
        have found nothing due once: after a start, every host was looked at and the jobs
        it woke had their pass (a restart's first progress). The server builds its web app
        after it (`reconciler.app.serve_engine_first`), so the two do not share the CPU."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        for kind in ("instances", "jobs"):
            worker = self.runtime.workers.get(kind)
            if worker is None:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.idle.wait(), max(0.0, deadline - loop.time()))

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self.loops is not None:
            await self.loops.stop()
        self.timers.stop()
        if self.runtime.sweeper is not None:
            await self.runtime.sweeper.stop()
        if self.runtime.heartbeat is not None:
            await self.runtime.heartbeat.stop()
        await asyncio.gather(*(w.stop() for w in self.runtime.workers.values()))
        await self.events.aclose()
        await self.agents.aclose()
        if self.forwards is not None:
            await self.forwards.close()
        if self.pool is not None:
            await self.pool.close()

    @property
    def previewer(self) -> Previewer:
        """The stack previewer over this runtime's engines: the server's PR plans preview
        with it, as the reconcile does (`reconciler.engine.planning`)."""
        if self.runtime.reconciler is not None:
            return self.runtime.reconciler.previewer
        return Previewer(self.runtime.deps.engines, clusters=self.clusters)

    # -- dstack's attach on SSH fleets ----------------------------------------------------

    async def session_forward(self, instance_id: str) -> tuple[int, int] | None:
        """For an SSH host's instance: (the server's loopback port whose connections reach
        the host agent's SSH server for users, that server's port on the host); started on
        first need (`engine.sessionforwards`). None: not an SSH instance, or no pool."""
        if self.forwards is None:
            return None
        row = await asyncio.to_thread(self.store.instance_record, instance_id)
        if row is None or row.backend != "ssh":
            return None
        address = self.agents.address(row)
        remote = session_port_for(address.agent_port)
        return await self.forwards.port(address.target, remote), remote

    async def local_session_forward(self, ssh_port: int) -> int | None:
        """With `--attach-host`: the port there whose connections reach the local agent's
        SSH server (127.0.0.1:ssh_port); None without it (clients use that port directly)."""
        if self.forwards is None or self.forwards.host == LISTEN_HOST:
            return None
        return await self.forwards.local(ssh_port)

    async def push_host_keys(self, fleet_id: str | None = None) -> int:
        """Write the key file of every live SSH instance's agent SSH server (of `fleet_id`,
        or of every fleet) again: who may reach the fleet's jobs (`engine.hostkeys`). How
        many hosts were written; a host that cannot be reached now is skipped (logged)."""
        if self.setup is None:
            return 0
        rows = await asyncio.to_thread(self.store.instance_records, fleet_id=fleet_id)
        written = 0
        for row in rows:
            if row.backend != "ssh" or row.fleet_id is None or row.status == "terminated":
                continue
            try:
                await self.setup.push_keys(row.fleet_id, self.agents.address(row).target)
            except (DeployError, DockyardError, AgentUnreachable, OSError, ValueError) as exc:
                log.warning("keys of instance %s not written: %s", row.name, exc)
                continue
            written += 1
        return written

    def hint(self, kind: WorkKind) -> None:
        worker = self.runtime.workers.get(kind)
        if worker is not None:
            worker.hint()
        if kind == "reconciles" and self.loops is not None:
            self.loops.hint()

    async def sources_changed(self) -> None:
        """An admin changed the stored sources: follow them now (`SourceLoops.sync`)."""
        if self.loops is not None:
            await self.loops.sync()

    # -- reconciles ------------------------------------------------------------------------

    async def request_reconcile(
        self,
        project: str,
        *,
        trigger: Trigger,
        delivery_id: str | None = None,
        revision: str | None = None,
    ) -> str:
        followed = self.loops.projects if self.loops is not None else {}
        if self.runtime.reconciler is None and not followed:
            raise UsageError(
                "this server watches no config repo: start it with --repo PATH_OR_URL, "
                "--sources-config FILE, or add one with `dockyard source add`"
            )
        if project not in followed and project not in (self.repo_project, *self.runtime.projects):
            raise UsageError(
                f"no source feeds project {project!r}: add one with `dockyard source add`"
            )
        reconcile_id = await asyncio.to_thread(
            queue_reconcile,
            self.store,
            project,
            trigger=trigger,
            delivery_id=delivery_id,
            revision=revision,
        )
        self.hint("reconciles")
        return reconcile_id

    async def _timer_request(self, project: str) -> None:
        await self.request_reconcile(project, trigger="timer")

    def apply_policy(self, project: str, policy: RepoPolicy) -> None:
        """The reconciler's policy hook: a `fetch_interval` in `.dockyard.yml` wins."""
        self.policies[project] = policy
        if "fetch_interval" in policy.model_fields_set and self.timers.set_interval(
            project, float(policy.fetch_interval)
        ):
            log.info("fetching %s every %ss (.dockyard.yml)", project, policy.fetch_interval)

    def policy_rules(self, project: str) -> PolicyRules:
        """The config repo's `policy` (`.dockyard.yml`) at the project's last applied revision,
        which `dockyard apply` and the dstack API enforce as the reconcile does; the last
        policy a reconcile saw when that cannot be read."""
        source = self.source if project in self.runtime.projects else None
        project_id = self.store.project_id_of(project)
        revision = self.store.last_applied_revision(project_id) if project_id is not None else None
        if source is not None and revision is not None:
            try:
                _, policy = source.load(revision)
            except DockyardError:
                policy = self.policies.get(project, RepoPolicy())
            return policy.policy if policy.project == project else PolicyRules()
        return self.policies.get(project, RepoPolicy()).policy

    def retry_later(self, project_id: str, delay: float) -> None:
        """The reconciler's retry hook: queue the branch head again after `delay`."""
        name = self.store.project_name(project_id)
        if name is not None:
            self.timers.retry_later(name, delay)

    # -- unmanaged (CLI) -------------------------------------------------------------------

    async def plan_unmanaged(
        self,
        project: str,
        *,
        text: str,
        path: str,
        user: str,
        file_archives: Sequence[Mapping[str, str]] = (),
    ) -> dict[str, Any]:
        def plan() -> dict[str, Any]:
            action = unmanaged.plan_one(
                self.store,
                project,
                text=text,
                path=path,
                user=user,
                file_archives=file_archives,
                rules=self.policy_rules(project),
                limits=self.runtime.config_limits,
                catalog=self.runtime.catalog,
                job_users=self.runtime.job_users,
            )
            offers = unmanaged.offers_for(self.store, project, action)
            return {**action_to_dict(action), "offers": offers}

        return await asyncio.to_thread(plan)

    async def apply_unmanaged(
        self,
        project: str,
        *,
        text: str,
        path: str,
        user: str,
        force: bool,
        file_archives: Sequence[Mapping[str, str]] = (),
    ) -> dict[str, Any]:
        plan, hints = await asyncio.to_thread(
            unmanaged.apply_one,
            self.store,
            project,
            text=text,
            path=path,
            user=user,
            force=force,
            file_archives=file_archives,
            rules=await asyncio.to_thread(self.policy_rules, project),
            limits=self.runtime.config_limits,
            catalog=self.runtime.catalog,
            job_users=self.runtime.job_users,
        )
        for kind in sorted(hints):
            self.hint(kind)
        return plan

    async def sample_job(
        self, project_id: str, run_name: str, *, job_num: int = 0, replica_num: int = 0
    ) -> JobSample | None:
        sampler = JobSampler(self.store, self.agents)
        return await sampler.sample(project_id, run_name, job_num=job_num, replica_num=replica_num)

    async def list_gpus(
        self, project_id: str, group_by: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        candidates = await asyncio.to_thread(self.store.placement_candidates, project_id)
        return gpu_groups(candidates, group_by)

    async def stop_run(self, project: str, name: str, *, abort: bool) -> None:
        if await asyncio.to_thread(unmanaged.stop_run, self.store, project, name, abort=abort):
            self.hint("runs")

    async def delete_resource(self, project: str, kind: str, name: str) -> None:
        hinted = await asyncio.to_thread(unmanaged.delete_resource, self.store, project, kind, name)
        self.hint(hinted)


# -- composition ----------------------------------------------------------------------------


def server_identity(data_dir: Path, pid: int | None = None) -> str:
    """Who holds this server's leases: `<hostname>:<hash of the data dir>:<pid>`.

    After a crash, a server started again on the same host and data dir takes back the
    leases of identities like its own whose process is gone (`release_dead_leases`),
    instead of waiting for them to expire; a live replica's leases are never touched.
    """
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return f"{socket.gethostname()}:{digest}:{os.getpid() if pid is None else pid}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release_dead_leases(store: Store, identity: str) -> int:
    """Drop the leases held by dead processes of this host and data dir; how many."""
    prefix = identity.rsplit(":", 1)[0] + ":"

    def is_dead(owner: str) -> bool:
        # Our own identity at start-up is a predecessor with our pid (a container's 1).
        return owner.split("/", 1)[0] == identity or not _pid_alive(_owner_pid(owner))

    return store.take_back_dead_leases(prefix, is_dead)


def _owner_pid(owner: str) -> int:
    """The pid in a lease owner `<host>:<digest>:<pid>/<kind>` (0 when there is none)."""
    head = owner.split("/", 1)[0]
    tail = head.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def make_workers(
    deps: WorkerDeps,
    reconciler: Reconciler | None,
    *,
    stats: Any = None,
    identity: str = "",
    reconcile_project: str | None = None,
) -> dict[WorkKind, Worker]:
    """One worker per kind whose module is present (runs/jobs come from their own modules).
    `reconcile_project`: the reconciles worker takes that project's rows only (the other
    projects' sources have their own loops, `sourceloops`)."""
    leasing = StoreLeasing(deps.store.leases, make_lease=Lease, lane=deps.store.lane)
    workers: dict[WorkKind, Worker] = {}
    for kind, module_name in WORKER_MODULES.items():
        try:
            module = importlib.import_module(f"reconciler.engine.workers.{module_name}")
        except ModuleNotFoundError:
            log.warning("no %s worker in this build", kind)
            continue
        kwargs = {"stats": stats} if kind == "runs" and stats is not None else {}
        process: Process = module.make_process(deps, **kwargs)
        config: WorkerConfig = getattr(module, "CONFIG", WorkerConfig(kind=kind))
        workers[kind] = Worker(
            config,
            leasing=leasing,
            process=process,
            owner=_owner(identity, kind),
            store_failure=refused_by_store,
            on_error=failure_events(deps.store),
        )
    if reconciler is not None:
        scoped = (
            ProjectReconcileLeasing(
                deps.store.leases, reconcile_project, make_lease=Lease, lane=deps.store.lane
            )
            if reconcile_project is not None
            else leasing
        )
        workers["reconciles"] = Worker(
            RECONCILES,
            leasing=scoped,
            process=reconciler.process,
            owner=_owner(identity, "reconciles"),
            store_failure=refused_by_store,
            on_error=failure_events(deps.store),
        )
    return workers


def failure_events(store: Store) -> ErrorNote:
    """A worker's row that keeps failing gets an event (`Store.note_step_failure`): what an
    operator reads in the row's events, not only in the server's log."""

    async def note(lease: Lease, message: str) -> None:
        await store.in_lane(store.note_step_failure, lease.kind, lease.row_id, message)

    return note


def _owner(identity: str, kind: str) -> str | None:
    return f"{identity}/{kind}" if identity else None


def _hinter(runtime: Runtime) -> Any:
    def hint(kind: WorkKind) -> None:
        worker = runtime.workers.get(kind)
        if worker is not None:
            worker.hint()

    return hint


_AgentSetup = AgentSetup  # the name tests import


def host_credentials(backend: str) -> str | None:
    """None when this host has credentials for the cloud `backend`, else why not."""
    return missing_credentials(backend, host_probe(os.environ, Path.home()))


def build_controller(
    settings: Settings,
    store: Store,
    *,
    source: ConfigSource | None = None,
    engines: Mapping[EngineName, Engine] | None = None,
    reporter: Reporter | None = None,
    stats: Any = None,
    timings: WorkerTimings | None = None,
    environ: Mapping[str, str] | None = None,
    clusters: ServerBackends | None = None,
) -> EngineController:
    """The engine's runtime for `settings` (see the module docstring)."""
    data_dir = settings.data_dir
    pool = TunnelPool()
    key = ensure_client_key(data_dir / "ssh" / "id_ed25519")
    agents = AgentSetup(
        data_dir,
        key,
        pool,
        key_dirs=settings.allowed_key_dirs,
        local_job_user=settings.local_job_user,
        local_job_isolation=settings.local_job_isolation,
        local_default_image=settings.local_default_image,
        local_volume_roots=settings.local_volume_roots,
        local_unsandboxed=settings.local_unsandboxed_process_jobs,
        local_allow_job_users=settings.local_allow_job_users,
        local_min_free_disk=settings.local_min_free_disk,
        local_work_root=settings.local_work_root,
        ssh_options=ssh_agent_options(settings),
        remote_dir=settings.ssh_agent_dir,
        agent_port=settings.ssh_agent_port,
        store=store,
    )
    slurm = slurm_engine(clusters, pool, data_dir, key, agents)
    kube = kube_engine(clusters, key, agents.ssh_options.args())
    clustered: dict[EngineName, Engine] = {}  # the cluster engines the backends file asks for
    if slurm is not None:
        clustered["slurm"] = slurm
    if kube is not None:
        clustered["kubernetes"] = kube
    runtime = Runtime(
        store=store,
        deps=WorkerDeps(
            store=store,
            clock=store.clock,
            hint=lambda kind: None,
            agents=AgentDirectory(pool, identity_file=str(key)),
            data_dir=data_dir,
            engines=dict(engines) | clustered
            if engines is not None
            else server_engines(settings, server_key=key, slurm=slurm, kubernetes=kube),
            cluster_ended=cluster_ended_of(
                slurm.instance_ended if slurm is not None else None,
                kube.instance_ended if kube is not None else None,
            ),
            local_agent=agents.local,
            ssh_deployer=agents.deploy,
            ssh_refresher=agents.refresh,  # once per process: the host's agent options
            ssh_keys=agents.push_keys,
            ssh_retire=agents.retire,
            timings=timings or WorkerTimings(),
            log_cap=LogCap(settings.job_log_head, settings.job_log_tail),
            disk=DiskWatch({"data dir": data_dir}, settings.min_free_disk),
            agent_build=agent_build(),  # an SSH host's agent of another build is replaced
        ),
        reconciler=None,
        projects={settings.project} if settings.repo or source else set(),
        fetch_interval=settings.fetch_interval,
    )
    runtime.deps = dataclasses_replace(runtime.deps, hint=_hinter(runtime))
    runtime.config_limits = settings.config_limits
    runtime.job_users = settings.job_user_rule()
    # Cloud credentials are checked on the server's own engines (injected ones are doubles).
    credentials = None if engines is not None else host_credentials
    controller = EngineController(runtime, pool=pool)
    controller.clusters = clusters
    controller.setup = agents
    if settings.attach_host is not None:  # dstack clients on other machines attach there
        controller.forwards = SessionForwards(
            pool, settings.attach_host, settings.attach_port_range
        )
    archives = SourceArchives()  # repos/files of a run: from its own source's mirror
    runtime.deps = dataclasses_replace(runtime.deps, archives=archives.build)
    if source is None and settings.repo:
        location = location_from_env(
            settings.repo,
            branch=settings.branch,
            subdir=settings.path,
            environ=os.environ if environ is None else environ,
        )
        limits = settings.config_limits  # --config-max-bytes/values/depth
        git_source = GitSource(
            location,
            data_dir=data_dir,
            parse=lambda text, path: parse_config(text, path, limits),
            limits=limits,  # a blob over config-max-bytes is refused unread
        )
        source = GitConfigSource(git_source)
        archives.add("--repo", git_source)
    controller.source = source
    if source is not None:
        runtime.reconciler = Reconciler(
            store,
            source,
            previewer=Previewer(runtime.deps.engines, credentials=credentials, clusters=clusters),
            hint=runtime.deps.hint,
            reporter=reporter,
            retry=controller.retry_later,
            on_policy=controller.apply_policy,
            catalog=runtime.catalog,
            job_users=runtime.job_users,
            held=lambda project: suspended_reason(store, project),
        )
    runtime.identity = server_identity(data_dir)
    runtime.sweeper = RetentionSweeper(
        store, data_dir, RetentionPolicy.from_settings(settings), runtime.identity
    )
    runtime.heartbeat = ReplicaHeartbeat(store, this_server(runtime.identity))
    runtime.workers = make_workers(
        runtime.deps,
        runtime.reconciler,
        stats=stats,
        identity=runtime.identity,
        reconcile_project=settings.project if runtime.reconciler is not None else None,
    )
    controller.repo_project = settings.project if runtime.reconciler is not None else None
    controller.loops = SourceLoops(
        store,
        source_reconcilers(settings, store, runtime, controller, credentials, environ, archives),
        controller.timers,
        default_interval=settings.fetch_interval,
        identity=runtime.identity,
    )
    return controller
