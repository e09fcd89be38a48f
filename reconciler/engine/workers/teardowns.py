"""The teardowns worker: what a deleted project leaves on its hosts is undone.

Deleting a project records one `host_teardowns` row per host it used, in the deletion's own
transaction (`reconciler.adapters.db.teardowns`); the web hints this worker and does no
SSH. An SSH instance that ends (its fleet deleted, its host out of `ssh_config`) records
one too, with no jobs (`Store.end_ssh_instance`, the instances worker). With a lease on a
row (any replica), one pass:

1. stops the project's jobs on the host through its agent (force: the project is gone, so
   nobody waits for a graceful end) and removes them once ended, so their specs, logs and
   working directories go too; a job still ending makes the row due again in 2 s;
2. on an SSH host, takes the project's users off the agent's key file: if a fleet still
   lists the host (`Store.fleets_on_host`: a live instance there, or a fleet being deployed
   whose `ssh_config` names it), the file is written again for that fleet (`deps.ssh_keys`,
   `engine.hostkeys`: that fleet's members and the global admins only); if none does, the
   host is retired (`deps.ssh_retire`): its key file keeps the server's key only and its
   agent is stopped (the directory stays, so listing the host again redeploys quickly).
   The agent closes open connections whose key left the file (`agent.ssh.keywatch`);
3. drops the row.

A host that does not answer is tried again every `RETRY_SECONDS`, its row saying why, for
`GIVE_UP_SECONDS`; then the row is dropped with a warning naming the host (its jobs and key
file are then left as they were: the operator's to clean).
The local fleet's host keeps its agent (the server's own); its key file follows the
projects at once (`web.dstack_attach.sync_user_keys`). A cloud host's jobs are stopped.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import asyncssh

from agent.client import AgentClient, AgentError, AgentUnreachable
from agent.deploy import DeployError
from agent.tunnel import SSHTarget
from reconciler.domain.teardowns import HostTeardown
from reconciler.engine.worker import RELEASED, Process, ProcessResult, WorkerConfig
from reconciler.engine.workers import WorkerDeps

log = logging.getLogger(__name__)

CONFIG = WorkerConfig(kind="teardowns", concurrency=4, lease_seconds=120.0, min_interval=30.0)
RETRY_SECONDS = 30.0
ENDING_SECONDS = 2.0
GIVE_UP_SECONDS = 86400.0
_HOST_ERRORS = (AgentUnreachable, AgentError, DeployError, asyncssh.Error, OSError, ValueError)


def make_process(deps: WorkerDeps) -> Process:
    return TeardownsProcessor(deps).process


@dataclass
class TeardownsProcessor:
    deps: WorkerDeps

    async def process(self, row_id: str, token: str) -> ProcessResult:
        store = self.deps.store
        teardown = await asyncio.to_thread(store.load_teardown, row_id, token)
        if teardown is None:
            return None
        where = _where(teardown)
        try:
            ending = await self._stop_jobs(teardown)
            if not ending and teardown.host.backend == "ssh":
                await self._release_host(teardown)
        except _HOST_ERRORS as exc:
            age = (store.now() - teardown.created_at).total_seconds()
            if age < GIVE_UP_SECONDS:
                why = f"{where}: not undone yet, tried again in {RETRY_SECONDS:.0f} s: {exc}"
                await asyncio.to_thread(store.hold_teardown, row_id, token, why, RETRY_SECONDS)
                return RELEASED
            log.warning("gave up undoing %s after %.0f s: %s", where, age, exc)
        else:
            if ending:
                why = f"{where}: waiting for {ending} job(s) to end"
                await asyncio.to_thread(store.hold_teardown, row_id, token, why, ENDING_SECONDS)
                return RELEASED
            log.info("undone %s", where)
        await asyncio.to_thread(store.finish_teardown, row_id, token)
        return RELEASED

    async def _stop_jobs(self, teardown: HostTeardown) -> int:
        """Stop and remove the jobs there; how many are still ending."""
        if not teardown.job_ids:
            return 0
        address = self.deps.agents.address(teardown.host)
        client = AgentClient.over_tunnel(self.deps.agents.pool, address.target, address.agent_port)
        ending = 0
        try:
            for job_id in teardown.job_ids:
                try:
                    state = await client.stop(job_id, force=True)
                except AgentError as exc:
                    if exc.status_code == 404:  # the agent has no such job (any more)
                        continue
                    raise
                if not state.status.is_finished():
                    ending += 1
                    continue
                await client.remove(job_id)
        finally:
            await client.aclose()
        return ending

    async def _release_host(self, teardown: HostTeardown) -> None:
        """The host's key file without the project's users: another fleet's, or retired."""
        target = self.deps.agents.address(teardown.host).target
        host = teardown.host
        others = await asyncio.to_thread(
            self.deps.store.fleets_on_host, host.hostname, host.ssh_port
        )
        if others:
            if self.deps.ssh_keys is not None:
                await self.deps.ssh_keys(others[0], target, force=True)
            return
        if self.deps.ssh_retire is not None:
            await self.deps.ssh_retire(target)


def _where(teardown: HostTeardown) -> str:
    host = teardown.host
    target = SSHTarget(host.hostname or "?", host.ssh_port or 22, host.ssh_user or "root")
    return f"host {host.name} ({target}) of deleted project {teardown.project}"
