"""The declarative base and the column types every table shares.

All ids are UUID strings (`new_id`), all timestamps are timezone-aware UTC (`UTCDateTime`
stores naive UTC on SQLite, `timestamptz` on PostgreSQL, and always hands back aware
datetimes), and spec-like columns are canonical JSON text (`JSONText`). Models are
dataclass-mapped with keyword-only constructors, so `Run(project_id=..., ...)` is checked by
mypy. There are no ORM relationships: the store joins explicitly, so a row handed out by the
`Store` is a detached plain value that never lazy-loads.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Dialect, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedAsDataclass, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def new_id() -> str:
    """A fresh row id: a random UUID as a string."""
    return str(uuid.uuid4())


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both databases.

    SQLite has no time zones: values are stored as naive UTC text (which sorts correctly) and
    come back with `tzinfo=UTC`. A naive datetime given to the store is refused, because its
    meaning would depend on the machine's zone.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given to the store; use UTC-aware")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class JSONText(TypeDecorator[Any]):
    """Any JSON-able value stored as canonical JSON text (sorted keys, no spaces)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


class Base(MappedAsDataclass, DeclarativeBase, kw_only=True):
    """Base of every Dockyard table; `Base.metadata` is what the migrations must match."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def id_column() -> Mapped[str]:
    """The primary key every table (but `members`) has: a UUID string made on construction."""
    return mapped_column(String(36), primary_key=True, default_factory=new_id)


class Leased(MappedAsDataclass, kw_only=True):
    """Columns of the rows that background workers take with a lease (see `leasing.py`).

    `last_processed_at` orders the claim (never processed = NULL = first); `due_at` is when
    the row wants processing again (NULL = now); `lock_token` is the fence every write of a
    worker carries.
    """

    due_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    last_processed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    lock_token: Mapped[str | None] = mapped_column(String(36), default=None)
    lock_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    lock_owner: Mapped[str | None] = mapped_column(String(200), default=None)
