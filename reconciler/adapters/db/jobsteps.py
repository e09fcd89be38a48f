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
  to the first job after it in line that could use them (`pass_wake`).
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Table,
    Update,
    case,
    func,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import ReturningUpdate

from reconciler.adapters.db.leasing import fenced_step_update, leased_table
from reconciler.adapters.db.models import Event, Fleet, Instance, Job, Run
from reconciler.adapters.db.sessions import StoreBase
from reconciler.adapters.db.stepevents import (
    RunFollowing,
    follow_run,
    following,
    run_events,
    step_events,
)
from reconciler.core.hostblocks import block_size, host_sized
from reconciler.core.jobspecs import host_ports_of
from reconciler.core.scheduling import Candidate, Gpu
from reconciler.domain.inventory import InstanceRecord
from reconciler.domain.statuses import InstanceStatus, JobStatus

ACTIVE_ON_INSTANCE = (
    JobStatus.PROVISIONING.value,
    JobStatus.PULLING.value,
    JobStatus.RUNNING.value,
    JobStatus.TERMINATING.value,
)
_PLACEABLE = (InstanceStatus.IDLE.value, InstanceStatus.BUSY.value)
_JOBS, _RUNS, _FLEETS, _INSTANCES = (leased_table(m) for m in (Job, Run, Fleet, Instance))
"""The tables the step's statements write: Core DML (`update(table)`), not ORM-enabled
DML, which costs about half as much again per statement in the ORM's bulk-update path
(a step writes 4 to 6 of them)."""
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


@dataclass(frozen=True, slots=True)
class WaitPlace:
    """A waiting job's place in line (`ix_jobs_waiting_line`): services and dev
    environments first, then first come."""

    rank: int  # `scheduling.wait_rank`
    submitted_at: datetime
    job_id: str


class JobStepsStore(StoreBase):
    """The `Store` part for the jobs worker; see the module docstring."""

    def placement_candidates(self, project_id: str, *, ports: bool = True) -> list[Candidate]:
        """Every idle or busy instance of the project's fleets, with the GPUs in use (and,
        with `ports`, the host ports: a job that binds none need not read them)."""
        with self.reading() as session:
            fleets = {
                f.id: f
                for f in session.scalars(
                    select(Fleet).where(Fleet.project_id == project_id, Fleet.deleted.is_(False))
                )
            }
            instances = session.scalars(
                select(Instance)
                .where(Instance.project_id == project_id, Instance.status.in_(_PLACEABLE))
                .order_by(Instance.fleet_id, Instance.instance_num, Instance.created_at)
            ).all()
            # The jobs on them matter for what they hold: GPUs, and host ports if asked.
            holding = [i.id for i in instances if ports or _gpus(_info(i))]
            jobs = (
                session.scalars(
                    select(Job).where(
                        Job.instance_id.in_(holding), Job.status.in_(ACTIVE_ON_INSTANCE)
                    )
                ).all()
                if holding
                else []
            )
        held: dict[str, tuple[set[int], set[int]]] = {i.id: (set(), set()) for i in instances}
        for job in jobs:
            gpus, bound = held[job.instance_id or ""]
            runtime = job.runtime if isinstance(job.runtime, Mapping) else {}
            gpus.update(int(i) for i in runtime.get("gpus") or ())
            data = job.job_spec if isinstance(job.job_spec, Mapping) else {}
            bound.update(host_ports_of(data.get("spec") or {}))
        candidates = []
        for instance in instances:
            fleet = fleets.get(instance.fleet_id or "")
            if fleet is None:
                continue
            gpus, bound = held[instance.id]
            candidate = to_candidate(instance, fleet, frozenset(gpus), frozenset(bound))
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
        with self.writing() as session:
            now = self.now()
            for step in steps:
                try:
                    results.append(self._record(session, step, now, []))
                except _AbortError as abort:  # its fence failed: nothing of it written
                    results.append(abort.result)
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
        self, session: Session, step: JobStep, now: datetime, taken: list[InstanceRecord]
    ) -> StepResult:
        """The step's statements; `taken` gets the instances taken on, as left."""
        for take in step.take:
            row = session.execute(_take_capacity(take)).first()
            if row is None:
                raise _AbortError(StepResult.CAPACITY_TAKEN)
            taken.append(_as_record(row._mapping))
            if take.job_id is not None:
                session.execute(
                    update(_JOBS)
                    .where(Job.id == take.job_id)
                    .values(instance_id=take.instance_id, runtime=dict(take.runtime))
                )
        fenced = fenced_step_update(
            Job, step.job_id, step.token, step.read_status, step.values, now, step.release_lease
        )
        if not session.execute(fenced).rowcount:  # type: ignore[attr-defined]
            raise _AbortError(StepResult.LEASE_LOST)
        if taken and taken[0].busy_blocks < taken[0].total_blocks:  # room left: the chain
            room = taken[0].total_blocks - taken[0].busy_blocks
            session.execute(wake_waiting_statement(step.project_id, 1, room=room))
        self._after_write(session, step, now)
        events = step_events(step.project_id, step.job_id, step.event, now)
        followed = not following(step.follow) or follow_run(session, step.run_id, step.follow)
        if followed and step.follow is not None:
            events.extend(run_events(step.project_id, step.run_id, step.follow, now))
        if events:  # every event of the step in one statement
            session.execute(insert(EVENTS), events)
        return StepResult.WRITTEN if followed else StepResult.WRITTEN_RUN_DUE

    def _after_write(self, session: Session, step: JobStep, now: datetime) -> None:
        if step.release is not None:
            instance_id, blocks = step.release
            session.execute(return_capacity_statement(instance_id, blocks, now))
            room = _free_on(instance_id)
            session.execute(wake_waiting_statement(step.project_id, RELEASE_WAKES, room=room))
        if step.pass_wake is not None:
            room = _most_free(step.project_id)
            after = step.pass_wake
            session.execute(wake_waiting_statement(step.project_id, 1, room=room, after=after))
        if step.wake_fleet is not None:
            session.execute(update(_FLEETS).where(Fleet.id == step.wake_fleet).values(due_at=None))
        if step.event is not None and step.wake_run and step.follow is None:
            session.execute(update(_RUNS).where(Run.id == step.run_id).values(due_at=None))

    def wake_waiting_jobs(self, project_id: str, count: int) -> None:
        """Make the `count` oldest jobs of the project waiting for room due now (an
        instance became ready)."""
        with self.writing() as session:
            session.execute(wake_waiting_statement(project_id, count))

    def give_back_capacity(self, instance_id: str, blocks: int) -> None:
        """Give `blocks` back on their own (tests and repairs; steps use `release`)."""
        with self.writing() as session:
            session.execute(return_capacity_statement(instance_id, blocks, self.now()))


