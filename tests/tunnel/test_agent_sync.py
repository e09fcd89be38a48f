"""The instances worker settles an agent with the store (`workers/agent_sync.py`, issue 31).

- A finished job the store has ended is removed from its agent even when the removal that
  follows its final write never happened: the server killed in between (the next server
  process removes it at its first check), or the agent killed (the agent started in its
  place keeps the record; it is removed once that agent answers). Its record and working
  dir go away; a finished job the store has not recorded ended yet is kept (its own pass
  reads its end and log first). A removal that found the agent away (the jobs worker marks
  the instance `unsettled`, and unreachable in the store) is done at the instance's next
  check, by whichever replica makes it: another replica's, which saw nothing fail.
- Every job the store has active on the host is made due when the agent is new to this
  server process or another agent process answers (started between two checks, its data
  dir wiped, here: told by its healthcheck's epoch): its own pass then asks the agent
  at once instead of at the 600 s safety pass; an ordinary check wakes nobody.

Real local agent (embedded SSH server), real tunnel, the real instances worker, on SQLite
and PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agent.client import AgentClient, AgentError
from agent.local import ensure_client_key, local_paths, stop_local_agent
from agent.protocol import JobSpec, JobStatus
from agent.tunnel import TunnelPool
from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Instance, Job, Run
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.workers.job_context import JobsConfig
from reconciler.engine.workers.job_running import RunningJobs
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.tunnel.conftest import unique_id, wait_job
from tests.tunnel.test_local import until_dead
from tests.tunnel.test_local_restart import Rig

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'sync.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


@pytest.fixture
def rig(tmp_path: Path, db_url: str) -> Iterator[Rig]:
    made = Rig(tmp_path)
    made.store.close()
    made.store = Store.from_url(db_url, migrate=True)
    yield made
    stop_local_agent(tmp_path)


async def _client_do(rig: Rig, spec: JobSpec | None = None, job_id: str = "") -> JobStatus:
    """Submit `spec` and wait for its end, or read `job_id`'s status on the current agent."""
    agent = rig.started[-1]
    async with AgentClient.over_tunnel(rig.pool, agent.target, agent.agent_port) as client:
        if spec is not None:
            await client.submit(spec)
            return (await wait_job(client, spec.id, lambda s: s.status.is_finished())).status
        return (await client.job(job_id)).status


async def _known(rig: Rig, job_id: str) -> bool:
    try:
        await _client_do(rig, job_id=job_id)
    except AgentError as exc:
        assert exc.code == "not_found", exc
        return False
    return True


def _job_dir(rig: Rig, job_id: str) -> Path:
    return local_paths(rig.server_dir).data_dir / "jobs" / job_id


def _record(rig: Rig, agent_job_id: str, status: str, reason: str | None = None) -> str:
    """A job row of the rig's instance as the store holds it; its id."""
    store, now = rig.store, rig.store.now()
    run = store.add(Run(project_id=rig.project_id, run_name=unique_id("run"), run_type="task",
                        spec={}, spec_hash="h", status="running", submitted_at=now))  # fmt: skip
    finished = now if reason else None
    job = store.add(Job(run_id=run.id, status=status, termination_reason=reason, job_spec={},
                        submitted_at=now, instance_id=rig.instance_id, agent_job_id=agent_job_id,
                        finished_at=finished))  # fmt: skip
    return job.id


def _sleeping(rig: Rig, job_id: str) -> None:
    """The job sleeps as a job whose agent's events are followed does (600 s)."""
    with rig.store.writing() as session:
        row = session.get(Job, job_id)
        assert row is not None
        row.due_at = rig.store.now() + timedelta(seconds=600)


def _due_now(rig: Rig, job_id: str) -> bool:
    row = rig.store.get(Job, job_id)
    assert row is not None
    return row.due_at is None


async def _ended_job(rig: Rig, name: str) -> str:
    spec = JobSpec(id=unique_id(name), run_name=name, commands=["echo done"])
    assert await _client_do(rig, spec) == JobStatus.EXITED
    assert _job_dir(rig, spec.id).is_dir()
    return spec.id


async def test_a_finished_job_left_by_a_server_kill_is_removed_at_the_first_check(
    rig: Rig,
) -> None:
    agent = await rig.start()
    rig.add_instance(agent)
    try:
        # its final status was written, then the server died before removing it
        removed = await _ended_job(rig, "removed")
        _record(rig, removed, "done", "done_by_runner")
        # ended on the agent, not yet in the store: its pass reads its end and log first
        kept = await _ended_job(rig, "kept")
        _record(rig, kept, "running")
        await rig.check()  # a new server process's first look at the agent
        assert not await _known(rig, removed)
        assert not _job_dir(rig, removed).exists()
        assert await _known(rig, kept)
        assert _job_dir(rig, kept).is_dir()
    finally:
        await rig.close()


