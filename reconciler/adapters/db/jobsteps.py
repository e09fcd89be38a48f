"""The jobs worker's units of work: placement candidates, placing a job, recording a step.

Called by `reconciler.engine.workers.jobs` (and the planner's previews for candidates).
Each method is one transaction:

- `placement_candidates(project_id, ports=)` reads every idle or busy instance of the
  project's fleets with the GPUs and host ports its active jobs hold, as
  `scheduling.Candidate`s (the jobs are read only on instances with GPUs, or for ports).
- `record_job_step(step)` is the one write of a jobs-worker step: the job's values fenced
  by its lease token and by the status it was read in (and, with `release_lease`, the
  lease dropped in the same statement: the worker then releases nothing); capacity taken
  for a placement (a conditional UPDATE per instance, so two workers or two replicas never
  overfill one) and the cluster siblings placed with it; blocks given back and the oldest
  waiting jobs woken; the status-change events (the job's, and a one-job run's that
  follows it: `stepevents.py`, one INSERT), and the run (and a fleet) made due. Capacity and
  the fenced write commit together or not at all, so a lost lease cannot leak blocks.
  Waking is a chain, so its cost does not grow with the queue or the blocks: blocks given
  back wake the first waiting job that could use them (its `room_ask`: a job too big for
  them is passed over), a placement that leaves room on its instance wakes the next one,
  and a job that still finds no room while some instance has free blocks passes the wake
  to the first job after it in line that could use them (`pass_wake`). A job that finds
  no free block on any instance parks the project's new jobs like it in the line as it
  waits (`park_like`), so a queue of a thousand alike costs one pass, not a thousand.
- `record_job_steps(steps)` records a batch of steps that take no capacity in one
  transaction on SQLite, each fenced on its own (the jobs worker's steps that end
  together); on PostgreSQL one transaction per step (row locks across replicas).
- `place_job(step)` is `record_job_step` for a placement, answering the instance as the
  take left it (`UPDATE … RETURNING`; the step goes on to submit the job there).
- `wake_waiting_jobs(project_id, count)` makes the first jobs waiting for room due now
  (services and dev environments ahead of tasks).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Connection, Row, Select, Table, bindparam, insert, select, update
from sqlalchemy.orm import Session

from reconciler.adapters.db.models import Event, Fleet, Job, Run
from reconciler.adapters.db.sessions import StoreBase
from reconciler.adapters.db.stepevents import (
    RunFollowing,
    follow_run,
    following,
    run_events,
    step_events,
)
from reconciler.adapters.db.stepstatements import (
    FLEETS,
    INSTANCES,
    JOBS,
    PLACEABLE,
    ROOM_ANY,
    ROOM_GIVEN,
    ROOM_MOST_FREE,
    ROOM_ON_INSTANCE,
    RUNS,
    fenced_write,
    lock_project_instances,
    park_like,
    return_capacity,
    run,
    take_capacity,
    wake_waiting,
)
from reconciler.core.hostblocks import block_size, host_sized
from reconciler.core.jobspecs import host_ports_of
from reconciler.core.scheduling import Candidate, Gpu
from reconciler.domain.inventory import InstanceRecord
from reconciler.domain.statuses import JobStatus

ACTIVE_ON_INSTANCE = (
    JobStatus.PROVISIONING.value,
    JobStatus.PULLING.value,
    JobStatus.RUNNING.value,
    JobStatus.TERMINATING.value,
)
EVENTS = cast(Table, Event.__table__)
RELEASE_WAKES = 1
"""Waiting jobs woken by blocks given back: the first in line (services first, then first
come) whose `room_ask` the room meets; each one placed wakes the next while room is left
(a chain); one that still does not fit passes the wake down the line (`pass_wake`)."""


class StepResult(enum.Enum):
    """What `record_job_step` did."""

    WRITTEN = "written"
    WRITTEN_RUN_DUE = "written_run_due"  # written; the run could not follow: made due instead
    LEASE_LOST = "lease_lost"  # the lease or the status read no longer holds: nothing written
    CAPACITY_TAKEN = "capacity_taken"  # an instance filled meanwhile: nothing written


@dataclass(frozen=True, slots=True)
class Take:
    """Blocks to take on an instance for a placement; `job_id` set for a cluster sibling
    (placed with its master: its instance and runtime are written in the same step)."""

    instance_id: str
    blocks: int
    job_id: str | None = None
    runtime: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobStep:
    """One fenced write of a job and what must happen with it in the same transaction."""

    job_id: str
    token: str
    read_status: str
    project_id: str
    run_id: str
    values: Mapping[str, Any]
    take: tuple[Take, ...] = ()
    release: tuple[str, int] | None = None  # (instance id, blocks) to give back
    wake_fleet: str | None = None
    event: tuple[str, str] | None = None  # (target name, message)
    release_lease: float | None = None  # set: the lease goes with the write, due again then
    wake_run: bool = True  # with the event: the run looks at its jobs again
    follow: RunFollowing | None = None  # instead of waking the run: its values, if it can
    pass_wake: WaitPlace | None = None  # no room though some is free: wake the next in line
    park_like: ParkLike | None = None  # no room anywhere: the new jobs like it wait too


@dataclass(frozen=True, slots=True)
class WaitPlace:
    """A waiting job's place in line (`ix_jobs_waiting_line`): services and dev
    environments first, then first come."""

    rank: int  # `scheduling.wait_rank`
    submitted_at: datetime
    job_id: str


@dataclass(frozen=True, slots=True)
class ParkLike:
    """A job that found no room on any instance parks the project's new jobs with its
    place key (`scheduling.place_key`) in the line as it waits: `stepstatements.park_like`."""

    place_key: str
    message: str
    room_ask: int | None
    wait_seconds: float  # due again then, unless room given back wakes them first


class JobStepsStore(StoreBase):
    """The `Store` part for the jobs worker; see the module docstring."""

    def placement_candidates(self, project_id: str, *, ports: bool = True) -> list[Candidate]:
        """Every idle or busy instance of the project's fleets, with the GPUs in use (and,
        with `ports`, the host ports: a job that binds none need not read them)."""
        # Core rows: no ORM objects for a hot read. No snapshot across its two statements
        # (no BEGIN on SQLite): the placement is written in a later transaction anyway,
        # its take conditional on the blocks as they are then.
        with self.reading_unpinned() as session:
            conn = session.connection()
            mine = {"p_project": project_id}
            # each with its fleet's name and spec (one statement: the join drops the
            # instances of deleted fleets, as a fleet looked up apart did)
            instances = conn.execute(_instances_query(), mine).all()
            # The jobs on them matter for what they hold: GPUs, and host ports if asked.
            holding = [i.id for i in instances if ports or _gpus(_info(i))]
            held_by = {"p_instances": holding}
            jobs = conn.execute(_holding_query(), held_by).all() if holding else []
        held: dict[str, tuple[set[int], set[int]]] = {i.id: (set(), set()) for i in instances}
        for job in jobs:
            gpus, bound = held[job.instance_id or ""]
            runtime = job.runtime if isinstance(job.runtime, Mapping) else {}
            gpus.update(int(i) for i in runtime.get("gpus") or ())
            data = job.job_spec if isinstance(job.job_spec, Mapping) else {}
            bound.update(host_ports_of(data.get("spec") or {}))
        candidates = []
        for instance in instances:
            gpus, bound = held[instance.id]
            candidate = to_candidate(instance, frozenset(gpus), frozenset(bound))
            if candidate is not None:
                candidates.append(candidate)
        return candidates

    def record_job_step(self, step: JobStep) -> StepResult:
        """The step's writes in one transaction (see the module docstring)."""
        try:
            with self.writing() as session:
                return self._record(session, step, self.now(), [])
        except _AbortError as abort:
            return abort.result

    def record_job_steps(self, steps: Sequence[JobStep]) -> list[StepResult]:
        """**Record a batch of job steps** (none taking capacity) in one transaction, each
        as `record_job_step` would, fenced on its own: a step whose fence fails wrote
        nothing (its first statement is the fenced write) and the others go on. What
        fails otherwise rolls the whole batch back (each caller sees it; it is retried)."""
        if any(step.take for step in steps):
            raise ValueError("a step taking capacity is recorded on its own (place_job)")
        if self.engine.dialect.name != "sqlite":
            # Row locks: one batch's job rows, written in turn, against another replica's
            # wakes of many rows at once deadlock (seen with two replicas). SQLite has one
            # writer at a time: no row locks, no deadlock; elsewhere one step at a time.
            return [self.record_job_step(step) for step in steps]
        results: list[StepResult] = []
        events: list[dict[str, Any]] = []  # every step's events in one statement at the end
        with self.writing() as session:
            now = self.now()
            for step in steps:
                try:
                    results.append(self._record(session, step, now, [], events))
                except _AbortError as abort:  # its fence failed: nothing of it written
                    results.append(abort.result)
            if events:
                session.connection().execute(insert(EVENTS), events)
        return results

    def place_job(self, step: JobStep) -> InstanceRecord | StepResult:
        """**Place a job**: `record_job_step` (capacity taken with the fenced job write,
        the lease kept); the instance it is placed on as the take left it (`RETURNING`):
        what the step goes on with (submitting the job to its agent)."""
        taken: list[InstanceRecord] = []
        try:
            with self.writing() as session:
                result = self._record(session, step, self.now(), taken)
        except _AbortError as abort:
            return abort.result
        return taken[0] if taken else result

    def _record(
        self,
        session: Session,
        step: JobStep,
        now: datetime,
        taken: list[InstanceRecord],
        batch_events: list[dict[str, Any]] | None = None,
    ) -> StepResult:
        """The step's statements; `taken` gets the instances taken on, as left. With
        `batch_events`, the step's events are added to it for the batch's one insert
        instead of inserted here (added last: a step that aborts adds none)."""
        conn = session.connection()
        if step.park_like is not None and conn.dialect.name != "sqlite":
            # instances before job rows, as a give-back's order: no deadlock between them
            run(conn, lock_project_instances(), {"p_project": step.project_id}).all()
        for take in step.take:
            params = {"p_instance": take.instance_id, "p_blocks": take.blocks}
            row = run(conn, take_capacity(), params).first()
            if row is None:
                raise _AbortError(StepResult.CAPACITY_TAKEN)
            taken.append(_as_record(row._mapping))
            if take.job_id is not None:
                conn.execute(
                    update(JOBS)
                    .where(Job.id == take.job_id)
                    .values(instance_id=take.instance_id, runtime=dict(take.runtime))
                )
        if not _fenced_write(conn, step, now).rowcount:
            raise _AbortError(StepResult.LEASE_LOST)
        if taken and taken[0].busy_blocks < taken[0].total_blocks:  # room left: the chain
            room = taken[0].total_blocks - taken[0].busy_blocks
            wake = wake_waiting(ROOM_GIVEN, after=False)
            run(conn, wake, {"p_project": step.project_id, "p_count": 1, "p_room": room})
        self._after_write(conn, step, now)
        events = step_events(step.project_id, step.job_id, step.event, now)
        followed = not following(step.follow) or follow_run(conn, step.run_id, step.follow)
        if followed and step.follow is not None:
            events.extend(run_events(step.project_id, step.run_id, step.follow, now))
        if batch_events is not None:
            batch_events.extend(events)
        elif events:  # every event of the step in one statement
            conn.execute(insert(EVENTS), events)
        return StepResult.WRITTEN if followed else StepResult.WRITTEN_RUN_DUE

    def _after_write(self, conn: Connection, step: JobStep, now: datetime) -> None:
        if step.release is not None:
            instance_id, blocks = step.release
            given = {"p_instance": instance_id, "p_blocks": blocks, "p_now": now}
            run(conn, return_capacity(), given)
            wake = wake_waiting(ROOM_ON_INSTANCE, after=False)
            woken = {"p_project": step.project_id, "p_count": RELEASE_WAKES}
            run(conn, wake, woken | {"p_instance": instance_id})
        if step.pass_wake is not None:
            place = step.pass_wake
            params = {"p_project": step.project_id, "p_count": 1, "p_rank": place.rank}
            params |= {"p_at": place.submitted_at, "p_job": place.job_id}
            run(conn, wake_waiting(ROOM_MOST_FREE, after=True), params)
        if step.park_like is not None:
            park = step.park_like
            params = {"p_project": step.project_id, "p_key": park.place_key, "p_now": now}
            params |= {"p_message": park.message, "p_ask": park.room_ask}
            run(conn, park_like(), params | {"p_due": now + timedelta(seconds=park.wait_seconds)})
        if step.wake_fleet is not None:
            conn.execute(update(FLEETS).where(Fleet.id == step.wake_fleet).values(due_at=None))
        if step.event is not None and step.wake_run and step.follow is None:
            conn.execute(update(RUNS).where(Run.id == step.run_id).values(due_at=None))

    def wake_waiting_jobs(self, project_id: str, count: int) -> None:
        """Make the `count` oldest jobs of the project waiting for room due now (an
        instance became ready)."""
        with self.writing() as session:
            params = {"p_project": project_id, "p_count": count}
            run(session.connection(), wake_waiting(ROOM_ANY, after=False), params)

    def give_back_capacity(self, instance_id: str, blocks: int) -> None:
        """Give `blocks` back on their own (tests and repairs; steps use `release`)."""
        with self.writing() as session:
            given = {"p_instance": instance_id, "p_blocks": blocks, "p_now": self.now()}
            run(session.connection(), return_capacity(), given)


