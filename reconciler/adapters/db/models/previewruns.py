"""The `preview_runs` table: one row per pull request that asked for a preview
(docs/previews.md). Written and read only by `reconciler.adapters.db.previewruns`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Float, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from reconciler.adapters.db.models.base import Base, JSONText, UTCDateTime, id_column


class PreviewRunRow(Base, kw_only=True):
    __tablename__ = "preview_runs"
    __table_args__ = (
        UniqueConstraint("provider", "repo", "number"),
        Index("ix_preview_runs_state", "state"),
    )

    id: Mapped[str] = id_column()
    provider: Mapped[str] = mapped_column(String(16))
    repo: Mapped[str] = mapped_column(String(255))
    number: Mapped[int] = mapped_column(Integer)
    project: Mapped[str] = mapped_column(String(100))
    preview_project: Mapped[str] = mapped_column(String(100), unique=True)
    state: Mapped[str] = mapped_column(String(16))
    head: Mapped[str] = mapped_column(String(64))
    requested_by: Mapped[str] = mapped_column(String(255))
    trigger: Mapped[str] = mapped_column(String(16))
    fork: Mapped[bool] = mapped_column(default=False)
    hourly: Mapped[float] = mapped_column(Float, default=0.0)
    prices: Mapped[Any] = mapped_column(JSONText, default=None, nullable=True)
    notes: Mapped[Any] = mapped_column(JSONText, default=None, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    comment_id: Mapped[int | None] = mapped_column(BigInteger, default=None, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    deployed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
