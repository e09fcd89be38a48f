"""The jobs worker's hot statements, built once per shape and run with bind parameters.

Building a SQLAlchemy statement (and its cache key) costs more CPU than SQLite takes to
run it: about 0.4 ms for the wake of waiting jobs, 0.2 ms for a fenced step write, and
a step runs four to six of them. Each statement here is built on first use for its shape
(which value columns, which kind of room) and kept; callers pass the values as
parameters and run it on the transaction's connection (Core: no ORM execution layer).

Called by `jobsteps.py` (`record_job_step`, `place_job`, `wake_waiting_jobs`) and
`stepevents.py`, inside their transaction. Bind names start with `p_` or `v_`: SQLAlchemy
reserves a column's own name for the VALUES and SET clauses.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Select,
    Table,
    Update,
    bindparam,
    case,
    exists,
    func,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.sql.dml import ReturningUpdate

from reconciler.adapters.db.leasing import leased_table, release_columns
from reconciler.adapters.db.models import Fleet, Instance, Job, Run
from reconciler.domain.statuses import InstanceStatus, JobStatus

PLACEABLE = (InstanceStatus.IDLE.value, InstanceStatus.BUSY.value)
JOBS, RUNS, FLEETS, INSTANCES = (leased_table(m) for m in (Job, Run, Fleet, Instance))

ROOM_ANY, ROOM_GIVEN, ROOM_ON_INSTANCE, ROOM_MOST_FREE = "any", "given", "instance", "most"
"""What room a wake asks of the waiting jobs: none (any job), a number (`p_room`), the free
blocks of one instance after a give-back (`p_instance`), the most free on any placeable
instance of the project (a wake passed down the line)."""


def run(connection: Connection, statement: Any, params: Mapping[str, Any]) -> Any:
    """Run a prebuilt statement on the transaction's connection (its `CursorResult`)."""
    return connection.execute(statement, dict(params))


@functools.cache
def take_capacity() -> ReturningUpdate[Any]:
    """Add `p_blocks` to instance `p_instance`'s busy blocks if they still fit; returns
    the instance's columns after (no row: they did not fit)."""
    blocks: BindParameter[int] = bindparam("p_blocks")
    return (
        update(INSTANCES)
        .where(
            INSTANCES.c.id == bindparam("p_instance"),
            INSTANCES.c.busy_blocks + blocks <= INSTANCES.c.total_blocks,
            INSTANCES.c.status.in_(PLACEABLE),
        )
        .values(busy_blocks=INSTANCES.c.busy_blocks + blocks, status=InstanceStatus.BUSY.value)
        .returning(*INSTANCES.c)
    )


@functools.cache
def return_capacity() -> Update:
    """Give `p_blocks` back on instance `p_instance` at `p_now`; the instance is idle again
    when nothing holds it."""
    c = INSTANCES.c
    left = c.busy_blocks - bindparam("p_blocks")
    status = case(
        ((c.status == InstanceStatus.BUSY.value) & (left <= 0), InstanceStatus.IDLE.value),
        else_=c.status,
    )
    return (
        update(INSTANCES)
        .where(c.id == bindparam("p_instance"))
        .values(
            busy_blocks=case((left > 0, left), else_=0),
            status=status,
            last_job_processed_at=bindparam("p_now", type_=c.last_job_processed_at.type),
        )
    )


@functools.cache
def wake_waiting(room: str, after: bool) -> Update:
    """Make the `p_count` first jobs of project `p_project` waiting for capacity due now.

    Jobs that found no room sleep (`JobsConfig.wait_backoff`) instead of polling; blocks
    given back, or an instance that became ready, wake the first of them in the same
    transaction as the change that made room: services and dev environments ahead of
    tasks (`jobs.wait_rank`: someone waits on them; a queue of batch tasks must not hold
    them back), then first come first served. With `room`, only jobs whose `room_ask` it
    meets (or that have none yet); with `after`, only jobs behind that place in line
    (`p_rank`, `p_at`, `p_job`)."""
    j = JOBS.c
    conditions = [
        j.status == JobStatus.SUBMITTED.value,
        RUNS.c.project_id == bindparam("p_project"),
        j.instance_id.is_(None),
        j.due_at.is_not(None),
    ]
    free = _room(room)
    if free is not None:
        conditions.append(or_(j.room_ask.is_(None), j.room_ask <= free))
    if after:  # a range of `ix_jobs_waiting_line`: the line from that place on
        at = bindparam("p_at", type_=j.submitted_at.type)
        place = tuple_(bindparam("p_rank"), at, bindparam("p_job"))
        conditions.append(tuple_(j.wait_rank, j.submitted_at, j.id) > place)
    # The line's order is the index's: the walk stops at the first job that fits.
    first = (
        select(j.id)
        .join(RUNS, RUNS.c.id == j.run_id)
        .where(*conditions)
        .order_by(j.wait_rank, j.submitted_at, j.id)
        .limit(bindparam("p_count"))
    )
    return update(JOBS).where(j.id.in_(first)).values(due_at=None)


