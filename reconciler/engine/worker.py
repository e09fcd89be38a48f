"""The generic background worker: one per resource kind, rows taken with a lease.

A `Worker` is dstack's pipeline (fetcher + workers + heartbeater) in one small object:

- *fetch*: `Leasing.claim_due` takes up to N due rows of its kind and stamps a lease
  (`lock_token`, `lock_expires_at`, `lock_owner`) in one short transaction — `SELECT …
  FOR UPDATE SKIP LOCKED` on PostgreSQL, an in-process lock on SQLite (the store's job);
- *prepare* (optional): a callback with a `prepare(leases)` coroutine gets the claimed
  batch first, to read every row of it in one read (one thread hop per batch, not per
  row: the jobs worker's `Store.load_job_batch`);
- *process*: the kind's callback `process(row_id, lock_token)` runs for each row, outside
  any DB transaction; it reloads the row by id and token (or takes what `prepare` read),
  does the slow I/O, and writes its results fenced by the token (a write whose token no
  longer matches changes nothing);
- *release*: the worker drops the lease and says when the row is due again — the
  callback's answer (seconds), or the kind's `min_interval`; a callback whose last write
  dropped the lease itself (one transaction) answers `RELEASED`;
- *heartbeat*: leases of rows still being processed are renewed every third of the lease,
  so a slow row is never taken by another replica while it is in hand.

When nothing is due the loop sleeps until the earliest row becomes due (`next_due`) or a
`hint()` wakes it — an API write, a webhook, an agent's job event, a row of another kind
that changed — so no row waits for a poll. The sleep is capped (`idle_cap`) because writes
by other replicas are not hinted here; after a sleep that ran to the cap the loop claims
only if `next_due` says a row is due (an idle worker costs one query per cap); with every
slot busy it waits for a row to finish.
`process_once()` and `heartbeat_once()` are the steps the loop repeats; tests drive those,
not the loop.

The row callback is the outermost frame for one row: an unexpected exception is logged
with its traceback, the lease is released with `error_delay`, and the loop goes on. A row
that keeps failing so is tried again after twice the last delay, up to `max_error_delay`
(its traceback logged once per streak, then one line each time; `on_error` is told at the
streak's first failure and when the delay reaches its cap), not every `error_delay` for
ever. Callbacks map the errors they expect through `reconciler.engine.outcomes` themselves.

The store may refuse writes for a while (a full disk, a lost connection: the `store_failure`
predicate the worker is given says which errors are that). A row whose step failed so is
due again after a short back-off (`STORE_RETRY_SECONDS`, by the worker's streak of such
failures), not `error_delay`: it finishes within seconds of the store taking writes again.
A release the store refused is retried with that back-off until it is done (the row then
due at once: what its step wrote may not all be recorded), so no row stays leased and no
task of the worker dies with the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from reconciler.ports import WorkKind

log = logging.getLogger(__name__)

ProcessResult = float | None
"""What a callback returns: seconds until the row is due again, `None` for the default, or
`RELEASED`."""
RELEASED = -1.0
"""A callback's answer when its last write also dropped the lease (and set when the row is
due again) in the same transaction: the worker releases nothing."""

Process = Callable[[str, str], Awaitable[ProcessResult]]
"""`process(row_id, lock_token)`: handle one leased row; see the module docstring."""

STORE_RETRY_SECONDS = (0.25, 0.5, 1.0, 2.0, 4.0)
"""Back-off while the store refuses writes (the last step repeats): a step's row is due
again after it, a refused release is tried again after it."""

ErrorNote = Callable[["Lease", str], Awaitable[None]]
"""`on_error(lease, message)`: a row's step failed (not the store refusing it): the first
time in a row, and again when its retry delay reaches `max_error_delay` (e.g. an event)."""

KEPT_STREAKS = 10_000
"""Rows whose failures in a row a worker counts at most (the oldest forgotten first)."""

Prepare = Callable[[Sequence["Lease"]], Awaitable[None]]
"""`prepare(leases)`: read a claimed batch's rows at once (the callback's `prepare`)."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A row of `kind` held by this worker until `token` is released or expires."""

    kind: WorkKind
    row_id: str
    token: str


