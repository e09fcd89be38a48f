"""A job that finds its agent gone makes its instance's check due at once (issue 31).

The instances worker checks an agent every 14 s; a local agent SIGKILLed between two checks
would otherwise wait for the next one to be started again, and every stop sent meanwhile
with it. The real jobs worker on a real local agent (SQLite and PostgreSQL): the agent is
killed under a running job, and the job's next pass, meeting the agent gone for the first
time, makes the instance due now.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import pytest_asyncio

from agent.local import local_paths, stop_local_agent
from agent.server.executors import proctable
from agent.server.jobaccount import agent_tag
from reconciler.adapters.db.models import Instance
from tests.e2e.runs_harness import (
    AgentEnv,
    Harness,
    close_harness,
    make_harness,
    start_agent_env,
)
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.tunnel.test_local import until_dead

pytestmark = pytest.mark.timeout(180)
TASK = """type: task
name: ticking
commands:
  - while true; do echo tick; sleep 0.2; done
"""


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    if request.param == "sqlite":
        return None
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


@pytest_asyncio.fixture
async def own(tmp_path: Path, db_url: str | None) -> AsyncIterator[tuple[AgentEnv, Harness]]:
    """An agent of this test's own (it is killed) and the workers on it."""
    env = await start_agent_env(tmp_path / "agent")
    harness = await make_harness(tmp_path, env, db_url)
    yield env, harness
    await close_harness(harness)
    stop_local_agent(env.root)
    # its jobs outlived the killed agent, by design: none may outlive the test
    for stats in proctable.marked_processes(agent_tag(local_paths(env.root).data_dir)).values():
        for stat in stats:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stat.pid, signal.SIGKILL)


def _instance(h: Harness) -> Instance:
    row = h.store.get(Instance, h.instance.id)
    assert row is not None
    return row


async def test_a_job_meeting_its_agent_gone_makes_the_instance_check_due(
    own: tuple[AgentEnv, Harness],
) -> None:
    env, h = own
    run = h.submit(TASK)
    await h.until(lambda: [j.status for j in h.jobs_of(run.id)] == ["running"])
    with h.store.writing() as session:  # checked a moment ago: next check in 600 s
        row = session.get(Instance, h.instance.id)
        assert row is not None
        row.due_at = h.store.now() + timedelta(seconds=600)
    os.kill(env.local.pid, signal.SIGKILL)
    await until_dead(env.local.pid)
    await h.until(lambda: h.jobs_of(run.id)[0].unreachable_since is not None)
    assert _instance(h).due_at is None
    [job] = h.jobs_of(run.id)
    assert job.status == "running"  # within the grace: the job waits for its agent