def _fenced_write(conn: Connection, step: JobStep, now: datetime) -> Any:
    """The step's fenced write of its job (`stepstatements.fenced_write`)."""
    statement, params = fenced_write(
        JOBS,
        step.values,
        row_id=step.job_id,
        token=step.token,
        read_status=step.read_status,
        now=now,
        release_lease=step.release_lease,
    )
    return conn.execute(statement, params)


class _AbortError(Exception):
    """Rolls a step's transaction back with the result to report."""

    def __init__(self, result: StepResult) -> None:
        super().__init__(result.value)
        self.result = result


@functools.cache
def _instances_query() -> Select[Any]:
    """The project's placeable instances of its fleets not deleted, with `fleet_name`
    and `fleet_spec`."""
    i, f = INSTANCES.c, FLEETS.c
    return (
        select(INSTANCES, f.name.label("fleet_name"), f.spec.label("fleet_spec"))
        .join(FLEETS, f.id == i.fleet_id)
        .where(i.project_id == bindparam("p_project"), i.status.in_(PLACEABLE))
        .where(f.project_id == bindparam("p_project"), f.deleted.is_(False))
        .order_by(i.fleet_id, i.instance_num, i.created_at)
    )


@functools.cache
def _holding_query() -> Select[Any]:
    j = JOBS.c
    return select(j.instance_id, j.runtime, j.job_spec).where(
        j.instance_id.in_(bindparam("p_instances", expanding=True)),
        j.status.in_(ACTIVE_ON_INSTANCE),
    )


