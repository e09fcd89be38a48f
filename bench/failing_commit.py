"""A failing commit fetched again and again: what it costs the database, as JSON on stdout.

Runs the whole runtime in-process (`build_controller`: every worker, the periodic fetch,
SQLite in a temp dir) against a git repo whose one commit holds N invalid configs
(default 20,000), fetched every `--interval` seconds (default 5) for `--seconds` (default
120). Goal: the database grows by under 5 MB over the run. Prints the database's bytes
(file + WAL) at start, after the first reconcile and at the end, the reconcile rows and
their `checked.count`, the events, the SQL statements run, and how long the first pass
(parsing every config) took.

    .venv/bin/python bench/failing_commit.py [--configs 20000] [--interval 5] [--seconds 120]

Before "a failing commit is recorded once", every interval stored a new reconcile row
with the whole plan (every error) and an event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select

from agent.local import stop_local_agent
from bench.reconcile import SQLCounter, load_average
from reconciler.adapters.db.models import Event, Reconcile
from reconciler.adapters.db.store import Store
from reconciler.engine.controller import build_controller
from reconciler.settings import Settings

INVALID = "type: task\nname: bad-{i}\ncomands: [echo {i}]\n"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)


def db_bytes(store: Store, path: Path) -> dict[str, int]:
    """The database file and its WAL as found, then the file once the WAL is checkpointed
    into it (`checkpointed`: what the data takes; the WAL is reused, bounded by SQLite's
    auto-checkpoint)."""
    wal = path.with_name(path.name + "-wal")
    found = {"file": path.stat().st_size, "wal": wal.stat().st_size if wal.exists() else 0}
    with store.engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    return found | {"checkpointed": path.stat().st_size}


def reconciles(store: Store) -> list[tuple[str, Any]]:
    with store.reading() as session:
        return [(r.status, r.outcome) for r in session.scalars(select(Reconcile))]


def events(store: Store) -> int:
    with store.reading() as session:
        return int(session.scalar(select(func.count()).select_from(Event)) or 0)


async def wait(condition: Any, *, within: float) -> None:
    deadline = time.monotonic() + within
    while not await asyncio.to_thread(condition):
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.2)


async def main(configs: int, interval: float, seconds: float) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="dockyard-bench-") as tmp:
        root = Path(tmp)
        repo = root / "repo"
        (repo / "jobs").mkdir(parents=True)
        git(repo, "init", "-q", "-b", "main")
        git(repo, "config", "user.email", "bench@localhost")
        git(repo, "config", "user.name", "bench")
        for i in range(configs):
            (repo / "jobs" / f"bad{i:05}.dstack.yml").write_text(INVALID.format(i=i))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"{configs} invalid configs")
        settings = Settings(
            repo=str(repo),
            data_dir=root / "data",
            fetch_interval=interval,
            cli_config=root / "c",
            local_job_isolation="process",
        )
        path = root / "dockyard.db"
        store = Store.from_url(f"sqlite:///{path}", migrate=True)
        counter = SQLCounter(store.engine)
        controller = build_controller(settings, store)
        start_bytes = db_bytes(store, path)
        started = time.monotonic()
        await controller.start()  # queues the startup reconcile
        try:
            await wait(lambda: any(s == "failed" for s, _ in reconciles(store)), within=900)
            first_pass = time.monotonic() - started
            first_bytes = db_bytes(store, path)
            statements_first = counter.snapshot()[0]
            await asyncio.sleep(seconds)  # the load itself: timer passes every `interval`
            rows = reconciles(store)
            end_bytes = db_bytes(store, path)
            statements = counter.snapshot()[0] - statements_first
            event_count = events(store)
        finally:
            await controller.stop()
            stop_local_agent(root / "data")
            store.close()
    checks = [int(((o or {}).get("checked") or {}).get("count") or 1) for _, o in rows]
    return {
        "bench": "failing_commit",
        "machine": {"cpus": os.cpu_count()},
        "configs": configs,
        "interval_s": interval,
        "seconds": seconds,
        "first_pass_s": round(first_pass, 1),
        "db_bytes": {"start": start_bytes, "after_first": first_bytes, "end": end_bytes},
        "growth_bytes": end_bytes["checkpointed"] - start_bytes["checkpointed"],
        "growth_after_first_bytes": end_bytes["checkpointed"] - first_bytes["checkpointed"],
        "goal_growth_bytes": 5 * 1000 * 1000,
        "reconcile_rows": len(rows),
        "reconcile_statuses": sorted({s for s, _ in rows}),
        "passes_counted": sum(checks),
        "events": event_count,
        "statements_after_first": statements,
        "load_average": load_average(),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=20000)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.configs, args.interval, args.seconds)), indent=2))
