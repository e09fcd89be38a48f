"""A stand-alone runs+jobs worker process, for the two-replica exactly-once test.

`python -m tests.e2e.worker_process --db URL --data-dir DIR --key KEY --owner NAME` runs
the real runs and jobs workers (real leases) against the shared database until killed;
each process is one "server replica" as far as the workers are concerned. Like the server,
it follows the agents' job events (`JobEventFollower`); `--lease-seconds` shortens the
leases so a replica killed mid-step hands its rows over sooner.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
from pathlib import Path

from agent.tunnel import TunnelPool
from reconciler.adapters.db.store import Store
from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.jobevents import JobEventFollower
from reconciler.engine.worker import Lease, Worker
from reconciler.engine.workers import WorkerDeps
from reconciler.engine.workers import jobs as jobs_worker
from reconciler.engine.workers import runs as runs_worker


async def main(args: argparse.Namespace) -> None:
    store = Store.from_url(args.db)
    pool = TunnelPool()
    agents = AgentDirectory(pool, identity_file=args.key)
    workers: dict[str, Worker] = {}

    def hint(kind: str) -> None:
        if kind in workers:
            workers[kind].hint()

    deps = WorkerDeps(
        store=store, clock=store.clock, hint=hint, agents=agents, data_dir=Path(args.data_dir)
    )
    leasing: StoreLeasing[Lease] = StoreLeasing(store.leases, make_lease=Lease)
    events = JobEventFollower(leasing, hint, states=store)
    agents.on_client = events.follow
    agents.following = events.following
    lease = {"lease_seconds": args.lease_seconds}
    workers["runs"] = Worker(
        dataclasses.replace(runs_worker.CONFIG, **lease),
        leasing=leasing,
        process=runs_worker.make_process(deps),
        owner=f"{args.owner}-runs",
    )
    workers["jobs"] = Worker(
        dataclasses.replace(jobs_worker.CONFIG, **lease),
        leasing=leasing,
        process=jobs_worker.make_process(deps),
        owner=f"{args.owner}-jobs",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    for worker in workers.values():
        await worker.start()
    if args.ready:  # bench/replica_kills.py kills a replica only once it works
        await asyncio.to_thread(Path(args.ready).touch)
    await stop.wait()
    for worker in workers.values():
        await worker.stop()
    await events.aclose()
    await agents.aclose()
    await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--lease-seconds", type=float, default=30.0)
    parser.add_argument("--ready", default="", help="a file to create once the workers run")
    asyncio.run(main(parser.parse_args()))
