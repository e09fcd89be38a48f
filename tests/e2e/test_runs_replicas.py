"""Two worker processes on one PostgreSQL database: 200 runs, every job run exactly once."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from reconciler.adapters.db.models import Instance, Run
from tests.e2e.runs_harness import close_harness, make_harness, start_agent_env, stop_agent_env
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401

pytestmark = [pytest.mark.timeout(300), pytest.mark.postgres]
ROOT = Path(__file__).resolve().parents[2]
RUNS = 200


async def test_two_processes_handle_each_job_exactly_once(
    tmp_path: Path,
    postgres_server: PostgresServer,  # noqa: F811
) -> None:
    env = await start_agent_env(tmp_path / "agent")
    url = postgres_server.create_database()
    h = await make_harness(tmp_path, env, url, total_blocks=32)
    ledger = tmp_path / "ledger"
    procs: list[asyncio.subprocess.Process] = []
    try:
        for n in range(RUNS):
            h.submit(f"type: task\nname: t{n:03d}\ncommands: ['echo t{n:03d} >> {ledger}']\n")
        for owner in ("replica-a", "replica-b"):
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "tests.e2e.worker_process",
                    "--db",
                    url,
                    "--data-dir",
                    str(h.data_dir),
                    "--key",
                    str(env.key),
                    "--owner",
                    owner,
                    cwd=ROOT,
                )
            )
        deadline = time.monotonic() + 240
        finished = 0
        while time.monotonic() < deadline:
            runs = h.store.list_runs(h.project.id)
            finished = sum(r.status in ("done", "failed") for r in runs)
            if finished == RUNS:
                break
            assert all(p.returncode is None for p in procs), "a worker process died"
            await asyncio.sleep(0.5)
        assert finished == RUNS, h.describe()[:3000]
        runs = h.store.list_runs(h.project.id)
        assert {r.status for r in runs} == {"done"}
        lines = Counter(ledger.read_text().split())
        assert len(lines) == RUNS
        assert set(lines.values()) == {1}, "some job ran twice"
        for run in runs:
            jobs = h.store.list_jobs(run.id)
            assert len(jobs) == 1
        owners = {(e.message) for e in h.store.list_events(project_id=h.project.id, limit=10_000)}
        assert owners
        instance = h.store.get(Instance, h.instance.id)
        assert instance is not None and instance.busy_blocks == 0
        assert h.store.get(Run, runs[0].id) is not None
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            await asyncio.wait_for(proc.wait(), 30)
        await close_harness(h)
        stop_agent_env(env)
