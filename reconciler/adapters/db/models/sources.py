"""The `sources` table: the config repos the server follows (`reconciler.domain.sources`).

One row per source, from the admin API (`origin` "api") or declared at start by the
`--sources-config` file or the `--repo` flags ("file", "flags": written again at each
start, `SourcesStore.declare_sources`). `project_name` is unique: one source per project,
whichever replica adds it. Written by `reconciler.adapters.db.sources`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, Float, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from reconciler.adapters.db.models.base import Base, JSONText, UTCDateTime, id_column


class SourceRow(Base, kw_only=True):
    __tablename__ = "sources"

    id: Mapped[str] = id_column()
    name: Mapped[str] = mapped_column(String(100), unique=True)
    project_name: Mapped[str] = mapped_column(String(100), unique=True)
    repo: Mapped[str] = mapped_column(Text)
    branch: Mapped[str] = mapped_column(String(200))
    paths: Mapped[Any] = mapped_column(JSONText)
    fetch_interval: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    suspended: Mapped[bool] = mapped_column(Boolean, default=False)
    webhook_secret_ref: Mapped[str | None] = mapped_column(Text, nullable=True, default=None)
    credentials_ref: Mapped[str | None] = mapped_column(Text, nullable=True, default=None)
    origin: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
