"""The per-kind background workers and what they are built from.

Each worker module (`runs`, `jobs`, `instances`, `fleets`, `volumes`, `gateways`) exposes

    def make_process(deps: WorkerDeps) -> Process

returning the `process(row_id, lock_token)` callback of the generic
`reconciler.engine.worker.Worker` for its kind, and may expose `CONFIG: WorkerConfig`
(batch size, lease, intervals; defaults from dstack's pipeline settings). The
controller builds one `Worker` per kind from these; tests call `make_process(deps)` and
then the callback (or `Worker.process_once`) directly.

`WorkerDeps` carries every dependency the callbacks need — nothing is global: the store,
the clock, `hint` (wake another kind's worker after a write that made its rows due), the
stacks engines, the agent directory (SSH-tunnelled agent clients per instance) and the
server settings that matter to workers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.diskspace import DiskWatch
from agent.tunnel import SSHTarget
from reconciler.adapters.db.store import Store
from reconciler.core.uploads import Upload
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.joblogs import LogCap
from reconciler.engine.workers.job_context import ClusterEnded
from reconciler.ports import Clock, WorkKind
from stacks.protocol import Engine, EngineName


@dataclass(frozen=True, slots=True)
class LocalAgent:
    """How the server reaches the agent of the local fleet (this host)."""

    hostname: str
    ssh_port: int
    ssh_user: str
    agent_port: int


LocalAgentStarter = Callable[[], Awaitable[LocalAgent]]
"""Starts (or finds running) the agent of this host; returns how to reach it."""

ArchiveBuilder = Callable[[str, Upload], dict[str, str]]
"""(commit, upload) -> the agent's `Archive` body (`{path, data}`); raises `PermanentError`."""

SSHDeployer = Callable[[SSHTarget], Awaitable[int]]
"""Deploys (or finds current) the agent on an SSH host; returns its agent port."""

SSHKeyPusher = Callable[..., Awaitable[bool]]
"""`(fleet_id, target, *, force=True)`: writes the key file of the agent SSH server on a
host of the fleet (who may reach its jobs with dstack's attach, `reconciler.engine.hostkeys`);
without `force` only when it changed since this process last wrote it. True if written."""

SSHRetirer = Callable[[SSHTarget], Awaitable[None]]
"""Retires an SSH host no fleet lists any more: its agent's key file keeps the server's key
only, and its agent is stopped (the teardown of a deleted project's host)."""
SSHRefresher = Callable[[SSHTarget], Awaitable[bool]]
"""Makes an SSH host's agent run with the server's agent options (`--ssh-job-isolation` …),
replacing it when it was started with others; True when it was replaced."""


@dataclass(frozen=True, slots=True)
class WorkerTimings:
    """Grace windows and intervals the workers apply (all seconds; tests shorten them)."""

    unreachable_grace: float = 120.0
    """How long an agent may be unreachable before its jobs fail `instance_unreachable`."""
    instance_check_interval: float = 14.0
    fleet_check_interval: float = 15.0
    wait_backoff: float = 300.0
    """How long a job no instance has room for sleeps (a safety net): room made — blocks
    given back, an instance ready — wakes it at once, so a queue costs nothing while it
    waits (a shorter sleep re-placed every waiting job again and again)."""


@dataclass(frozen=True, slots=True)
class WorkerDeps:
    """Everything a worker callback may use; built once by the controller."""

    store: Store
    clock: Clock
    hint: Callable[[WorkKind], None]
    agents: AgentDirectory
    data_dir: Path
    engines: Mapping[EngineName, Engine] = field(default_factory=dict)
    local_agent: LocalAgentStarter | None = None
    ssh_deployer: SSHDeployer | None = None
    ssh_keys: SSHKeyPusher | None = None
    ssh_retire: SSHRetirer | None = None
    ssh_refresher: SSHRefresher | None = None
    """Each SSH instance's agent is checked once per server process (the options are the
    server's settings, which change only at a restart). None: never checked."""
    timings: WorkerTimings = WorkerTimings()
    archives: ArchiveBuilder | None = None
    """Packs `repos`/`files` of GitOps runs from the config repo (None: no config repo)."""
    log_cap: LogCap | None = None
    """How much of each job's log the server keeps (`job_log_head`/`job_log_tail`)."""
    disk: DiskWatch | None = None
    """The server's data dir: while it is nearly full, job logs are not copied."""
    cluster_ended: ClusterEnded | None = None
    """Asked when a Slurm instance's agent stops answering (None: no Slurm backend)."""
    agent_build: str = ""
    """The build of the agent this server deploys (`agent.protocol.agent_build`); an SSH
    host's agent of another build is replaced. Empty: never replaced."""
