"""The instances worker and the local fleet's agent: a slow agent is not replaced for one
failed healthcheck; one that fails several in a row, or whose process is gone, is, and its
running job carries on under the new agent (re-adopted, same processes). An agent back
after being unreachable stops the jobs the store ended meanwhile.

Real local agent (embedded SSH server, `ensure_local_agent`), real tunnel, the real
instances worker on SQLite. "Slow" is an agent stopped with SIGSTOP: alive, answering
nothing, as one too busy to answer before the healthcheck's timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.client import AgentClient
from agent.local import (
    LocalAgent as StartedAgent,
)
from agent.local import (
    ensure_client_key,
    ensure_local_agent,
    local_agent_alive,
    local_paths,
    stop_local_agent,
)
from agent.protocol import JobSpec, JobStatus
from agent.server.executors import proctable
from agent.server.jobaccount import agent_tag
from agent.tunnel import TunnelPool
from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Fleet, Instance, Job, Run
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.workers import LocalAgent, WorkerDeps
from reconciler.engine.workers.instances import LOCAL_RESTART_AFTER, InstancesProcessor
from tests.tunnel.conftest import unique_id, wait_job
from tests.tunnel.test_local import until_dead

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def server_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    stop_local_agent(tmp_path)


class Rig:
    """One local agent, its instance row, and the instances worker that watches it."""

    def __init__(self, server_dir: Path) -> None:
        self.server_dir = server_dir
        self.key = ensure_client_key(server_dir / "keys" / "id_ed25519")
        self.pool = TunnelPool()
        self.store = Store.from_url(f"sqlite:///{server_dir / 'd.db'}", migrate=True)
        self.started: list[StartedAgent] = []

    async def start(self) -> StartedAgent:
        agent = await ensure_local_agent(self.server_dir, self.key, self.pool, job_user="self")
        self.started.append(agent)
        return agent

    async def starter(self) -> LocalAgent:
        agent = await self.start()
        return LocalAgent(agent.target.hostname, agent.ssh_port, agent.target.user,
                          agent.agent_port)  # fmt: skip

    def add_instance(self, agent: StartedAgent) -> None:
        project = self.store.get_or_create_project("main")
        now = self.store.now()
        fleet = self.store.add(Fleet(project_id=project.id, name="local", created_at=now,
                                     spec={"type": "fleet"}, status="active"))  # fmt: skip
        instance = self.store.add(Instance(fleet_id=fleet.id, project_id=project.id, name="local-0",
                                status="busy", created_at=now, busy_blocks=1, backend="local",
                                hostname=agent.target.hostname, ssh_port=agent.ssh_port,
                                ssh_user=agent.target.user, agent_port=agent.agent_port,
                                resources={"known_hosts": agent.target.known_hosts}))  # fmt: skip
        deps = WorkerDeps(store=self.store, clock=self.store.clock, hint=lambda kind: None,
                          agents=AgentDirectory(self.pool, identity_file=str(self.key)),
                          data_dir=self.server_dir, local_agent=self.starter)  # fmt: skip
        self.worker = InstancesProcessor(deps)
        self.project_id, self.instance_id = project.id, instance.id

    async def check(self) -> None:
        """One pass of the instances worker over the instance."""
        [(row_id, token)] = self.store.leases.claim_due(
            Instance, owner="t", limit=1, lease_seconds=60
        )
        await self.worker.process(row_id, token)
        self.store.leases.release(Instance, row_id, token)

    def agent_pid(self) -> int:
        state = json.loads((self.server_dir / "local-agent" / "state.json").read_text())
        return int(state["pid"])

    async def close(self) -> None:
        """Also kills what its agent's jobs left running (a failed test must not leave
        `sleep 1000` behind: jobs outlive their agent by design)."""
        self.store.close()
        await self.pool.close()
        tag = agent_tag(local_paths(self.server_dir).data_dir)
        for stats in proctable.marked_processes(tag).values():
            for stat in stats:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(stat.pid, signal.SIGKILL)


async def _running_job(rig: Rig, agent: StartedAgent) -> tuple[str, int]:
    async with AgentClient.over_tunnel(rig.pool, agent.target, agent.agent_port) as client:
        job = JobSpec(id=unique_id("kept"), run_name="kept", commands=["sleep 1000"])
        await client.submit(job)
        state = await wait_job(client, job.id, lambda s: s.status == JobStatus.RUNNING)
    assert state.pid is not None
    return job.id, state.pid


async def _job_on_current_agent(rig: Rig, job_id: str) -> tuple[JobStatus, int | None]:
    agent = rig.started[-1]
    async with AgentClient.over_tunnel(rig.pool, agent.target, agent.agent_port) as client:
        state = await client.job(job_id)
        if state.status == JobStatus.RUNNING:
            return state.status, state.pid
        return state.status, None


async def _stop(rig: Rig, job_id: str) -> None:
    agent = rig.started[-1]
    async with AgentClient.over_tunnel(rig.pool, agent.target, agent.agent_port) as client:
        await client.stop(job_id, grace=0, force=True)
        await wait_job(client, job_id, lambda s: s.status.is_finished())


async def test_a_slow_local_agent_is_replaced_only_after_checks_fail_in_a_row(
    server_dir: Path,
) -> None:
    rig = Rig(server_dir)
    first = await rig.start()
    rig.add_instance(first)
    job_id, wrapper = await _running_job(rig, first)
    os.kill(first.pid, signal.SIGSTOP)  # alive, answers nothing
    try:
        for _ in range(LOCAL_RESTART_AFTER - 1):
            await rig.check()
            # one failed check (or two) is no reason: the same agent, still there
            assert rig.agent_pid() == first.pid and local_agent_alive(server_dir)
        await rig.check()  # failed once more: replaced
        assert rig.agent_pid() != first.pid
        await until_dead(first.pid)  # the old one left (SIGTERM, then SIGCONT)
        # the new agent took the job back: the same process, still running
        assert await _job_on_current_agent(rig, job_id) == (JobStatus.RUNNING, wrapper)
        assert len(rig.started) == 2
        await _stop(rig, job_id)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(first.pid, signal.SIGCONT)
        await rig.close()


async def test_a_local_agent_whose_process_is_gone_is_replaced_at_the_first_failed_check(
    server_dir: Path,
) -> None:
    rig = Rig(server_dir)
    first = await rig.start()
    rig.add_instance(first)
    job_id, wrapper = await _running_job(rig, first)
    os.kill(first.pid, signal.SIGKILL)
    await until_dead(first.pid)
    try:
        await rig.check()
        assert rig.agent_pid() != first.pid
        assert await _job_on_current_agent(rig, job_id) == (JobStatus.RUNNING, wrapper)
        await _stop(rig, job_id)
    finally:
        await rig.close()


async def test_jobs_the_store_ended_without_their_agent_are_stopped_when_it_answers(
    server_dir: Path,
) -> None:
    """Failed `instance_unreachable` (the agent did not answer in time) while the agent
    still runs them: stopped there at the next check it answers; the others run on."""
    rig = Rig(server_dir)
    agent = await rig.start()
    rig.add_instance(agent)
    early, _ = await _running_job(rig, agent)
    late, _ = await _running_job(rig, agent)
    kept, _ = await _running_job(rig, agent)
    store, now = rig.store, rig.store.now()
    run = store.add(Run(project_id=rig.project_id, run_name="kept", run_type="task", spec={},
                        spec_hash="h", status="running", submitted_at=now))  # fmt: skip
    rows = {}
    for job_id in (early, late, kept):
        rows[job_id] = store.add(Job(run_id=run.id, status="running", job_spec={},
                                     submitted_at=now, instance_id=rig.instance_id,
                                     agent_job_id=job_id))  # fmt: skip

    def lost(job_id: str) -> None:
        with store.writing() as session:
            row = session.get(Job, rows[job_id].id)
            assert row is not None
            row.status, row.termination_reason = "failed", "instance_unreachable"
            row.finished_at = store.now()

    async def status(job_id: str, *, ended: bool = False) -> JobStatus:
        async with AgentClient.over_tunnel(rig.pool, agent.target, agent.agent_port) as client:
            if ended:  # the stop was sent: its kill takes a moment
                return (await wait_job(client, job_id, lambda s: s.status.is_finished())).status
            return (await client.job(job_id)).status

    try:
        lost(early)  # before this server process looked: its first check looks
        await rig.check()
        assert await status(early, ended=True) == JobStatus.TERMINATED
        lost(late)  # later: looked for again because a job was lost since
        await rig.check()
        assert await status(late, ended=True) == JobStatus.TERMINATED
        assert await status(kept) == JobStatus.RUNNING
        stopped = [e.message for e in store.list_events() if "stopped 1 job(s)" in e.message]
        assert len(stopped) == 2
        await _stop(rig, kept)
    finally:
        await rig.close()