async def test_a_removal_an_agent_kill_interrupted_is_done_once_the_next_agent_answers(
    rig: Rig,
) -> None:
    first = await rig.start()
    rig.add_instance(first)
    try:
        await rig.check()  # this server process has looked once: nothing to remove yet
        job_id = await _ended_job(rig, "ended")
        _record(rig, job_id, "done", "done_by_runner")
        os.kill(first.pid, signal.SIGKILL)  # the removal that follows never reached it
        await until_dead(first.pid)
        await rig.check()  # unreachable: the local agent is started again
        assert rig.agent_pid() != first.pid
        assert await _known(rig, job_id)  # the new agent loaded the finished job's record
        await rig.check()  # the new agent answers: the store says ended, so it goes
        assert not await _known(rig, job_id)
        assert not _job_dir(rig, job_id).exists()
    finally:
        await rig.close()


async def test_active_jobs_are_woken_when_the_agent_is_new_or_restarted_not_otherwise(
    rig: Rig,
) -> None:
    first = await rig.start()
    rig.add_instance(first)
    try:
        ghost = _record(rig, "ghost", "running")  # the agent never had it
        _sleeping(rig, ghost)
        await rig.check()  # new to this server process: its jobs look for themselves
        assert _due_now(rig, ghost)
        _sleeping(rig, ghost)
        await rig.check()  # the same agent, answering as before: nobody woken
        assert not _due_now(rig, ghost)
        # the agent dies, its data dir is wiped, and another starts between two checks
        os.kill(first.pid, signal.SIGKILL)
        await until_dead(first.pid)
        shutil.rmtree(local_paths(rig.server_dir).data_dir / "jobs")
        second = await rig.start()
        with rig.store.writing() as session:  # where it listens (the same ports, mostly)
            row = session.get(Instance, rig.instance_id)
            assert row is not None
            row.ssh_port, row.agent_port = second.ssh_port, second.agent_port
        await rig.check()  # it answers, never unreachable to the worker: its epoch tells
        assert _due_now(rig, ghost)
    finally:
        await rig.close()


async def test_a_removal_that_found_the_agent_away_is_done_at_the_next_check(rig: Rig) -> None:
    agent = await rig.start()
    rig.add_instance(agent)
    try:
        await rig.check()  # this server process has looked once
        job_id = await _ended_job(rig, "missed")
        _record(rig, job_id, "done", "done_by_runner")
        await rig.check()  # nothing says to look: an ordinary check asks the agent nothing
        assert await _known(rig, job_id)
        # the jobs worker's removal met the agent away (`RunningJobs.remove`) and said so
        rig.worker.deps.agents.unsettled.add(rig.instance_id)
        await rig.check()
        assert not await _known(rig, job_id)
        assert not _job_dir(rig, job_id).exists()
        assert not rig.worker.deps.agents.unsettled
    finally:
        await rig.close()


async def test_a_removal_one_replica_could_not_send_is_done_at_another_replicas_check(
    rig: Rig, tmp_path: Path
) -> None:
    """Two replicas: A's jobs worker removes a finished job and finds the agent away (for A
    alone here: A holds a key the agent refuses); B, which looked at that agent before and
    finds the same agent process, makes the instance's next check and removes it. Before
    the store marked it, only A knew, so B's check asked the agent nothing."""
    agent = await rig.start()
    rig.add_instance(agent)  # rig.worker: replica B's instances worker
    pool = TunnelPool()
    refused = ensure_client_key(tmp_path / "replica-a" / "id_ed25519")
    replica_a = RunningJobs(
        store=rig.store,
        agents=AgentDirectory(pool, identity_file=str(refused)),
        config=JobsConfig(data_dir=tmp_path / "replica-a"),
        release=lambda ctx, update: update,
    )
    try:
        await rig.check()  # B has looked once; the agent answers it with the same epoch later
        job_id = await _ended_job(rig, "elsewhere")
        _record(rig, job_id, "done", "done_by_runner")
        instance = rig.store.instance_record(rig.instance_id)
        assert instance is not None
        await replica_a._remove(instance, job_id)  # the removal after its final write: refused
        assert await _known(rig, job_id)
        await rig.check()  # B's check
        assert not await _known(rig, job_id)
        assert not _job_dir(rig, job_id).exists()
        row = rig.store.get(Instance, rig.instance_id)
        assert row is not None and row.unreachable_since is None  # reached again: cleared
    finally:
        await replica_a.aclose()
        await pool.close()
        await rig.close()
