"""Fleets, their instances, volumes and gateways: the capacity rows the workers lease.

`instances.busy_blocks/total_blocks` is how many of an instance's blocks jobs hold; the
scheduler (engine) decides, this module only stores. `outputs` of volumes and gateways are
what the stacks engine returned from `up`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from reconciler.adapters.db.models.base import Base, JSONText, Leased, UTCDateTime, id_column


class Fleet(Leased, Base, kw_only=True):
    __tablename__ = "fleets"

    id: Mapped[str] = id_column()
    project_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[Any] = mapped_column(JSONText)
    status: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    resource_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("resources.id", ondelete="SET NULL"), default=None
    )
    status_message: Mapped[str] = mapped_column(Text, default="")
    deleted: Mapped[bool] = mapped_column(default=False)


class Instance(Leased, Base, kw_only=True):
    __tablename__ = "instances"

    id: Mapped[str] = id_column()
    fleet_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("fleets.id", ondelete="CASCADE"), index=True
    )
    project_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    instance_num: Mapped[int] = mapped_column(Integer, default=0)
    hostname: Mapped[str | None] = mapped_column(String(255), default=None)
    ssh_port: Mapped[int | None] = mapped_column(Integer, default=None)
    ssh_user: Mapped[str | None] = mapped_column(String(100), default=None)
    agent_port: Mapped[int | None] = mapped_column(Integer, default=None)
    backend: Mapped[str | None] = mapped_column(String(32), default=None)
    region: Mapped[str | None] = mapped_column(String(64), default=None)
    instance_type: Mapped[str | None] = mapped_column(String(100), default=None)
    price: Mapped[float | None] = mapped_column(Float, default=None)
    resources: Mapped[Any] = mapped_column(JSONText, default=None, nullable=True)
    host_info: Mapped[Any] = mapped_column(JSONText, default=None, nullable=True)
    busy_blocks: Mapped[int] = mapped_column(Integer, default=0)
    total_blocks: Mapped[int] = mapped_column(Integer, default=1)
    termination_reason: Mapped[str | None] = mapped_column(String(64), default=None)
    status_message: Mapped[str] = mapped_column(Text, default="")
    last_job_processed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    unreachable_since: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class Volume(Leased, Base, kw_only=True):
    __tablename__ = "volumes"

    id: Mapped[str] = id_column()
    project_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[Any] = mapped_column(JSONText)
    status: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    resource_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("resources.id", ondelete="SET NULL"), default=None
    )
    status_message: Mapped[str] = mapped_column(Text, default="")
    outputs: Mapped[Any] = mapped_column(JSONText, default=None, nullable=True)
    deleted: Mapped[bool] = mapped_column(default=False)


class Gateway(Leased, Base, kw_only=True):
    __tablename__ = "gateways"

    id: Mapped[str] = id_column()
    project_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[Any] = mapped_column(JSONText)
    status: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    resource_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("resources.id", ondelete="SET NULL"), default=None
    )
    status_message: Mapped[str] = mapped_column(Text, default="")
    outputs: Mapped[Any] = mapped_column(JSONText, default=None, nullable=True)
    deleted: Mapped[bool] = mapped_column(default=False)
