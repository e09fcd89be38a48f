"""Placement of a submitted job: choose an instance, take its capacity, or say why it waits.

`JobPlacer.submitted` is called by the jobs worker (`jobs.JobsProcessor.process`) for a job
in `submitted`. It reads the candidates, decides with the pure `scheduling` (where it fits,
or how much room it asks for) and `elastic` (a fleet to grow, hosts coming), and either
writes the placement through the worker's `write` (capacity and the fenced job write in one
transaction: `Store.place_job`) or answers the waiting update: busy capacity (with its room
ask, and a wake passed down the line when some instance has room it cannot use), a fleet
to grow, or `failed_to_start_due_to_no_capacity`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from reconciler.adapters.db.jobsteps import ParkLike, Take, WaitPlace
from reconciler.adapters.db.store import Store
from reconciler.core.elastic import Growth, choose_growth, failure_message, hosts_coming
from reconciler.core.jobspecs import JobSlot, requirements_of
from reconciler.core.scheduling import (
    Candidate,
    NoFit,
    Placement,
    Requirements,
    free_blocks,
    place_cluster,
    place_job,
    place_key,
    room_ask,
    wait_rank,
)
from reconciler.domain.statuses import JobStatus, JobTerminationReason
from reconciler.engine.workers.growing import AWAITING_FLEET, NODES_NEEDED, elastic_fleets
from reconciler.engine.workers.job_context import (
    PARK_LIKE,
    PASS_WAKE,
    TAKE,
    WAKE_FLEET,
    JobContext,
    JobsConfig,
    Update,
    finish,
)

NO_ROOM_FOR = 1.0
"""Seconds a batch trusts that jobs like one that found no room find none either."""
SUBMIT_GATHER = 0.05
"""Seconds at most a placed job's submit waits for the placements under way (`settled`)."""
Waits = tuple[str, int | None]
"""Why a job waits for busy capacity, and its room ask (`scheduling.room_ask`)."""
PlacementWrite = Callable[[JobContext, str, Update], JobContext | None]
"""`write(ctx, token, update)`: the placement written with its capacity (the placed job as
written, or None if nothing was)."""