class _AbortError(Exception):
    """Rolls a step's transaction back with the result to report."""

    def __init__(self, result: StepResult) -> None:
        super().__init__(result.value)
        self.result = result


def _info(instance: Instance) -> Mapping[str, Any]:
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
    instance: Instance,
    fleet: Fleet,
    busy_gpus: frozenset[int],
    busy_ports: frozenset[int] = frozenset(),
) -> Candidate | None:
    """The instance as the scheduler sees it; None until its host facts are known."""
    info = instance.host_info
    if not isinstance(info, Mapping):
        return None
    spec = fleet.spec if isinstance(fleet.spec, Mapping) else {}
    resources = instance.resources if isinstance(instance.resources, Mapping) else {}
    sized = host_sized(instance.backend or "", spec.get("blocks"))
    return Candidate(
        instance_id=instance.id,
        instance_name=instance.name,
        fleet_name=fleet.name,
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


def _take_capacity(take: Take) -> ReturningUpdate[Any]:
    """Add the blocks to the instance's busy blocks if they still fit; returns the
    instance's columns after (no row: they did not fit)."""
    return (
        update(_INSTANCES)
        .where(
            Instance.id == take.instance_id,
            Instance.busy_blocks + take.blocks <= Instance.total_blocks,
            Instance.status.in_(_PLACEABLE),
        )
        .values(busy_blocks=Instance.busy_blocks + take.blocks, status=InstanceStatus.BUSY.value)
        .returning(*_INSTANCE_COLUMNS)
    )


_RECORD_FIELDS = frozenset(f.name for f in fields(InstanceRecord))
_INSTANCE_COLUMNS = [c for c in Instance.__table__.columns if c.name in _RECORD_FIELDS]


def _as_record(row: Mapping[Any, Any]) -> InstanceRecord:
    return InstanceRecord(**{name: row[name] for name in _RECORD_FIELDS})


def return_capacity_statement(instance_id: str, blocks: int, now: datetime) -> Update:
    """The UPDATE giving `blocks` back; the instance is idle again when nothing holds it."""
    left = Instance.busy_blocks - blocks
    remaining = case((left > 0, left), else_=0)
    status = case(
        ((Instance.status == InstanceStatus.BUSY.value) & (left <= 0), InstanceStatus.IDLE.value),
        else_=Instance.status,
    )
    return (
        update(_INSTANCES)
        .where(Instance.id == instance_id)
        .values(busy_blocks=remaining, status=status, last_job_processed_at=now)
    )


def wake_waiting_statement(
    project_id: str,
    count: int,
    *,
    room: int | ColumnElement[Any] | None = None,
    after: WaitPlace | None = None,
) -> Update:
    """Make the `count` first jobs of the project waiting for capacity due now.

    Jobs that found no room sleep (`JobsConfig.wait_backoff`) instead of polling; blocks
    given back, or an instance that became ready, wake the first of them in the same
    transaction as the change that made room: services and dev environments ahead of
    tasks (someone waits on them; a queue of batch tasks must not hold them back), then
    first come first served. With `room` (free blocks), only jobs whose `room_ask` it
    meets (or that have none yet); with `after`, only jobs behind that place in line.
    """
    conditions = [
        Job.status == JobStatus.SUBMITTED.value,
        Run.project_id == project_id,
        Job.instance_id.is_(None),
        Job.due_at.is_not(None),
    ]
    if room is not None:
        conditions.append(or_(Job.room_ask.is_(None), Job.room_ask <= room))
    if after is not None:  # a range of `ix_jobs_waiting_line`: the line from that place on
        conditions.append(
            tuple_(Job.wait_rank, Job.submitted_at, Job.id)
            > tuple_(after.rank, after.submitted_at, after.job_id)
        )
    # The line's order is the index's: the walk stops at the first job that fits.
    oldest = (
        select(Job.id)
        .join(Run, Run.id == Job.run_id)
        .where(*conditions)
        .order_by(Job.wait_rank, Job.submitted_at, Job.id)
        .limit(count)
    )
    return update(_JOBS).where(Job.id.in_(oldest)).values(due_at=None)


def _free_on(instance_id: str) -> ColumnElement[Any]:
    """The free blocks of one instance (read in the statement, after a give-back)."""
    free = Instance.total_blocks - Instance.busy_blocks
    return select(free).where(Instance.id == instance_id).scalar_subquery()


def _most_free(project_id: str) -> ColumnElement[Any]:
    """The most free blocks on any one placeable instance of the project."""
    free = func.max(Instance.total_blocks - Instance.busy_blocks)
    placeable = (Instance.project_id == project_id, Instance.status.in_(_PLACEABLE))
    return select(free).where(*placeable).scalar_subquery()