@functools.cache
def park_like() -> Update:
    """Park the new jobs of project `p_project` whose place key is `p_key` in the waiting
    line, as a job with that key that found no room was: due at `p_due`, processed at
    `p_now`, with its `p_message` and room ask `p_ask`. Only while no placeable instance
    of the project has a free block, read in this statement: room given back before it
    parks nothing (those jobs are placed by their own passes), room given back after it
    wakes the line, parked jobs included. New: never processed, not due at a later time,
    not leased (a batch's claimed jobs get their passes)."""
    j, i, r = JOBS.c, INSTANCES.c, RUNS.c
    room = select(i.id).where(
        i.project_id == bindparam("p_project"),
        i.status.in_(PLACEABLE),
        i.busy_blocks < i.total_blocks,
    )
    return (
        update(JOBS)
        .where(
            j.status == JobStatus.SUBMITTED.value,
            j.due_at.is_(None),
            j.place_key == bindparam("p_key"),
            j.instance_id.is_(None),
            j.last_processed_at.is_(None),
            j.lock_token.is_(None),
            j.run_id.in_(select(r.id).where(r.project_id == bindparam("p_project"))),
            ~exists(room),
        )
        .values(
            due_at=bindparam("p_due", type_=j.due_at.type),
            last_processed_at=bindparam("p_now", type_=j.last_processed_at.type),
            status_message=bindparam("p_message"),
            room_ask=bindparam("p_ask"),
        )
    )


@functools.cache
def lock_project_instances() -> Select[Any]:
    """The project's instance rows locked (`FOR UPDATE`, PostgreSQL) before a park: a
    give-back on another replica then waits for the park, and its wake sees the parked
    jobs (or the park sees the room given back)."""
    i = INSTANCES.c
    return select(i.id).where(i.project_id == bindparam("p_project")).with_for_update()


def _room(room: str) -> ColumnElement[Any] | None:
    i = INSTANCES.c
    if room == ROOM_GIVEN:
        return bindparam("p_room")
    if room == ROOM_ON_INSTANCE:  # read in the statement, after the give-back
        return (
            select(i.total_blocks - i.busy_blocks)
            .where(i.id == bindparam("p_instance"))
            .scalar_subquery()
        )
    if room == ROOM_MOST_FREE:
        placeable = (i.project_id == bindparam("p_project"), i.status.in_(PLACEABLE))
        return select(func.max(i.total_blocks - i.busy_blocks)).where(*placeable).scalar_subquery()
    return None


def fenced_write(
    table: Table,
    values: Mapping[str, Any],
    *,
    row_id: str,
    token: str,
    read_status: str,
    now: datetime,
    release_lease: float | None,
) -> tuple[Update, dict[str, Any]]:
    """A worker step's write of one leased row, and its parameters: only while `token`
    still holds the lease and the row is still in `read_status` (what the step decided
    on); with `release_lease`, the lease is dropped in the same statement
    (`leasing.release_columns`: due again in that many seconds). Zero rows: the fence
    failed and nothing is written. Used by `record_job_step` and `record_run_write`.

    Built once per table, set of value columns and kind of release; a value that is a
    SQL expression is written inline in a statement built for it."""
    release = "keep" if release_lease is None else "now" if release_lease <= 0 else "later"
    params: dict[str, Any] = {"p_id": row_id, "p_token": token, "p_status": read_status}
    if release != "keep":
        params["p_now"] = now
        params["p_later"] = now + timedelta(seconds=release_lease or 0.0)
    if not plain_values(table, values):
        return _fenced_values(table, dict(values), release), params
    params |= {f"v_{name}": value for name, value in values.items()}
    return _fenced(table.name, tuple(sorted(values)), release), params


@functools.cache
def _fenced(table_name: str, names: Sequence[str], release: str) -> Update:
    table = {t.name: t for t in (JOBS, RUNS)}[table_name]
    c = table.c
    written = {name: bindparam(f"v_{name}", type_=c[name].type) for name in names}
    return _fenced_values(table, written, release)


def _fenced_values(table: Table, written: dict[str, Any], release: str) -> Update:
    """The fenced UPDATE of `written`; a release's columns win over the step's own."""
    c = table.c
    if release != "keep":
        now = bindparam("p_now", type_=c.due_at.type)
        later = bindparam("p_later", type_=c.due_at.type) if release == "later" else None
        written = written | release_columns(table, now, later)
    fence = (
        c.id == bindparam("p_id"),
        c.lock_token == bindparam("p_token"),
        c.status == bindparam("p_status"),
    )
    return update(table).where(*fence).values(**written)


def plain_values(table: Table, values: Mapping[str, Any]) -> bool:
    """Whether every value is a plain value of one of the table's columns (a prebuilt
    statement binds it); a SQL expression among them needs its statement built for it."""
    return all(name in table.c and not isinstance(v, ColumnElement) for name, v in values.items())
