"""Jobs that end while the store refuses writes (a full disk) still reach their final status
once it takes writes again, on SQLite and PostgreSQL: the agent's end events are not passed
over (the follower retries their wakes) and the workers retry what the store refused.

The real local agent runs the tasks; the server's event follower (`JobEventFollower`)
follows it; the runs and jobs workers are the harness's (tests/e2e/runs_harness.py). The
store's refusals are the driver's own disk-full errors (tests/engine/refusedwrites.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.engine.jobevents import JobEventFollower
from reconciler.engine.worker import Lease
from tests.e2e.runs_harness import AgentEnv, Harness, close_harness, make_harness
from tests.engine.refusedwrites import RefusedWrites
from tests.services.postgres import postgres_server  # noqa: F401

pytestmark = pytest.mark.timeout(180)
TASKS = 3


@pytest.fixture(params=["sqlite", "postgres"])
async def followed(
    request: pytest.FixtureRequest, tmp_path: Path, agent_env: AgentEnv
) -> AsyncIterator[tuple[Harness, JobEventFollower]]:
    """The harness on SQLite or PostgreSQL, its agent followed as the controller wires it."""
    url = None
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_server").create_database()
    h = await make_harness(tmp_path, agent_env, url)
    follower = JobEventFollower(
        StoreLeasing(h.store.leases, make_lease=Lease), lambda kind: None, states=h.store
    )
    h.agents.on_client = follower.follow
    h.agents.following = follower.following
    h.agents.events = follower
    h.agents.client(h.instance)
    await h.until(lambda: follower.following(h.instance.id))
    yield h, follower
    await follower.aclose()
    await close_harness(h)


async def test_jobs_ending_while_the_store_refuses_writes_reach_their_final_status(
    followed: tuple[Harness, JobEventFollower],
) -> None:
    h, _ = followed
    go = h.data_dir / "go"  # the tasks end once it exists (they run as the test's user)
    wait = f"echo started; while [ ! -e {go} ]; do sleep 0.05; done"
    runs = [h.submit(f"type: task\nname: t{i}\ncommands: ['{wait}']\n") for i in range(TASKS)]
    await h.until(
        lambda: all(h.run(r.id).status == "running" and "started" in h.log_text(r) for r in runs),
        within=60,
    )
    faults = RefusedWrites(h.store.engine)
    faults.fill()  # the disk is full: the tasks end meanwhile, nothing can be recorded
    go.touch()
    try:
        client = h.agents.client(h.instance)
        deadline = time.monotonic() + 60
        while True:  # the workers are not stepped: every write would be refused
            ended = [s for s in await client.jobs() if s.status.is_finished()]
            if len(ended) >= TASKS and faults.refused:
                break
            assert time.monotonic() < deadline, "the agent did not end the tasks"
            await asyncio.sleep(0.05)
    finally:
        faults.free()
        faults.close()
    await h.until(lambda: all(h.run(r.id).status == "done" for r in runs), within=30)
    assert all("started" in h.log_text(r) for r in runs)
