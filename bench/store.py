"""State-store figures on SQLite and PostgreSQL, as JSON on stdout.

    .venv/bin/python bench/store.py [--resources 1000] [--runs 1000] [--repeat 5]

For each database (PostgreSQL only when a throwaway cluster can be started, see
tests/services/postgres.py, or `DOCKYARD_TEST_POSTGRES_URL` is set):

- `record_resource_ms`: mean time of one `Store.record_resource` (insert of a new resource);
- `load_observed_ms`: best of `--repeat` `Store.load_observed` over all resources (what
  `dockyard plan` and every reconcile read before planning);
- `claims_per_s`: rows leased per second by one claimer taking 10 at a time
  (`Leases.claim_due`), and `claims_per_s_2_threads` with two claimers at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from reconciler.adapters.db import Store  # noqa: E402
from reconciler.adapters.db.models import Run  # noqa: E402
from tests.services.postgres import (  # noqa: E402
    ENV_URL,
    PostgresServer,
    find_postgres_bin,
    postgres_unavailable_reason,
    start_postgres,
)

KINDS = ("task", "service", "dev-environment", "fleet", "volume", "gateway")


def _record(store: Store, count: int) -> float:
    start = time.perf_counter()
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        store.record_resource(
            "main",
            kind,
            f"r{i}",
            origin=f"git:r{i}.dstack.yml@c0",
            path=f"r{i}.dstack.yml",
            commit="c0",
            spec={"type": kind, "name": f"r{i}", "commands": ["python train.py"] * 5},
            spec_hash=f"h{i}",
            status="running",
        )
    return (time.perf_counter() - start) / count * 1000


def _load(store: Store, repeat: int, expected: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        observed = store.load_observed("main")
        best = min(best, time.perf_counter() - start)
        assert len(observed.resources) == expected
    return best * 1000


def _add_runs(store: Store, count: int) -> None:
    project = store.get_or_create_project("main")
    store.add_all(
        [
            Run(
                project_id=project.id,
                run_name=f"run{i}",
                run_type="task",
                spec={},
                spec_hash="h",
                status="submitted",
                submitted_at=store.now(),
            )
            for i in range(count)
        ]
    )


def _claim_all(store: Store, claimers: int) -> tuple[int, float]:
    counts = [0] * claimers

    def claim(slot: int) -> None:
        while batch := store.leases.claim_due(Run, owner=f"b{slot}", limit=10, lease_seconds=600):
            counts[slot] += len(batch)

    start = time.perf_counter()
    threads = [threading.Thread(target=claim, args=(i,)) for i in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts), time.perf_counter() - start


def bench(url: str, *, resources: int, runs: int, repeat: int) -> dict[str, Any]:
    store = Store.from_url(url, migrate=True)
    try:
        record_ms = _record(store, resources)
        load_ms = _load(store, repeat, resources)
        _add_runs(store, runs)
        claimed, seconds = _claim_all(store, 1)
        _add_runs(store, runs)
        claimed2, seconds2 = _claim_all(store, 2)
    finally:
        store.close()
    assert claimed == runs and claimed2 == runs
    return {
        "resources": resources,
        "record_resource_ms": round(record_ms, 2),
        "load_observed_ms": round(load_ms, 1),
        "runs": runs,
        "claims_per_s": round(claimed / seconds),
        "claims_per_s_2_threads": round(claimed2 / seconds2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = {"resources": args.resources, "runs": args.runs, "repeat": args.repeat}
    figures: dict[str, Any] = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        figures["sqlite"] = bench(f"sqlite:///{tmp}/bench.db", **sizes)
        reason = postgres_unavailable_reason()
        if reason is not None:
            figures["postgres"] = {"skipped": reason}
        else:
            existing, bin_dir = os.environ.get(ENV_URL), find_postgres_bin()
            if existing:
                server = PostgresServer(existing)
            else:
                assert bin_dir is not None
                server = stack.enter_context(start_postgres(bin_dir))
            figures["postgres"] = bench(server.create_database(), **sizes)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
