"""The `approvals` table: policy exceptions approved on a pull request (docs/policies.md).

One row per (project, tree, approver): the tree is the git tree of the approved head
commit. Written and read only by `reconciler.adapters.db.approvals`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from reconciler.adapters.db.models.base import Base, JSONText, UTCDateTime, id_column


class ApprovalRow(Base, kw_only=True):
    __tablename__ = "approvals"
    __table_args__ = (
        UniqueConstraint("project", "tree", "approver"),
        Index("ix_approvals_project_tree", "project", "tree"),
    )

    id: Mapped[str] = id_column()
    project: Mapped[str] = mapped_column(String(64))
    tree: Mapped[str] = mapped_column(String(64))
    head: Mapped[str] = mapped_column(String(64))
    approver: Mapped[str] = mapped_column(String(255))
    provider: Mapped[str] = mapped_column(String(16))
    repo: Mapped[str] = mapped_column(String(255))
    number: Mapped[int] = mapped_column(Integer)
    comment_id: Mapped[int] = mapped_column(BigInteger)
    violations: Mapped[Any] = mapped_column(JSONText)
    approved_at: Mapped[datetime] = mapped_column(UTCDateTime())
