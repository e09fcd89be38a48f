"""Jobs the local agent refused for a full disk are placed again within seconds and run once
space returns: "when space returns … the jobs finish; no restart" (docs/operations.md) holds
for jobs not yet started too. (A refused job goes back to `submitted` due in `wait_poll`,
2 s; the jobs waiting behind it for busy capacity are woken by the blocks it gives back.)

The agent is the real local agent with its data dir on a real 32 MiB tmpfs
(tests/operations/tmpfs.py) and an 8 MiB free-disk threshold; the disk is filled for real.
The store on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from agent.local import ensure_client_key, ensure_local_agent, stop_local_agent
from agent.tunnel import TunnelPool
from tests.e2e.runs_harness import AgentEnv, Harness, close_harness, make_harness
from tests.operations.tmpfs import fill, tmpfs
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401

pytestmark = pytest.mark.timeout(120)
MIN_FREE = 8 * 2**20


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None  # the harness's SQLite in its data dir
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


@pytest_asyncio.fixture
async def small_agent_env(tmp_path: Path) -> AsyncIterator[AgentEnv]:
    """A local agent whose data dir is a 32 MiB tmpfs (threshold 8 MiB)."""
    with tmpfs(tmp_path / "agent", 32) as root:
        pool = TunnelPool()
        key = ensure_client_key(tmp_path / "ssh" / "id_ed25519")
        local = await ensure_local_agent(root, key, pool, job_user="self", min_free_disk=MIN_FREE)
        await pool.close()
        try:
            yield AgentEnv(root, key, local)
        finally:
            stop_local_agent(root)


async def test_jobs_refused_for_a_full_disk_are_placed_again_and_run_once_space_returns(
    tmp_path: Path, small_agent_env: AgentEnv, db_url: str | None
) -> None:
    # more jobs than the instance's 8 blocks: some are refused, the others wait behind them
    h: Harness = await make_harness(tmp_path / "server", small_agent_env, db_url)
    filler = fill(small_agent_env.root, leave_mib=2)
    try:
        spec = (
            "type: task\nname: late{}\ncommands: ['echo started']\nresources: {{disk: 0.01GB..}}\n"
        )
        runs = [h.submit(spec.format(i)) for i in range(12)]

        def refused() -> int:
            jobs = [j for r in runs for j in h.jobs_of(r.id)]
            return sum("disk almost full" in j.status_message for j in jobs)

        await h.until(lambda: refused() >= 8)
        assert all(j.status == "submitted" for r in runs for j in h.jobs_of(r.id))
        filler.unlink()
        # the wait for busy capacity is 300 s (`wait_backoff`): only wakes end it in time
        await h.until(lambda: all(h.run(r.id).status == "done" for r in runs), within=60)
        assert all("started" in h.log_text(r) for r in runs)
    finally:
        filler.unlink(missing_ok=True)
        await close_harness(h)
