"""The local agent starter and the SSH hosts' agent deployer of the server's runtime.

`AgentSetup` is built once by `reconciler.engine.controller.build_controller` and shares the
engine's SSH tunnel pool and the server's key: `local` starts the local fleet's agent;
`deploy`/`refresh` put the server's agent on an SSH host (into `--ssh-agent-dir`, on
`--ssh-agent-port`, with its SSH server for users one port below: `agent.deploy`);
`push_keys` writes that SSH server's key file, who may reach the host's fleet's jobs
(`engine.hostkeys`); `retire` undoes a host no fleet lists any more (a deleted project's:
the teardowns worker). The workers get these as `WorkerDeps` callables.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from agent.bundle import Bundle, build_bundle
from agent.deploy import (
    DEFAULT_AGENT_PORT,
    DEFAULT_REMOTE_DIR,
    AgentOptions,
    DeployedAgent,
    deploy_agent,
    session_port_for,
    stop_agent,
    write_authorized_keys,
)
from agent.local import ensure_local_agent
from agent.tunnel import SSHTarget, TunnelPool
from reconciler.adapters.db.store import Store
from reconciler.engine.hostkeys import control_key_line, host_keys_text
from reconciler.engine.keyfiles import check_target_keys
from reconciler.engine.workers import LocalAgent
from reconciler.settings import Settings


@dataclass
class AgentSetup:
    """The local agent starter and the SSH deployer, sharing the pool and the server key."""

    data_dir: Path
    key: Path
    pool: TunnelPool
    bundle: Bundle | None = None
    key_dirs: tuple[Path, ...] = ()  # where fleets' identity files may be (`keyfiles`)
    local_job_user: str = "auto"  # the local agent's --job-user
    local_job_isolation: str = "auto"  # ... its --job-isolation
    local_default_image: str | None = None  # ... its --default-image (None: dstack's)
    local_volume_roots: str | None = None  # ... its --volume-root, ':'-separated (None: default)
    local_unsandboxed: bool = False  # ... its --unsandboxed-process-jobs
    local_allow_job_users: str | None = None  # ... its --allow-job-user, ','-separated
    local_min_free_disk: int | None = None  # ... its --min-free-disk (None: its 1 GiB)
    local_work_root: str | None = None  # ... its --work-root (None: its default)
    ssh_options: AgentOptions = field(default_factory=AgentOptions)  # SSH hosts' agents
    remote_dir: str = DEFAULT_REMOTE_DIR  # --ssh-agent-dir
    agent_port: int = DEFAULT_AGENT_PORT  # --ssh-agent-port (its session port: one below)
    store: Store | None = None  # who may reach a fleet's jobs (`push_keys`)
    pushed: dict[SSHTarget, str] = field(default_factory=dict)  # digests of key files written

    async def local(self) -> LocalAgent:
        agent = await ensure_local_agent(
            self.data_dir,
            self.key,
            self.pool,
            job_user=self.local_job_user,
            job_isolation=self.local_job_isolation,
            default_image=self.local_default_image,
            volume_roots=self.local_volume_roots,
            unsandboxed=self.local_unsandboxed,
            allow_job_users=self.local_allow_job_users,
            min_free_disk=self.local_min_free_disk,
            work_root=self.local_work_root,
        )
        return LocalAgent(
            hostname=agent.target.hostname,
            ssh_port=agent.ssh_port,
            ssh_user=agent.target.user,
            agent_port=agent.agent_port,
        )

    async def deploy(self, target: SSHTarget) -> int:
        return (await self._deploy(target)).agent_port

    async def refresh(self, target: SSHTarget) -> bool:
        """The host's agent runs with `ssh_options` (replaced if not); True if replaced."""
        return not (await self._deploy(target)).reused

    async def agent_bundle(self) -> Bundle:
        """The agent's bundle this server deploys (built on first need)."""
        if self.bundle is None:
            self.bundle = await asyncio.to_thread(build_bundle, self.data_dir / "bundles")
        return self.bundle

    async def _deploy(self, target: SSHTarget) -> DeployedAgent:
        self.bundle = await self.agent_bundle()
        check_target_keys(target, self.key_dirs)
        return await deploy_agent(
            self.pool,
            target,
            self.bundle,
            agent_port=self.agent_port,
            remote_dir=self.remote_dir,
            session_port=session_port_for(self.agent_port),
            options=self.ssh_options,
        )

    async def push_keys(self, fleet_id: str, target: SSHTarget, *, force: bool = True) -> bool:
        """Write the key file of the agent SSH server on `target`, a host of `fleet_id`
        (without `force`, only if it differs from what this process wrote last); True if
        written."""
        if self.store is None:
            return False
        check_target_keys(target, self.key_dirs)  # the key file is read for its public line
        text = await asyncio.to_thread(host_keys_text, self.store, self.data_dir, fleet_id, target)
        digest = hashlib.sha256(text.encode()).hexdigest()
        if not force and self.pushed.get(target) == digest:
            return False
        await write_authorized_keys(self.pool, target, text, self.remote_dir)
        self.pushed[target] = digest
        return True

    async def retire(self, target: SSHTarget) -> None:
        """`target` is in no fleet any more: its agent's key file keeps the server's key
        only (no user reaches anything there), then the agent is stopped."""
        check_target_keys(target, self.key_dirs)
        text = "".join(f"{line}\n" for line in [control_key_line(target)] if line)
        await write_authorized_keys(self.pool, target, text, self.remote_dir)
        self.pushed[target] = hashlib.sha256(text.encode()).hexdigest()
        await stop_agent(self.pool, target, self.remote_dir)


def ssh_agent_options(settings: Settings) -> AgentOptions:
    """The job options of the agents deployed to SSH hosts (`--ssh-job-isolation` …)."""
    return AgentOptions(
        job_isolation=settings.ssh_job_isolation,
        default_image=settings.ssh_default_image,
        job_user=settings.ssh_job_user,
        allow_root_jobs=settings.ssh_allow_root_jobs,
        min_free_disk=settings.ssh_min_free_disk,
        volume_roots=settings.ssh_volume_roots,
        unsandboxed_process_jobs=settings.ssh_unsandboxed_process_jobs,
        allow_job_users=settings.ssh_allow_job_users,
    )