class Leasing(Protocol):
    """The store's leasing, as the worker needs it (implemented by the DB adapter)."""

    async def claim_due(
        self,
        kind: WorkKind,
        *,
        owner: str,
        limit: int,
        lease_seconds: float,
    ) -> Sequence[Lease]:
        """Lease up to `limit` due, unleased (or lease-expired) rows of `kind`."""

    async def renew(self, leases: Sequence[Lease], *, lease_seconds: float) -> set[str]:
        """Extend the leases; return the tokens still held (others were lost)."""

    async def release(self, lease: Lease, *, due_in: float) -> None:
        """Drop the lease (only if still held) and make the row due in `due_in` seconds."""

    async def next_due(self, kind: WorkKind) -> float | None:
        """Seconds until the earliest row of `kind` can be claimed; None if there is none."""


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How one kind is worked: batch size, lease length, intervals (dstack's pipeline settings)."""

    kind: WorkKind
    concurrency: int = 10
    lease_seconds: float = 30.0
    min_interval: float = 5.0
    error_delay: float = 15.0
    max_error_delay: float = 300.0
    """A row failing in a row waits `error_delay`, then twice as long each time, up to this."""
    idle_cap: float = 5.0
    """The longest idle sleep (other replicas' writes do not hint this worker)."""
    idle_floor: float = 0.05
    """The shortest: rows due but claimed elsewhere meanwhile must not make the loop spin."""
    stop_grace: float = 10.0

    @property
    def heartbeat_every(self) -> float:
        return self.lease_seconds / 3


class Worker:
    """Claims, processes and releases rows of one kind; see the module docstring."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        leasing: Leasing,
        process: Process,
        owner: str | None = None,
        store_failure: Callable[[BaseException], bool] | None = None,
        on_error: ErrorNote | None = None,
    ) -> None:
        self.config = config
        self._store_failure = store_failure or _never
        self._store_streak = 0  # steps failed in a row because the store refused them
        self._on_error = on_error
        self._failures: dict[str, int] = {}  # row -> its steps failed in a row (not refused)
        self.owner = owner or f"{config.kind}-{uuid.uuid4().hex[:12]}"
        self._leasing = leasing
        self._process = process
        prepare = getattr(process, "prepare", None)
        self._prepare: Prepare | None = prepare if callable(prepare) else None
        self._held: dict[str, Lease] = {}
        self._in_flight: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False
        self.idle = asyncio.Event()
        """Set once the loop has found nothing due and nothing in hand (caught up)."""

    @property
    def kind(self) -> WorkKind:
        return self.config.kind

    @property
    def held(self) -> tuple[Lease, ...]:
        """The leases this worker holds right now (rows being processed)."""
        return tuple(self._held.values())

    def hint(self) -> None:
        """Wake the fetch loop now (an API write or a webhook has made work due)."""
        self._wake.set()

    # -- the steps ---------------------------------------------------------------------

    async def claim(self, limit: int | None = None) -> Sequence[Lease]:
        """Lease up to `limit` (default: the free slots) due rows of this kind (and hand
        them to the callback's `prepare`)."""
        free = self.config.concurrency - len(self._in_flight) if limit is None else limit
        if free <= 0:
            return ()
        leases = await self._leasing.claim_due(
            self.kind, owner=self.owner, limit=free, lease_seconds=self.config.lease_seconds
        )
        for lease in leases:
            self._held[lease.token] = lease
        if leases and self._prepare is not None:
            try:
                await self._prepare(leases)
            except Exception:  # each row then reads its own: nothing is lost but time
                log.exception("%s: reading the claimed batch failed", self.kind)
        return leases

    async def process_once(self, limit: int | None = None) -> int:
        """Claim due rows, process them all concurrently, release; return how many."""
        leases = await self.claim(limit)
        await asyncio.gather(*(self._process_one(lease) for lease in leases))
        return len(leases)

    async def heartbeat_once(self) -> None:
        """Renew the held leases; forget those another holder has taken (expired)."""
        leases = self.held
        if not leases:
            return
        kept = await self._leasing.renew(leases, lease_seconds=self.config.lease_seconds)
        for lease in leases:
            if lease.token not in kept and self._held.pop(lease.token, None) is not None:
                # Taken by another holder (expired), or dropped by the step's own last write
                # just before it returned `RELEASED` (e.g. a finished job being removed).
                log.info("%s %s: lease no longer held while processing", self.kind, lease.row_id)

    async def _process_one(self, lease: Lease) -> None:
        due_in: float = self.config.min_interval
        try:
            answer = await self._process(lease.row_id, lease.token)
            self._store_streak = 0
            self._failures.pop(lease.row_id, None)
            if answer == RELEASED:
                self._held.pop(lease.token, None)
                return
            if answer is not None:
                due_in = answer
        except asyncio.CancelledError:
            self._held.pop(lease.token, None)
            raise
        except Exception as exc:  # noqa: BLE001 - the row's outermost frame: logged (`_failed`)
            if self._store_failure(exc):
                due_in = self._store_retry(self._store_streak)
                self._store_streak += 1
                log.warning(
                    "%s %s: the store refused the step (%s); again in %.2f s",
                    self.kind, lease.row_id, _brief(exc), due_in,
                )  # fmt: skip
            else:
                due_in = await self._failed(lease, exc)
        if lease.token in self._held:  # not lost meanwhile (`heartbeat_once`)
            try:
                await self._release(lease, max(0.0, due_in))
            finally:
                self._held.pop(lease.token, None)

    async def _release(self, lease: Lease, due_in: float) -> None:
        """Release the lease, trying again with back-off while the store refuses it (the
        lease stays held meanwhile: renewed by the heartbeat, never taken by another)."""
        attempt = 0
        while True:
            try:
                await self._leasing.release(lease, due_in=due_in)
                return
            except Exception as exc:  # noqa: BLE001 - retried: the row must not stay leased
                delay = self._store_retry(attempt)
                log.warning(
                    "%s %s: releasing its lease failed (%s); again in %.2f s",
                    self.kind, lease.row_id, _brief(exc), delay,
                )  # fmt: skip
            attempt += 1
            due_in = 0.0  # what the step wrote may not all be recorded: look again at once
            await asyncio.sleep(delay)

    async def _failed(self, lease: Lease, exc: Exception) -> float:
        """A step failed for another reason than the store refusing it: the row's retry
        delay (doubling in a row, bounded), logged and told (see the module docstring)."""
        streak = self._failures.pop(lease.row_id, 0)
        self._failures[lease.row_id] = streak + 1  # the newest last: the oldest forgotten
        while len(self._failures) > KEPT_STREAKS:
            del self._failures[next(iter(self._failures))]
        cap = max(self.config.max_error_delay, self.config.error_delay)
        delay = min(self.config.error_delay * 2.0 ** min(streak, 32), cap)
        capped = streak > 0 and delay >= cap > self.config.error_delay * 2.0 ** min(streak - 1, 32)
        if streak == 0:
            log.exception("%s %s: processing failed", self.kind, lease.row_id)
        else:
            log.warning(
                "%s %s: processing failed again (%d in a row: %s); again in %.0f s",
                self.kind, lease.row_id, streak + 1, _brief(exc), delay,
            )  # fmt: skip
        if self._on_error is not None and (streak == 0 or capped):
            times = "failed" if streak == 0 else f"failed {streak + 1} times in a row"
            note = f"{self.kind} step {times} ({_brief(exc)}); tried again in {delay:.0f} s"
            try:
                await self._on_error(lease, note)
            except Exception as note_exc:  # noqa: BLE001 - the note is extra: the row goes on
                log.warning("%s %s: noting the failure failed (%s)", self.kind,
                            lease.row_id, _brief(note_exc))  # fmt: skip
        return delay

    @staticmethod
    def _store_retry(attempt: int) -> float:
        return STORE_RETRY_SECONDS[min(attempt, len(STORE_RETRY_SECONDS) - 1)]

    # -- the loops ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start the fetch loop and the heartbeat; idempotent."""
        if self._loops:
            return
        self._stopping = False
        self._loops = [
            asyncio.create_task(self._fetch_loop(), name=f"worker-{self.kind}-fetch"),
            asyncio.create_task(self._heartbeat_loop(), name=f"worker-{self.kind}-heartbeat"),
        ]

    async def stop(self) -> None:
        """Stop fetching, let rows in hand finish (up to `stop_grace`), cancel the rest."""
        if not self._loops:
            return
        self._stopping = True
        self._wake.set()
        fetch, heartbeat = self._loops
        fetch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await fetch
        if self._in_flight:
            _, pending = await asyncio.wait(set(self._in_flight), timeout=self.config.stop_grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
        self._loops = []

    async def _fetch_loop(self) -> None:
        quiet = False  # the last sleep ran to the idle cap, no hint: look before claiming
        refused = 0  # claims the store refused in a row
        while not self._stopping:
            self._wake.clear()
            try:
                full, delay = await self._fetch(quiet)
                refused = 0
            except Exception as exc:  # the outermost loop: a failed fetch must not end it
                if self._store_failure(exc):
                    delay = min(self.config.idle_cap, self._store_retry(refused))
                    log.warning("%s: claiming due rows failed (%s)", self.kind, _brief(exc))
                    refused += 1
                else:
                    log.exception("%s: claiming due rows failed", self.kind)
                    delay = self.config.idle_cap
                full = False
            quiet = False
            if full:
                continue
            if delay and not self._in_flight:  # nothing due, nothing in hand: caught up
                self.idle.set()
            if delay is None:  # every slot busy: a row that finishes sets the wake
                await self._wake.wait()
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            except TimeoutError:
                quiet = delay >= self.config.idle_cap

    async def _fetch(self, quiet: bool) -> tuple[bool, float | None]:
        """Claim and start the due rows: (whether the claim was full, how long to sleep).

        A claim that got fewer rows than it asked for took every due one: no second claim
        to find none (a write that makes rows due hints the loop). After a sleep that ran
        to the idle cap unhinted, it claims only once a row is due (`next_due`): a worker
        with nothing to do costs one query per cap, not a claim and a query."""
        if quiet and len(self._in_flight) < self.config.concurrency:
            due = await self._leasing.next_due(self.kind)
            if due is None or due > 0:
                return False, self._sleep_for(due)
        full = await self._spawn_due()
        if full:
            return True, None
        if self._wake.is_set():
            # A hint or a finished row came during the claim: the loop claims again at
            # once, so when the next row is due is not asked (a query a claim, at a burst)
            return False, 0.0
        return False, await self._idle_delay()

    async def _idle_delay(self) -> float | None:
        """How long to sleep when the claim found nothing (None: until a row finishes)."""
        if len(self._in_flight) >= self.config.concurrency:
            return None
        return self._sleep_for(await self._leasing.next_due(self.kind))

    def _sleep_for(self, due: float | None) -> float:
        if due is None:
            return self.config.idle_cap
        return min(max(due, self.config.idle_floor), self.config.idle_cap)

    async def _spawn_due(self) -> bool:
        """Claim and start the due rows; whether the claim filled every slot it asked for
        (more may be due)."""
        free = self.config.concurrency - len(self._in_flight)
        leases = await self.claim()
        for lease in leases:
            task = asyncio.create_task(self._process_one(lease))
            self._in_flight.add(task)
            task.add_done_callback(self._on_done)
        return 0 < free <= len(leases)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._wake.set()

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_every)
            try:
                await self.heartbeat_once()
            except Exception as exc:  # the outermost loop: a failed renew is retried next beat
                if self._store_failure(exc):  # the store refusing for a while: no traceback
                    log.warning("%s: renewing leases failed (%s)", self.kind, _brief(exc))
                else:
                    log.exception("%s: renewing leases failed", self.kind)


def _never(exc: BaseException) -> bool:
    return False


def _brief(exc: BaseException) -> str:
    """An error's first line (a database error's text goes on with its SQL)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