class JobPlacer:
    """Places submitted jobs, one at a time (a lock: two placements never race for the
    same room in one process; the store's conditional take covers other replicas)."""

    def __init__(self, *, store: Store, config: JobsConfig, write: PlacementWrite) -> None:
        self.store = store
        self.config = config
        self._write = write
        self._placing = asyncio.Lock()
        self._under_way = 0  # placements started and not ended (waiting for the lock too)
        self._settled = asyncio.Event()
        self._settled.set()
        self._no_room: dict[tuple[str, str, int], tuple[Waits, float]] = {}
        """(project, requirements, nodes) -> (why it waits, until when): what the last job
        of a claimed batch that found no room learned, so the others like it need not read
        the candidates again (`_place`). Dropped with each new batch and each release."""

    async def settled(self, most: float = SUBMIT_GATHER) -> None:
        """Return once no placement is under way (at most `most` seconds): the jobs of a
        claimed batch are placed one after the other, and their submits wait for this to
        go to their agent in one call (`JobSubmits`) instead of one call each."""
        if not self._settled.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), timeout=most)

    def forget(self) -> None:
        """A new batch, or blocks given back: what jobs learned of the room no longer holds."""
        self._no_room = {}

    async def submitted(
        self, ctx: JobContext, token: str, *, batched: bool = False
    ) -> tuple[Update, float | None, JobContext | None]:
        """The update and due time of a job that stays unplaced, or the placed job."""
        if ctx.job.instance_id is not None:  # placed with its cluster's master
            return {"status": JobStatus.PROVISIONING.value}, 0.0, None
        slot = ctx.slot
        if slot.nodes > 1 and slot.job_num > 0:
            message = "waiting for the master node to be placed"
            return {"status_message": message}, self.config.wait_poll, None
        self._under_way += 1
        self._settled.clear()
        try:
            async with self._placing:
                update, due = await self.store.in_lane(self._place, ctx, slot, batched)
                if TAKE not in update:
                    return update, due, None
                # Capacity and the fenced job write in one transaction: an instance filled
                # meanwhile or a lost lease writes nothing (placed again at once or never).
                placed = await self.store.in_lane(self._write, ctx, token, update)
                return {}, due, placed
        finally:
            self._under_way -= 1
            if not self._under_way:
                self._settled.set()

    def _place(
        self, ctx: JobContext, slot: JobSlot, batched: bool = False
    ) -> tuple[Update, float | None]:
        req = requirements_of(slot.spec)
        key = (ctx.project.id, repr(req), slot.nodes)
        known = self._no_room.get(key) if batched else None
        if known is not None and known[1] > time.monotonic():
            # A job like it of this batch found no room just now. Safe to trust: a release
            # meanwhile wakes the first waiting jobs, leased ones too (they run again).
            return self._waiting(ctx, *known[0]), self.config.wait_backoff
        candidates = self.store.placement_candidates(ctx.project.id, ports=bool(req.host_ports))
        if slot.nodes > 1:
            result = place_cluster(req, slot.nodes, candidates)
        else:
            single = place_job(req, candidates)
            result = single if isinstance(single, NoFit) else (single,)
        if isinstance(result, NoFit):
            update, due, waits = self._no_fit(ctx, req, slot.nodes, result, candidates)
            if waits is not None and batched:  # the batch's next jobs like it need not read
                self._no_room[key] = (waits, time.monotonic() + NO_ROOM_FOR)
            return update, due
        return self._placed(ctx, slot, result), 0.0

    def _placed(self, ctx: JobContext, slot: JobSlot, result: tuple[Placement, ...]) -> Update:
        """The update placing the job (and its cluster siblings, rank by rank)."""
        takes = [Take(result[0].instance_id, result[0].blocks)]
        if slot.nodes <= 1:  # no siblings to read
            return self._placing_update(ctx, result[0], takes)
        siblings = [j for j in self.store.run_job_records(ctx.run.id) if j.status == "submitted"]
        for placement, rank in zip(result[1:], range(1, slot.nodes), strict=False):
            sibling = next(
                (
                    j.id
                    for j in siblings
                    if j.job_num == rank and j.replica_num == ctx.job.replica_num
                ),
                None,
            )
            runtime = {"gpus": list(placement.gpus), "blocks": placement.blocks}
            takes.append(Take(placement.instance_id, placement.blocks, sibling, runtime))
        return self._placing_update(ctx, result[0], takes)

    @staticmethod
    def _placing_update(ctx: JobContext, master: Placement, takes: list[Take]) -> Update:
        runtime = _not_awaiting(ctx.runtime) | {"gpus": list(master.gpus), "blocks": master.blocks}
        return {
            "status": JobStatus.PROVISIONING.value,
            "instance_id": master.instance_id,
            "runtime": runtime,
            "status_message": f"placed on {master.instance_name}",
            TAKE: tuple(takes),
        }

    def _no_fit(
        self,
        ctx: JobContext,
        req: Requirements,
        nodes: int,
        no_fit: NoFit,
        candidates: list[Candidate],
    ) -> tuple[Update, float | None, Waits | None]:
        """No instance now: wait for a fleet to grow, wait for busy capacity, or fail
        (dstack's `failed_to_start_due_to_no_capacity`, saying why no fleet can grow);
        with why and its room ask when it waits for busy capacity."""
        fleets = elastic_fleets(self.store, ctx.project.id, candidates, job_id=ctx.job.id)
        growth = choose_growth(req, nodes, fleets, current=ctx.runtime.get(AWAITING_FLEET))
        if isinstance(growth, Growth):
            demand = {AWAITING_FLEET: growth.fleet_id, NODES_NEEDED: growth.nodes}
            runtime = ctx.runtime | demand
            update: Update = {"status_message": growth.message, "runtime": runtime}
            if growth.grows or runtime != ctx.runtime:
                update[WAKE_FLEET] = growth.fleet_id
            return self._changed(ctx, update), self.config.wait_backoff, None
        coming = None if no_fit.wait else hosts_coming(req, fleets)
        if no_fit.wait or coming is not None:
            busy = coming is None  # only busy capacity is worth remembering for the batch
            waits = (coming or no_fit.message, room_ask(req, candidates) if nodes == 1 else None)
            update = self._waiting(ctx, *waits)
            if free_blocks(candidates) > 0:  # room it cannot use: a job behind may fit
                place = (wait_rank(ctx.run.run_type), ctx.job.submitted_at, ctx.job.id)
                update[PASS_WAKE] = WaitPlace(*place)
            elif busy and nodes == 1 and update:  # no room anywhere: new jobs like it wait too
                key = place_key(req, nodes)
                update[PARK_LIKE] = ParkLike(key, *waits, self.config.wait_backoff)
            return update, self.config.wait_backoff, waits if busy else None
        reason = JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY
        message = failure_message(no_fit.message, growth)
        ended = finish(reason, self.store.now(), message, runtime=_not_awaiting(ctx.runtime))
        return ended, None, None

    def _waiting(self, ctx: JobContext, message: str, ask: int | None) -> Update:
        """A job waiting for busy capacity (or hosts being set up) to make room; `ask`:
        the free blocks it needs on one instance (`scheduling.room_ask`)."""
        runtime = _not_awaiting(ctx.runtime)
        return self._changed(ctx, {"status_message": message, "runtime": runtime, "room_ask": ask})

    @staticmethod
    def _changed(ctx: JobContext, update: Update) -> Update:
        """`update` without what the job already has: a waiting job that learns nothing
        new writes nothing (hundreds of them would otherwise queue on the one writer)."""
        current = {
            "status_message": ctx.job.status_message,
            "runtime": ctx.runtime,
            "room_ask": ctx.job.room_ask,
        }
        return {k: v for k, v in update.items() if k not in current or current[k] != v}


def _not_awaiting(runtime: dict[str, Any]) -> dict[str, Any]:
    """The runtime without a recorded fleet demand (placed, failed, or waiting for busy
    capacity instead)."""
    return {k: v for k, v in runtime.items() if k not in (AWAITING_FLEET, NODES_NEEDED)}
