"""Tables of the server's own operation: background maintenance tasks and live replicas.

`maintenance` holds one leased row per periodic task (today: `retention`), so the sweep runs
on one replica at a time through the same leases as the workers. `host_teardowns` holds, for
a deleted project, one leased row per host its jobs or fleets used: where the host's agent
is and which of its jobs to stop (`reconciler.adapters.db.teardowns`; the teardowns
worker). `replicas` is where each running server says which version and build it is and
when it last beat, so a server of another build refuses to start against a database a live
replica uses. Written by `reconciler.adapters.db.retention` and
`reconciler.adapters.db.replicas`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from reconciler.adapters.db.models.base import Base, JSONText, Leased, UTCDateTime, id_column


class Maintenance(Leased, Base, kw_only=True):
    __tablename__ = "maintenance"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the task's name
    last_result: Mapped[Any] = mapped_column(JSONText, default=None, nullable=True)


class Replica(Base, kw_only=True):
    __tablename__ = "replicas"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)  # host:digest:pid
    version: Mapped[str] = mapped_column(String(64))
    build: Mapped[str] = mapped_column(String(64))
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime())


class HostTeardown(Leased, Base, kw_only=True):
    __tablename__ = "host_teardowns"

    id: Mapped[str] = id_column()
    project_name: Mapped[str] = mapped_column(String(100))  # the deleted project's
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    host: Mapped[Any] = mapped_column(JSONText)  # the instance's address columns, as they were
    job_ids: Mapped[Any] = mapped_column(JSONText)  # the agent's ids of the jobs to stop there
    status_message: Mapped[str] = mapped_column(Text, default="")
