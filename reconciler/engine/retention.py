"""The retention sweep: deletes old history, job logs and uploaded archives in the background.

`RetentionSweeper.run()` wakes every minute (at most every `retention_interval`) and takes the
`retention` maintenance row with a lease (`store.maintenance`), so with several replicas one
at a time sweeps. A pass deletes in transactions of `retention_batch` rows, at most
`MAX_BATCHES` per kind, renewing its lease between batches; when a kind had more, the next
pass comes in a few seconds instead of an interval. What the rules keep is in
`reconciler.adapters.db.retention` and docs/operations.md. Started and stopped by the
controller; tests call `sweep_once()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from reconciler.adapters.blobs import BlobStore
from reconciler.adapters.db.retention import Keep, RetentionStore
from reconciler.adapters.db.store import Store
from reconciler.engine.joblogs import TAIL_SUFFIX
from reconciler.settings import Settings

log = logging.getLogger(__name__)

TASK = "retention"
LEASE_SECONDS = 300.0
MAX_BATCHES = 20
AGAIN_SOON = 5.0
POLL_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """The retention settings, as the sweep uses them."""

    events: Keep
    reconciles: Keep
    runs: Keep
    deliveries: Keep
    archives: Keep
    job_log_retention: float
    batch: int
    interval: float

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionPolicy:
        def keep(age: float, count: int) -> Keep:
            return Keep(timedelta(seconds=age), count)

        return cls(
            events=keep(settings.events_max_age, settings.events_max_count),
            reconciles=keep(settings.reconciles_max_age, settings.reconciles_max_count),
            runs=keep(settings.runs_max_age, settings.runs_max_count),
            deliveries=keep(settings.deliveries_max_age, settings.deliveries_max_count),
            archives=keep(settings.archives_max_age, settings.archives_max_count),
            job_log_retention=settings.job_log_retention,
            batch=settings.retention_batch,
            interval=settings.retention_interval,
        )


class RetentionSweeper:
    """See the module docstring."""

    def __init__(self, store: Store, data_dir: Path, policy: RetentionPolicy, owner: str) -> None:
        self.store = RetentionStore(store.engine, clock=store.clock)
        self.maintenance = store.maintenance
        self.data_dir = data_dir
        self.policy = policy
        self.owner = f"{owner}/{TASK}"
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def sweep_once(self) -> dict[str, int] | None:
        """One pass if the task is due and no other replica holds it: counts deleted."""
        self.store.ensure_maintenance(TASK)
        leases = self.maintenance
        token = leases.claim(TASK, owner=self.owner, lease_seconds=LEASE_SECONDS)
        if token is None:
            return None
        counts: dict[str, int] = {}
        try:
            counts = self._sweep(lambda: leases.renew(TASK, token, lease_seconds=LEASE_SECONDS))
        finally:
            full = MAX_BATCHES * self.policy.batch
            again = AGAIN_SOON if any(n >= full for n in counts.values()) else self.policy.interval
            leases.release(TASK, token, due_in=again, last_result=counts)
        if any(counts.values()):
            log.info("retention sweep deleted %s", counts)
        return counts

    def _sweep(self, renew: Callable[[], bool]) -> dict[str, int]:
        p, store = self.policy, self.store
        steps: dict[str, Callable[[], int]] = {
            "events": lambda: store.prune_events(p.events, p.batch),
            "reconciles": lambda: store.prune_reconciles(p.reconciles, p.batch),
            "deliveries": lambda: store.prune_deliveries(p.deliveries, p.batch),
            "runs": lambda: store.prune_runs(p.runs, p.batch),
        }
        counts: dict[str, int] = {}
        for kind, step in steps.items():
            counts[kind] = 0
            for _ in range(MAX_BATCHES):
                deleted = step()
                counts[kind] += deleted
                if deleted < p.batch or not renew():
                    break
        counts["job_logs"] = self._prune_logs(MAX_BATCHES * p.batch)
        counts["archives"] = BlobStore(self.data_dir / "files").prune(
            store.archives_in_use(),
            now=store.clock.now_ts(),
            max_age=p.archives.max_age.total_seconds(),
            max_count=p.archives.max_count,
            limit=MAX_BATCHES * p.batch,
        )
        return counts

    def _old_logs(self, cutoff: float) -> Iterator[tuple[str, list[Path]]]:
        """(job id, its files) of the job logs nothing wrote to since `cutoff`."""
        for run_dir in (self.data_dir / "projects").glob("*/logs/*"):
            files: dict[str, list[Path]] = {}
            for path in run_dir.iterdir():
                if path.suffix not in (".log", TAIL_SUFFIX):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if path.stat().st_mtime < cutoff:
                        files.setdefault(path.stem, []).append(path)
            yield from files.items()

    def _prune_logs(self, limit: int) -> int:
        now = self.store.clock.now_ts()
        cutoff = now - self.policy.job_log_retention
        ended_before = self.store.now() - timedelta(seconds=self.policy.job_log_retention)
        deleted = 0
        pending: dict[str, list[Path]] = {}
        for job_id, paths in self._old_logs(cutoff):
            pending[job_id] = paths
            if len(pending) >= self.policy.batch:
                deleted += self._delete_logs(pending, ended_before)
                pending = {}
                if deleted >= limit:
                    return deleted
        return deleted + self._delete_logs(pending, ended_before)

    def _delete_logs(self, pending: dict[str, list[Path]], ended_before: datetime) -> int:
        gone = self.store.finished_log_jobs(pending, ended_before)
        for job_id in gone:
            for path in pending[job_id]:
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # the run's folder, once empty
                os.rmdir(pending[job_id][0].parent)
        return len(gone)

    # -- the background loop ----------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self.run(), name="retention-sweep")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.to_thread(self.sweep_once)
            except Exception:  # the outermost loop of the sweep: log, try again later
                log.exception("retention sweep failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), min(POLL_SECONDS, self.policy.interval))
