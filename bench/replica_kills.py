"""Exactly-once under replica kills: two worker replicas on one PostgreSQL database run
200 tasks while one of them is SIGKILLed every few seconds of its working life and
started again; prints JSON.

Each replica is `tests/e2e/worker_process.py` (the real runs and jobs workers, real leases,
following the agent's job events), the local agent runs the tasks (each appends its name
to a ledger file). Figures: seconds to all `done`, kills, and the exactness checks — every
task's output in the ledger exactly once (`duplicates`, `missing` must be 0), one job per
run, no blocks left taken. A bench, not a test: on the shared 2-CPU dev VM a replica
needs up to 30 s just to import under load, so the run takes minutes, not the ~60 s a
test may take. Needs PostgreSQL binaries (as the tests find them).

    .venv/bin/python bench/replica_kills.py [--tasks 200] [--kill-every 8] [--lease 15]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reconciler.adapters.db.models import Instance
from tests.e2e.runs_harness import close_harness, make_harness, start_agent_env, stop_agent_env
from tests.services.postgres import find_postgres_bin, start_postgres

ROOT = Path(__file__).resolve().parent.parent
Replica = tuple[asyncio.subprocess.Process, Path]


async def replica(url: str, data_dir: Path, key: Path, owner: str, lease: float) -> Replica:
    ready = data_dir / f"ready-{owner}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "tests.e2e.worker_process", "--db", url, "--data-dir", str(data_dir)),
        *("--key", str(key), "--owner", owner, "--lease-seconds", str(lease)),
        *("--ready", str(ready)),
        cwd=ROOT,
    )
    return proc, ready


async def run(url: str, tmp: Path, tasks: int, kill_every: float, lease: float) -> dict[str, Any]:
    env = await start_agent_env(tmp / "agent")
    h = await make_harness(tmp, env, url, total_blocks=32)
    ledger = tmp / "ledger"
    replicas: dict[str, Replica] = {}
    working_since: dict[str, float] = {}
    kills, finished = 0, 0
    started = time.monotonic()
    try:
        for n in range(tasks):
            h.submit(f"type: task\nname: t{n:03d}\ncommands: ['echo t{n:03d} >> {ledger}']\n")
        for name in ("a", "b"):
            replicas[name] = await replica(url, h.data_dir, env.key, f"replica-{name}-0", lease)
        victims = itertools.cycle(("a", "b"))
        victim = next(victims)
        while time.monotonic() - started < 3600:
            runs = h.store.list_runs(h.project.id)
            finished = sum(r.status in ("done", "failed") for r in runs)
            if finished == tasks:
                break
            now = time.monotonic()
            for name, (_, ready) in replicas.items():
                if name not in working_since and ready.exists():
                    working_since[name] = now
            if now - working_since.get(victim, now) >= kill_every:
                proc, _ = replicas[victim]  # SIGKILL it mid-work, start it again
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
                kills += 1
                owner = f"replica-{victim}-{kills}"
                replicas[victim] = await replica(url, h.data_dir, env.key, owner, lease)
                working_since.pop(victim)
                victim = next(victims)
            await asyncio.sleep(0.2)
        seconds = time.monotonic() - started
        runs = h.store.list_runs(h.project.id)
        lines = Counter(ledger.read_text().split()) if ledger.exists() else Counter()
        expected = {f"t{n:03d}" for n in range(tasks)}
        instance = h.store.get(Instance, h.instance.id)
        return {
            "bench": "replica_kills",
            "tasks": tasks,
            "kill_every_seconds": kill_every,
            "lease_seconds": lease,
            "kills": kills,
            "seconds": round(seconds, 1),
            "done": sum(r.status == "done" for r in runs),
            "duplicates": sum(1 for count in lines.values() if count > 1),
            "missing": len(expected - set(lines)),
            "runs_with_more_than_one_job": sum(len(h.store.list_jobs(r.id)) != 1 for r in runs),
            "blocks_left_taken": instance.busy_blocks if instance else None,
        }
    finally:
        for proc, _ in replicas.values():
            if proc.returncode is None:
                proc.terminate()
        for proc, _ in replicas.values():
            await asyncio.wait_for(proc.wait(), 30)
        await close_harness(h)
        stop_agent_env(env)


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--kill-every", type=float, default=8.0)
    parser.add_argument("--lease", type=float, default=15.0)
    args = parser.parse_args()
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        parser.error("no PostgreSQL binaries found (initdb, pg_ctl)")
    with start_postgres(bin_dir) as server, tempfile.TemporaryDirectory() as tmp:
        url = server.create_database()
        return asyncio.run(run(url, Path(tmp), args.tasks, args.kill_every, args.lease))


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
