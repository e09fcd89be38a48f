"""Leases on rows for background workers: claim due rows, renew, fenced writes, release.

dstack's pipeline locking, for any model with the `Leased` columns:

- `claim_due` picks due rows (`due_at` passed or NULL, no live lease, plus the caller's
  filter) ordered by `last_processed_at` (never processed first), stamps a fresh
  `lock_token` per row with `lock_expires_at`/`lock_owner`, and commits. On PostgreSQL the
  pick is `SELECT … FOR UPDATE SKIP LOCKED`, so replicas claiming at once get disjoint rows;
  on SQLite the claim holds an in-process lock and runs in a `BEGIN IMMEDIATE` transaction,
  which also serializes claimers in other processes.
- `renew` extends leases still held (one `UPDATE … RETURNING` for up to 200 of them);
  `fenced_update` writes `UPDATE … WHERE id=? AND lock_token=?` and says whether the fence
  held; `release` drops the lease, stamps
  `last_processed_at` and sets when the row is due again.

Everything is synchronous and short; async callers run it in a thread (see
`workleasing.StoreLeasing`). Used by the engine's workers through that adapter.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Select,
    Table,
    Update,
    and_,
    bindparam,
    case,
    func,
    literal,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.orm import Session

from reconciler.adapters.db.connecting import unpinned_engine, writer_engine
from reconciler.adapters.db.models import Base, Leased, new_id
from reconciler.ports import Clock

RowT = TypeVar("RowT", bound=Base)

_LEASE_COLUMNS = frozenset({"lock_token", "lock_expires_at", "lock_owner"})
_RENEW_CHUNK = 200
"""Leases renewed per statement."""
_STATEMENTS_KEPT = 64
StatementT = TypeVar("StatementT")


def leased_table(model: type[Base]) -> Table:
    """The table of a model that has the lease columns; refuses any other model."""
    if not issubclass(model, Leased):
        raise TypeError(f"{model.__name__} has no lease columns")
    table = model.__table__
    assert isinstance(table, Table)
    return table


def release_values(table: Table, now: datetime, due_in: float) -> dict[str, Any]:
    """The columns that drop a lease: no holder, processed now, due again in `due_in`
    seconds — or now if `make_due` woke the row while it was in hand (its `due_at` is
    NULL then). Written fenced by the token, alone (`Leases.release`) or with a step's
    own values (`stepstatements.fenced_write`: one transaction)."""
    due_type = table.c.due_at.type
    later = literal(now + timedelta(seconds=due_in), type_=due_type) if due_in > 0 else None
    return release_columns(table, literal(now, type_=due_type), later)


def release_columns(
    table: Table, now: ColumnElement[Any], later: ColumnElement[Any] | None
) -> dict[str, Any]:
    """`release_values` with `now` and the time it is due again (`later`; None: now) as
    SQL values: literals, or bind parameters of a prebuilt statement."""
    due_at = now if later is None else case((table.c.due_at.is_(None), now), else_=later)
    return {
        "lock_token": None,
        "lock_expires_at": None,
        "lock_owner": None,
        "last_processed_at": now,
        "due_at": due_at,
    }


class Leases:
    """Leasing on one database. Build one per engine and share it (it holds the SQLite lock)."""

    def __init__(self, engine: Engine, *, clock: Clock) -> None:
        self._engine = engine
        self._writer = writer_engine(engine)
        self._unpinned = unpinned_engine(engine)  # one-statement reads: no BEGIN on SQLite
        self._is_postgres = engine.dialect.name == "postgresql"
        self._claim_lock = threading.Lock()
        self._clock = clock
        # statements built once per (use, table, filter object): `_built`
        self._statements: dict[tuple[str, str, int], tuple[object, Any]] = {}

    def _built(
        self, use: str, model: type[Base], where: object, build: Callable[[], StatementT]
    ) -> StatementT:
        """The statement `build` makes for this use, table and filter, built on first use
        (filters are compared by identity: `workleasing.pending_work` keeps one per kind;
        a caller that makes a new one each time only fills the bounded cache)."""
        key = (use, model.__tablename__, id(where))
        entry = self._statements.get(key)
        if entry is None or entry[0] is not where:
            if len(self._statements) >= _STATEMENTS_KEPT:
                self._statements.clear()
            entry = (where, build())  # the filter is kept: its id is not reused meanwhile
            self._statements[key] = entry
        return cast(StatementT, entry[1])

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._clock.now_ts(), UTC)

    @contextmanager
    def _claiming(self) -> Iterator[Connection]:
        if self._is_postgres:
            with self._writer.begin() as connection:
                yield connection
            return
        with self._claim_lock, self._writer.begin() as connection:
            yield connection

    def claim_due(
        self,
        model: type[Base],
        *,
        owner: str,
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        where: ColumnElement[bool] | None = None,
    ) -> list[tuple[str, str]]:
        """Lease up to `limit` due rows; returns [(row id, lock token)] in claim order."""
        if limit <= 0:
            return []
        now = now or self.now()
        query, stamp = self._built(
            "claim",
            model,
            where,
            lambda: _claim_statements(leased_table(model), where, self._is_postgres),
        )
        expires = now + timedelta(seconds=lease_seconds)
        found = {"p_now": now, "p_limit": limit}
        stamped = {"p_expires": expires, "p_owner": owner, "p_now": now}
        with self._claiming() as connection:
            claimed = [(row_id, new_id()) for row_id in connection.execute(query, found).scalars()]
            if claimed:
                rows = [{"p_row": i, "p_token": t} | stamped for i, t in claimed]
                connection.execute(stamp, rows)
        return claimed

    def renew(
        self,
        model: type[Base],
        held: Sequence[tuple[str, str]],
        *,
        lease_seconds: float,
        now: datetime | None = None,
    ) -> set[str]:
        """Extend the leases [(row id, token)]; returns the tokens that were still held."""
        table = leased_table(model)
        expires = (now or self.now()) + timedelta(seconds=lease_seconds)
        kept: set[str] = set()
        pairs = list(held)
        with self._writer.begin() as connection:
            for start in range(0, len(pairs), _RENEW_CHUNK):  # one statement per chunk
                chunk = pairs[start : start + _RENEW_CHUNK]
                renewed = connection.execute(
                    update(table)
                    .where(tuple_(table.c.id, table.c.lock_token).in_(chunk))
                    .values(lock_expires_at=expires)
                    .returning(table.c.lock_token)
                )
                kept.update(str(token) for token in renewed.scalars())
        return kept

    def fenced_update(
        self,
        model: type[Base],
        row_id: str,
        token: str,
        values: Mapping[str, Any],
        *,
        where: ColumnElement[bool] | None = None,
    ) -> bool:
        """`UPDATE … SET values WHERE id=row_id AND lock_token=token [AND where]`.

        True if the fence (and `where`, e.g. "status is still what I read") held.
        """
        table = leased_table(model)
        touched = _LEASE_COLUMNS.intersection(values)
        if touched:
            raise ValueError(f"fenced_update may not set {sorted(touched)}; use release()")
        statement = update(table).where(table.c.id == row_id, table.c.lock_token == token)
        if where is not None:
            statement = statement.where(where)
        with self._writer.begin() as connection:
            result = connection.execute(statement.values(**values))
        return bool(result.rowcount)

    def release(
        self,
        model: type[Base],
        row_id: str,
        token: str,
        *,
        due_in: float = 0.0,
        now: datetime | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> bool:
        """Drop the lease if still held, with `values` written in the same fenced statement.

        Stamps `last_processed_at=now` and makes the row due again in `due_in` seconds, or
        now if `make_due` woke it while it was in hand (an event it must not sleep through).
        Returns whether the fence held (False: the lease had been lost, nothing written).
        """
        table = leased_table(model)
        now = now or self.now()
        update_map: dict[str, Any] = dict(values or {})
        update_map.update(release_values(table, now, due_in))
        with self._writer.begin() as connection:
            result = connection.execute(
                update(table)
                .where(table.c.id == row_id, table.c.lock_token == token)
                .values(**update_map)
            )
        return bool(result.rowcount)

    def load(self, model: type[RowT], row_id: str, token: str) -> RowT | None:
        """The row if this lease still holds it, else None (reload before processing)."""
        leased_table(model)
        with Session(self._engine, expire_on_commit=False) as session:
            row = session.get(model, row_id)
            if row is None or getattr(row, "lock_token", None) != token:
                return None
            return row

    def make_due(self, model: type[Base], row_id: str) -> bool:
        """Make the row due now (after an API write); the caller then hints the worker.

        A row in hand is processed again as soon as its lease is released."""
        return self.make_due_where(model, leased_table(model).c.id == row_id) > 0

    def make_due_where(self, model: type[Base], where: ColumnElement[bool]) -> int:
        """Make every row matching `where` due now, in one statement; how many matched."""
        table = leased_table(model)
        with self._writer.begin() as connection:
            result = connection.execute(update(table).where(where).values(due_at=None))
        return int(result.rowcount)

    def next_due(
        self, model: type[Base], *, where: ColumnElement[bool] | None = None
    ) -> float | None:
        """Seconds until the earliest row matching `where` can be claimed (0: one is due
        now; a leased row counts at its lease's expiry), or None if there is none."""
        query = self._built(
            "next_due", model, where, lambda: _next_due_statement(leased_table(model), where)
        )
        with self._unpinned.connect() as connection:
            value = connection.execute(query).scalar()
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return max(0.0, float((value - self.now()).total_seconds()))


def _claim_statements(
    table: Table, where: ColumnElement[bool] | None, postgres: bool
) -> tuple[Select[Any], Update]:
    """The claim's SELECT of due rows and its stamping UPDATE, built once per table and
    filter (`workleasing.pending_work` keeps one filter per kind) and run with bind
    parameters: building them cost more CPU than running them."""
    c = table.c
    now = bindparam("p_now", type_=c.due_at.type)
    due = and_(
        or_(c.due_at.is_(None), c.due_at <= now),
        or_(c.lock_expires_at.is_(None), c.lock_expires_at <= now),
    )
    if where is not None:
        due = and_(due, where)
    query = (
        select(c.id)
        .where(due)
        .order_by(c.last_processed_at.asc().nulls_first(), c.id)
        .limit(bindparam("p_limit"))
    )
    if postgres:
        query = query.with_for_update(skip_locked=True)
    stamp = (
        update(table)
        .where(c.id == bindparam("p_row"))
        .values(
            lock_token=bindparam("p_token"),
            lock_expires_at=bindparam("p_expires", type_=c.lock_expires_at.type),
            lock_owner=bindparam("p_owner"),
            due_at=now,  # `make_due` while in hand clears it: `release` sees the wake
        )
    )
    return query, stamp


def _next_due_statement(table: Table, where: ColumnElement[bool] | None) -> Select[Any]:
    """`Leases.next_due`'s query, built once per table and filter."""
    c = table.c
    never = literal(datetime(1970, 1, 1, tzinfo=UTC), type_=c.due_at.type)
    earliest = func.min(func.coalesce(c.lock_expires_at, c.due_at, never), type_=c.due_at.type)
    query = select(earliest)
    return query if where is None else query.where(where)
