"""Day two with the real local agent: a chatty job's log is capped to its head and tail, and
a nearly full server data dir (a real tmpfs) pauses log copying without losing or corrupting
a byte; the job finishes once space returns (the store on SQLite in that data dir, and on
PostgreSQL elsewhere)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.diskspace import DiskWatch
from reconciler.engine.joblogs import LogCap, job_log_path, read_log, tail_path
from tests.e2e.runs_harness import AgentEnv, Harness, close_harness, make_harness
from tests.operations.tmpfs import fill, tmpfs
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401

pytestmark = pytest.mark.timeout(120)
MIN_FREE = 8 * 2**20


def _whole_log(h: Harness, run_name: str, job_id: str) -> tuple[bytes, int]:
    path = job_log_path(h.data_dir, h.project.name, run_name, job_id)
    data, dropped, offset = b"", 0, 0
    while True:
        piece = read_log(path, offset, 1 << 20)
        if not piece.data:
            return data, dropped
        data, dropped, offset = data + piece.data, dropped + piece.dropped, piece.next_offset


async def test_a_chatty_job_keeps_its_head_and_tail(tmp_path: Path, agent_env: AgentEnv) -> None:
    h = await make_harness(tmp_path, agent_env, log_cap=LogCap(head=4096, tail=8192))
    try:
        run = h.submit("type: task\nname: chatty\ncommands: ['seq 1 40000']\n")
        await h.until(lambda: h.run(run.id).status == "done")
        [job] = h.jobs_of(run.id)
        full = b"".join(b"%d\n" % i for i in range(1, 40001))
        assert job.log_offset == len(full)
        data, dropped = _whole_log(h, "chatty", job.id)
        assert data == full[:4096] + full[len(full) - len(data) + 4096 :]
        assert dropped == len(full) - len(data) and dropped > 0
        path = job_log_path(h.data_dir, h.project.name, "chatty", job.id)
        assert path.stat().st_size == 4096
        assert tail_path(path).stat().st_size <= 2 * 8192 + 21
    finally:
        await close_harness(h)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None  # the harness's SQLite, in the data dir that fills up
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


@pytest.fixture
async def small_disk_harness(
    tmp_path: Path, agent_env: AgentEnv, db_url: str | None
) -> AsyncIterator[Harness]:
    with tmpfs(tmp_path / "data", 32) as mount:
        disk = DiskWatch({"data dir": mount}, MIN_FREE)
        # the server's own timings: nothing wakes a job whose log waits for space when it
        # returns, so its pass must look again within seconds (`JobsConfig.disk_poll`)
        harness = await make_harness(tmp_path, agent_env, db_url, disk=disk)
        yield harness
        await close_harness(harness)


async def test_a_full_data_dir_pauses_log_copying_until_space_returns(
    small_disk_harness: Harness,
) -> None:
    h = small_disk_harness
    script = "for i in $(seq 1 100); do echo tick $i; sleep 0.02; done; echo end"
    run = h.submit(f"type: task\nname: ticker\ncommands: ['{script}']\n")
    await h.until(lambda: "tick 5" in h.log_text(run))
    filler = fill(h.data_dir, leave_mib=2)
    [job] = h.jobs_of(run.id)
    paused_at = job.log_offset
    await h.until(lambda: "disk almost full" in h.jobs_of(run.id)[0].status_message)
    [job] = h.jobs_of(run.id)
    assert job.status == "running" and job.log_offset == paused_at  # waits, copies nothing
    filler.unlink()
    await h.until(lambda: h.run(run.id).status == "done")
    lines = h.log_text(run).splitlines()
    assert lines[-1] == "end"
    assert [int(re.sub(r"^tick ", "", line)) for line in lines[:-1]] == list(range(1, len(lines)))
