"""The job event follower and a local agent restarted on new ports: the follower drops its
feed of the old address and follows the new agent, so a job's end there is seen through
its events (not the jobs' 1 s poll that an unfollowed host falls back to).

Real local agent (embedded SSH server, `ensure_local_agent`), real tunnel, the real
instances worker (it replaces the killed agent and records its new ports), the real
`AgentDirectory` (one client per address) wired to the real `JobEventFollower` as the
controller wires them, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.client import AgentClient
from agent.local import stop_local_agent
from agent.protocol import JobSpec, JobStatus
from reconciler.adapters.db import Store
from reconciler.adapters.db.models import Instance
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.jobevents import JobEventFollower
from reconciler.engine.worker import Lease
from reconciler.engine.workers import WorkerDeps
from reconciler.engine.workers.instances import InstancesProcessor
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.tunnel.conftest import unique_id, wait_job
from tests.tunnel.test_local import until_dead
from tests.tunnel.test_local_restart import Rig

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def server_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    stop_local_agent(tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'events.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


async def _until(condition: Callable[[], bool], within: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def _hold(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past its TIME_WAITs
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


async def test_a_local_agent_restarted_on_new_ports_is_followed_again(
    server_dir: Path, db_url: str
) -> None:
    rig = Rig(server_dir)
    rig.store.close()
    rig.store = Store.from_url(db_url, migrate=True)
    first = await rig.start()
    rig.add_instance(first)
    agents = AgentDirectory(rig.pool, identity_file=str(rig.key))
    leasing = StoreLeasing(rig.store.leases, make_lease=Lease)
    follower = JobEventFollower(leasing, lambda kind: None, states=rig.store, wait=2.0)
    agents.on_client = follower.follow  # as the controller wires them
    deps = WorkerDeps(store=rig.store, clock=rig.store.clock, hint=lambda kind: None,
                      agents=agents, data_dir=server_dir, local_agent=rig.starter)  # fmt: skip
    rig.worker = InstancesProcessor(deps)
    instance_id = rig.instance_id
    held: list[socket.socket] = []
    try:
        await rig.check()  # the worker speaks to the agent: its events are followed
        await _until(lambda: follower.following(instance_id))
        os.kill(first.pid, signal.SIGKILL)
        await until_dead(first.pid)
        await _until(lambda: not follower.following(instance_id))  # the feed broke
        # its ports taken meanwhile (the restart reuses them when free): it moves
        held = [_hold(first.agent_port), _hold(first.ssh_port)]
        await rig.check()  # replaced: a new agent on new ports
        row = rig.store.get(Instance, instance_id)
        assert row is not None and row.agent_port != first.agent_port
        await rig.check()  # the worker speaks to the new agent at its new address
        await _until(lambda: follower.following(instance_id))
        assert follower.refollowed == 1
        second = rig.started[-1]
        async with AgentClient.over_tunnel(rig.pool, second.target, second.agent_port) as client:
            job = JobSpec(id=unique_id("short"), run_name="short", commands=["echo hi"])
            await client.submit(job)
            await wait_job(client, job.id, lambda s: s.status.is_finished())
        # its end came through the new agent's events, held for the job's pass
        await _until(lambda: follower.holds_end(instance_id, job.id))
        end = follower.ended(instance_id, job.id)
        assert end is not None and end.state.status is JobStatus.EXITED
    finally:
        for sock in held:
            sock.close()
        await follower.aclose()
        await agents.aclose()
        await rig.close()