def _info(instance: Row[Any]) -> Mapping[str, Any]:
    return instance.host_info if isinstance(instance.host_info, Mapping) else {}


def _gpus(host_info: Mapping[str, Any]) -> tuple[Gpu, ...]:
    return tuple(
        Gpu(
            index=int(g.get("index", i)),
            name=str(g.get("name", "")),
            vendor=str(g.get("vendor", "")),
            memory_gb=float(g.get("memory_mib", 0)) / 1024,
        )
        for i, g in enumerate(host_info.get("gpus") or ())
    )


def to_candidate(
    instance: Row[Any],
    busy_gpus: frozenset[int],
    busy_ports: frozenset[int] = frozenset(),
) -> Candidate | None:
    """The instance (an `_instances_query` row) as the scheduler sees it; None until its
    host facts are known."""
    info = instance.host_info
    if not isinstance(info, Mapping):
        return None
    spec = instance.fleet_spec if isinstance(instance.fleet_spec, Mapping) else {}
    resources = instance.resources if isinstance(instance.resources, Mapping) else {}
    sized = host_sized(instance.backend or "", spec.get("blocks"))
    return Candidate(
        instance_id=instance.id,
        instance_name=instance.name,
        fleet_name=instance.fleet_name,
        cpus=int(info.get("cpus", 0)),
        arch=str(info.get("arch", "x86_64")),
        memory_gb=float(info.get("memory_mib", 0)) / 1024,
        disk_gb=float(info.get("disk_mib", 0)) / 1024,
        gpus=_gpus(info),
        spot=bool(resources.get("spot", False)),
        price=float(instance.price or 0.0),
        total_blocks=instance.total_blocks,
        busy_blocks=instance.busy_blocks,
        busy_gpus=busy_gpus,
        busy_ports=busy_ports,
        cluster=spec.get("placement") == "cluster",
        block_size=block_size(info, instance.total_blocks) if sized else None,
    )


_RECORD_FIELDS = frozenset(f.name for f in fields(InstanceRecord))


def _as_record(row: Mapping[Any, Any]) -> InstanceRecord:
    return InstanceRecord(**{name: row[name] for name in _RECORD_FIELDS})
